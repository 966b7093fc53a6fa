"""Every way to submit through the API answers a taken key alike, on every store backend.

The store-level check of each entry point is the store contract's ``SUBMISSION_PATHS``; these
tests drive the public API, whose builders put the keys where a user puts them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import flow_jobs
import gate_jobs
import pytest
from sqlalchemy import func, select

from ratchet import (
    DuplicateBusinessKeyError,
    DuplicateIdempotencyKeyError,
    JobFilter,
    JobHandle,
    Ratchet,
)
from ratchet.sql import schema

KEY = "invoice-2026-17"


@pytest.fixture
def app(store: Any) -> Iterator[Ratchet]:
    app = Ratchet(store.url, allowed_modules=["gate_jobs", "flow_jobs"], auto_migrate=False)
    yield app
    app.close()


def _many(app: Ratchet) -> Any:
    return app.submit_many(
        [app.enqueue(gate_jobs.plain, 1), app.enqueue(gate_jobs.plain, 2).with_business_key(KEY)]
    )


PATHS: dict[str, Callable[[Ratchet], Any]] = {
    "submit": lambda app: app.enqueue(gate_jobs.plain, 1).with_business_key(KEY).submit(),
    "submit_many": _many,
    "then": lambda app: (
        app.enqueue(gate_jobs.plain, 1).with_business_key(KEY).then(gate_jobs.plain, 2).submit()
    ),
    "then_on_success": lambda app: (
        app.enqueue(gate_jobs.plain, 1)
        .with_business_key(KEY)
        .then_on_success(gate_jobs.plain, 2)
        .submit()
    ),
    "on_success": lambda app: (
        app.enqueue(gate_jobs.plain, 1).with_business_key(KEY).on_success(flow_jobs.on_ok).submit()
    ),
    "with_await_signal": lambda app: (
        app.enqueue(gate_jobs.plain, 1)
        .with_business_key(KEY)
        .with_await_signal("approve:17", timedelta(hours=1))
        .submit()
    ),
}


@pytest.mark.parametrize("path", PATHS)
def test_a_taken_business_key_raises_the_typed_error_on_every_submit_path(
    app: Ratchet, path: str
) -> None:
    holder = app.enqueue(gate_jobs.plain, 0).with_business_key(KEY).submit()
    with pytest.raises(DuplicateBusinessKeyError) as err:
        PATHS[path](app)
    assert (err.value.key, err.value.holder) == (KEY, holder.id)
    assert [r.job_id for r in app.list_jobs(JobFilter())] == [holder.id], "nothing was stored"


def test_a_taken_recurring_business_key_raises_the_typed_error(app: Ratchet) -> None:
    def master() -> Any:
        return app.schedule_recurring_utc("0 0 * * * ?", gate_jobs.plain, 1).with_business_key(KEY)

    first = master().submit()
    with pytest.raises(DuplicateBusinessKeyError) as err:
        master().submit()
    assert (err.value.key, err.value.holder) == (KEY, first.id)


def test_a_flow_that_loses_an_idempotency_key_race_returns_the_winner(
    app: Ratchet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As ``submit()`` of a plain job: a racing submitter stored the key between the flow's
    check and its insert (the store raises), so the submit looks again in a fresh transaction
    and returns the winner's handle."""
    store: Any = app.store
    real = store.insert_flow
    calls: list[int] = []
    winner: list[JobHandle] = []

    def racing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:  # the racer commits first, then this insert hits its key
            winner.append(
                app.enqueue(gate_jobs.plain, 0).with_idempotency_key("webhook-9").submit()
            )
            raise DuplicateIdempotencyKeyError("webhook-9", winner[0].id)
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "insert_flow", racing)
    handle = (
        app.enqueue(gate_jobs.plain, 1)
        .with_idempotency_key("webhook-9")
        .then(gate_jobs.plain, 2)
        .submit()
    )
    assert (handle.id, handle.inserted) == (winner[0].id, False)
    assert len(calls) == 2
    assert [r.job_id for r in app.list_jobs(JobFilter())] == [winner[0].id]


@pytest.mark.parametrize("size", [1, 3, 600], ids=["one", "a batch", "streamed in chunks"])
def test_builders_submitted_again_answer_with_their_jobs(app: Ratchet, size: int) -> None:
    """A builder names one job: submitting it again, after its job went in (alone, in a batch,
    or in a batch large enough to be streamed in chunks), stores nothing more and answers with
    the job it stored, whose row holds its key (no key row is written for it)."""
    builders = [app.enqueue(gate_jobs.plain, i) for i in range(size)]
    first = app.submit_many(builders)
    assert all(h.inserted for h in first)
    extra = app.enqueue(gate_jobs.plain, -1)
    again = app.submit_many([*builders, extra])
    assert [(h.id, h.inserted) for h in again[:-1]] == [(h.id, False) for h in first]
    assert again[-1].inserted
    alone = builders[0].submit()
    assert (alone.id, alone.inserted) == (first[0].id, False)
    assert len(app.list_jobs(JobFilter(), limit=1000)) == size + 1
    assert app.store.find_by_idempotency_key(builders[0].idempotency_key) == first[0].id
    with app.store.engine.connect() as conn:
        key_rows = conn.execute(select(func.count()).select_from(schema.idempotency_key))
        assert key_rows.scalar_one() == 0


def test_a_flow_submitted_again_answers_with_its_head(app: Ratchet) -> None:
    """A flow's head keyed by its own id is held by its row (no key row for it): the same
    builder submitted again stores nothing and answers with the head."""
    flow = app.enqueue(gate_jobs.plain, 1).then(gate_jobs.plain, 2)
    first = flow.submit()
    again = flow.submit()
    assert (again.id, again.inserted) == (first.id, False)
    assert len(app.list_jobs(JobFilter())) == 2
    with app.store.engine.connect() as conn:
        keyed = set(conn.execute(select(schema.idempotency_key.c.job_id)).scalars())
    assert first.id not in keyed and len(keyed) == 1, "a key row for the step only"


def test_one_builder_submitted_from_several_threads_at_once_stores_one_job(app: Ratchet) -> None:
    builder = app.enqueue(gate_jobs.plain, 1)
    start = threading.Barrier(4)
    handles: list[JobHandle] = []

    def submit() -> None:
        start.wait(timeout=30)
        handles.append(builder.submit())

    threads = [threading.Thread(target=submit) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(handles) == 4
    assert len({h.id for h in handles}) == 1
    assert sum(h.inserted for h in handles) == 1
    assert [r.job_id for r in app.list_jobs(JobFilter())] == [handles[0].id]
