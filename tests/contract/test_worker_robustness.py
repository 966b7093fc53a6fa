"""A worker against hostile jobs and races, on every store backend.

A running worker (its poller, job threads and batched outcome writer) drains a queue that mixes
ordinary jobs with jobs whose error messages hold characters some databases cannot store, and
with outcomes the store refuses outright: every job must end, and the ordinary ones succeed. A
job canceled between its claim and its start never runs its body.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import poison_jobs
import pytest

from ratchet import JobStatus, Ratchet
from ratchet.domain.model import Outcome, OutcomeWrite
from ratchet.engine.worker import Worker

ENDED = {JobStatus.SUCCEEDED, JobStatus.FAILED}


@pytest.fixture
def app(store: Any, support_path: Any) -> Iterator[Ratchet]:
    app = Ratchet(store.url, allowed_modules=["poison_jobs"], auto_migrate=False)
    yield app
    app.close()


def drain(app: Ratchet, handles: Sequence[Any], **settings: Any) -> Worker:
    """Run a real worker until every job in ``handles`` has ended (or fail after 30 s)."""
    worker = app.worker(concurrency=8, **settings)
    worker.start()
    try:
        ended = worker.wait_until(lambda: all(h.status() in ENDED for h in handles), 30)
    finally:
        worker.stop()
    assert ended, {h.id: h.status() for h in handles}
    return worker


def test_error_messages_with_nul_or_lone_surrogates_are_stored_and_wedge_nothing(
    app: Ratchet, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ratchet")
    plain = [app.enqueue(poison_jobs.ok, n).submit() for n in range(6)]
    nul = app.enqueue(poison_jobs.raise_nul).submit()
    lone = app.enqueue(poison_jobs.raise_surrogate).submit()
    unprintable = app.enqueue(poison_jobs.raise_unprintable).submit()
    odd_result = app.enqueue(poison_jobs.return_nul).submit()

    drain(app, [*plain, nul, lone, unprintable, odd_result])

    assert [h.status() for h in plain] == [JobStatus.SUCCEEDED] * 6
    assert [h.result() for h in plain] == list(range(6))
    assert odd_result.status() is JobStatus.SUCCEEDED
    assert odd_result.result() == "a\x00b"  # JSON escapes NUL: stored exactly
    errors = {h.id: h.record().last_error for h in (nul, lone, unprintable)}
    assert errors[nul.id] == "ValueError: bad\\x00nul"
    assert errors[lone.id] == "ValueError: bad \\ud800 surrogate"
    assert errors[unprintable.id] == (
        "poison_jobs.UnprintableError: <message unavailable: its __str__ raised RuntimeError>"
    )
    assert [h.status() for h in (nul, lone, unprintable)] == [JobStatus.FAILED] * 3
    assert "database unavailable" not in caplog.text


class RefusingStore:
    """Delegates to a real store, but refuses (as a database would refuse a value it cannot
    hold) every outcome write that includes one of ``poisoned`` and is not a failure."""

    def __init__(self, store: Any, poisoned: set[UUID]) -> None:
        self._store = store
        self.poisoned = poisoned
        self.refused = 0

    def record_outcomes(
        self, node_id: str, outcomes: Sequence[Outcome], *, now: datetime, **options: Any
    ) -> OutcomeWrite:
        if any(o.job_id in self.poisoned and o.error is None for o in outcomes):
            self.refused += 1
            raise ValueError("value cannot be converted to the column's type")
        written: OutcomeWrite = self._store.record_outcomes(node_id, outcomes, now=now, **options)
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_an_outcome_the_store_refuses_fails_only_its_own_job(
    app: Ratchet, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="ratchet")
    plain = [app.enqueue(poison_jobs.ok, n).submit() for n in range(10)]
    poisoned = app.enqueue(poison_jobs.ok, 99).submit()
    refusing = RefusingStore(app.store, {poisoned.id})
    app.store = refusing  # type: ignore[assignment]
    try:
        worker = drain(app, [*plain, poisoned])
    finally:
        app.store = refusing._store

    assert refusing.refused >= 1
    assert [h.status() for h in plain] == [JobStatus.SUCCEEDED] * 10
    record = poisoned.record()
    assert record is not None
    assert record.status is JobStatus.FAILED
    assert record.last_error is not None
    assert record.last_error.startswith("ratchet.domain.errors.OutcomeNotStorable: the SUCCEEDED")
    assert "value cannot be converted" in record.last_error
    assert record.attempts == 1  # dead-lettered at once: the same outcome would be refused again
    assert worker.stats.succeeded == 10
    assert "database unavailable" not in caplog.text
    assert "writing them one at a time" in caplog.text


def test_a_job_canceled_between_claim_and_start_never_runs(app: Ratchet) -> None:
    canceled = app.enqueue(poison_jobs.side_effect, "canceled-before-start").submit()
    kept = app.enqueue(poison_jobs.side_effect, "kept").submit()
    worker = app.worker(concurrency=4)
    claimed = {job.job_id: job for job in worker.poll_once()}
    assert set(claimed) == {canceled.id, kept.id}
    assert app.cancel_job(canceled.id)

    assert worker.execute(claimed[canceled.id]) is None
    outcome = worker.execute(claimed[kept.id])
    assert outcome is not None
    worker.record([outcome])

    assert "canceled-before-start" not in poison_jobs.RAN
    assert "kept" in poison_jobs.RAN
    assert canceled.status() is JobStatus.CANCELED
    assert kept.status() is JobStatus.SUCCEEDED


def test_wait_until_may_call_the_worker_from_its_predicate(app: Ratchet) -> None:
    worker = app.worker(concurrency=2)
    answers: list[bool] = []
    waiter = threading.Thread(
        target=lambda: answers.append(worker.wait_until(lambda: worker.free_slots() == 2, 3))
    )
    waiter.start()
    waiter.join(10)
    assert not waiter.is_alive(), "wait_until deadlocked on its own predicate"
    assert answers == [True]
    started = time.monotonic()
    assert worker.wait_until(lambda: worker.free_slots() == 3, 0.3) is False
    assert 0.3 <= time.monotonic() - started < 5


def test_a_failed_attempt_keeps_its_traceback(app: Ratchet) -> None:
    failing = app.enqueue(poison_jobs.raise_nul).submit()
    ok = app.enqueue(poison_jobs.ok, 1).submit()
    app.worker(concurrency=2).run_due()
    [attempt] = app.attempts(failing.id)
    assert attempt.traceback is not None
    assert attempt.traceback.startswith("Traceback (most recent call last):")
    assert 'poison_jobs.py", line' in attempt.traceback and "in raise_nul" in attempt.traceback
    assert attempt.traceback.rstrip().endswith("ValueError: bad\\x00nul")
    assert [a.traceback for a in app.attempts(ok.id)] == [None]
