"""Bulk submissions run with Python's cyclic garbage collector paused, on every store backend,
through each store's own insert path (PostgreSQL streams a large one in pipelined chunks)."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import flow_jobs
import gate_jobs
import pytest

from ratchet import Ratchet
from ratchet.engine.collector import BULK_PAUSE_MIN_JOBS

#: Store methods a submission inserts through.
INSERTS = ("insert_jobs", "insert_job_chunks", "insert_flow", "add_batch_children")


@pytest.fixture(autouse=True)
def _collector_on_after() -> Iterator[None]:
    yield
    assert gc.isenabled(), "a submission left the cyclic garbage collector switched off"


def _app(store: Any, **config: Any) -> Ratchet:
    return Ratchet(
        store.url, allowed_modules=["gate_jobs", "flow_jobs"], auto_migrate=False, **config
    )


def _watch_inserts(
    app: Ratchet, monkeypatch: pytest.MonkeyPatch, seen: list[tuple[str, bool]] | None = None
) -> list[tuple[str, bool]]:
    """Each store insert the app makes, with whether the collector was on during it (added
    to ``seen`` when given)."""
    seen = [] if seen is None else seen
    for name in INSERTS:
        method = getattr(app.store, name, None)
        if method is None:
            continue

        def watched(*args: Any, _method: Callable[..., Any] = method, _name: str = name,
                    **kwargs: Any) -> Any:  # fmt: skip
            seen.append((_name, gc.isenabled()))
            return _method(*args, **kwargs)

        monkeypatch.setattr(app.store, name, watched)
    return seen


def _submit_many(app: Ratchet, jobs: int) -> None:
    handles = app.submit_many([app.enqueue(gate_jobs.plain, i) for i in range(jobs)])
    assert len(handles) == jobs and all(h.inserted for h in handles)


@pytest.mark.parametrize("jobs", [BULK_PAUSE_MIN_JOBS, 300])
def test_a_bulk_submission_inserts_with_the_collector_paused(
    store: Any, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    app = _app(store)
    try:
        seen = _watch_inserts(app, monkeypatch)
        _submit_many(app, jobs)
        assert seen and all(not enabled for _, enabled in seen), seen
        assert gc.isenabled()
        assert sum(app.jobs.count_by_status().values()) == jobs
    finally:
        app.close()


def test_small_submissions_and_an_app_that_opted_out_leave_the_collector_alone(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    small, opted_out = _app(store), _app(store, pause_gc_in_bulk=False)
    try:
        seen = _watch_inserts(small, monkeypatch)
        _watch_inserts(opted_out, monkeypatch, seen)
        _submit_many(small, BULK_PAUSE_MIN_JOBS - 1)
        small.enqueue(gate_jobs.plain, 0).submit()
        _submit_many(opted_out, 300)
        assert len(seen) >= 3 and all(enabled for _, enabled in seen), seen
    finally:
        small.close()
        opted_out.close()


def test_a_bulk_submission_that_fails_switches_the_collector_back_on(store: Any) -> None:
    app = _app(store, max_payload_bytes=1_000)
    try:
        builders = [app.enqueue(gate_jobs.plain, i) for i in range(BULK_PAUSE_MIN_JOBS)]
        builders.append(app.enqueue(gate_jobs.plain, "x" * 2_000))
        with pytest.raises(Exception, match="cap is 1000 bytes"):
            app.submit_many(builders)
        assert gc.isenabled()
        assert sum(app.jobs.count_by_status().values()) == 0
    finally:
        app.close()


def test_batches_insert_their_children_with_the_collector_paused(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = _app(store)
    try:
        seen = _watch_inserts(app, monkeypatch)
        items = list(range(BULK_PAUSE_MIN_JOBS))
        app.enqueue_batch("numbers").for_each(items, flow_jobs.item).submit()
        (
            app.streaming_batch("streamed")
            .from_iterable(range(2 * BULK_PAUSE_MIN_JOBS))
            .process(flow_jobs.item)
            .with_chunk_size(BULK_PAUSE_MIN_JOBS)
            .start()
        )
        names = [name for name, _ in seen]
        assert names.count("insert_flow") == 2 and "add_batch_children" in names, seen
        assert all(not enabled for _, enabled in seen), seen
    finally:
        app.close()
