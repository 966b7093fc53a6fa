"""Timeouts end to end on SQLite: the cancellation-exception rules, retries / backoff / DLQ,
``cancel_job(id, interrupt=True)``, and the deadline a job sees."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import timeout_jobs as tj
from timeout_harness import Events, running_worker, wait_for

from ratchet import BackoffPolicy, EventKind, JobStatus, Ratchet
from ratchet.domain.model import OutcomeKind
from ratchet.testing import FakeClock


@pytest.fixture
def app(sqlite_url: str) -> Iterator[Ratchet]:
    app = Ratchet(sqlite_url, allowed_modules=["timeout_jobs"])
    yield app
    app.close()


@pytest.fixture
def events(app: Ratchet) -> Events:
    return Events(app)


# ------------------------------------------------------------------ the exception rules
RULES = [
    (tj.raise_created_before_request, False, "created before the request"),
    (tj.raise_after_request, True, "throw_if_cancellation_requested after the request"),
    (tj.raise_wrapped_as_cause, True, "wrapped as the __cause__ of another error"),
    (tj.raise_in_handler, True, "another error raised while handling it (__context__)"),
    (tj.raise_for_context_from_thread, True, "for_context on another thread"),
    (tj.raise_plain_from_thread, False, "plain constructor on another thread (no context)"),
]


def test_which_cancellation_exceptions_count_as_timeouts(app: Ratchet, events: Events) -> None:
    with running_worker(app, concurrency=4) as worker:
        handles = [(app.enqueue(fn).submit(), timeout, why) for fn, timeout, why in RULES]
        events.settle(*(h for h, _, _ in handles))
        for handle, timeout, why in handles:
            assert handle.status() is JobStatus.FAILED, why
            timed_out = events.of(EventKind.TIMED_OUT, handle.id)
            assert len(timed_out) == (1 if timeout else 0), why
        assert worker.stats.timed_out == sum(1 for _, t, _ in RULES if t)


def test_exception_kept_from_an_earlier_attempt_is_an_ordinary_failure(
    app: Ratchet, events: Events
) -> None:
    with running_worker(app):
        handle = app.enqueue(tj.reraise_from_earlier_attempt, "k1").with_max_retries(1).submit()
        events.settle(handle)
    kinds = [
        k for k in events.kinds(handle.id) if k not in (EventKind.SUBMITTED, EventKind.STARTED)
    ]
    assert kinds == [
        EventKind.TIMED_OUT,  # attempt 1 stopped on its own request
        EventKind.FAILED,
        EventKind.RETRYING,
        EventKind.FAILED,  # attempt 2 re-raised attempt 1's exception: no timeout
        EventKind.DEAD_LETTERED,
    ]
    assert events.of(EventKind.TIMED_OUT, handle.id)[0].data["attempt"] == 1


def test_a_job_that_returns_after_the_request_succeeded(app: Ratchet, events: Events) -> None:
    with running_worker(app):
        handle = app.enqueue(tj.return_after_request).submit()
        events.settle(handle)
    assert handle.status() is JobStatus.SUCCEEDED
    assert handle.result() == "finished anyway"
    assert not events.of(EventKind.TIMED_OUT)


# ------------------------------------------------------------------ retries, backoff, DLQ
def test_timeouts_go_through_retries_backoff_and_the_dlq(
    app: Ratchet, events: Events, tmp_path: Path
) -> None:
    log = str(tmp_path / "overrun.log")
    with running_worker(app):
        handle = (
            app.enqueue(tj.overrun, log, 30)
            .with_timeout(timedelta(seconds=0.3))
            .with_max_retries(2)
            .with_backoff(BackoffPolicy.FIXED, timedelta(seconds=0.2))
            .submit()
        )
        events.settle(handle)
    kinds = [k for k in events.kinds(handle.id) if k is not EventKind.STARTED]
    timeout_fail = [EventKind.TIMED_OUT, EventKind.FAILED]
    assert kinds == [
        EventKind.SUBMITTED,
        *timeout_fail,
        EventKind.RETRYING,
        *timeout_fail,
        EventKind.RETRYING,
        *timeout_fail,
        EventKind.DEAD_LETTERED,
    ]
    assert [e.data["attempt"] for e in events.of(EventKind.TIMED_OUT)] == [1, 2, 3]
    record = handle.record()
    assert record.status is JobStatus.FAILED and record.attempts == 3
    history = app.attempts(handle.id)
    assert [a.outcome for a in history] == ["RETRY", "RETRY", "DEAD"]
    assert all("exceeded its 0.3s timeout" in (a.error or "") for a in history)
    for failed, retrying in zip(
        events.of(EventKind.FAILED)[:2], events.of(EventKind.RETRYING), strict=True
    ):
        assert retrying.data["retry_at"] - failed.at == timedelta(seconds=0.2)  # the backoff
    for earlier, later in itertools.pairwise(history):
        assert later.started_at - earlier.started_at >= timedelta(seconds=0.5)  # 0.3 + 0.2


def test_a_retry_after_a_timeout_can_succeed(app: Ratchet, events: Events, tmp_path: Path) -> None:
    log = str(tmp_path / "once.log")
    with running_worker(app):
        handle = (
            app.enqueue(tj.times_out_on_first_attempt, log, 30)
            .with_timeout(timedelta(seconds=0.3))
            .with_max_retries(1)
            .submit()
        )
        events.settle(handle)
    assert handle.status() is JobStatus.SUCCEEDED and handle.result() == 2
    assert len(events.of(EventKind.TIMED_OUT, handle.id)) == 1


def test_cooperative_timeout_retry_decisions_on_a_fake_clock(sqlite_url: str) -> None:
    """No threads, no sleeping: claim and execute by hand on a FakeClock."""
    clock = FakeClock()
    app = Ratchet(sqlite_url, allowed_modules=["timeout_jobs"], clock=clock)
    events = Events(app)
    try:
        worker = app.worker(default_sla=timedelta(minutes=10))
        handle = (
            app.enqueue(tj.raise_after_request)
            .with_max_retries(2)
            .with_backoff(BackoffPolicy.EXPONENTIAL, timedelta(seconds=10))
            .submit()
        )
        worker.liveness.register()
        delays = []
        for _ in range(3):
            (job,) = worker.poll_once()
            outcome = worker.execute(job)
            assert outcome is not None
            assert worker.record([outcome]) == []
            if outcome.kind is OutcomeKind.RETRY:
                assert outcome.retry_at is not None
                delays.append(outcome.retry_at - clock.now())
                clock.set(outcome.retry_at)
        assert outcome.kind is OutcomeKind.DEAD
        assert delays == [timedelta(seconds=10), timedelta(seconds=20)]
        timed_out = events.of(EventKind.TIMED_OUT, handle.id)
        assert [e.data["attempt"] for e in timed_out] == [1, 2, 3]
        assert timed_out[0].data["executionTimeout"] == timedelta(minutes=10)  # the default SLA
        assert timed_out[0].data["elapsed"] == timedelta(0)  # the clock did not move
        assert worker.stats.timed_out == 3
    finally:
        app.close()


def test_a_job_sees_its_deadline(sqlite_url: str) -> None:
    clock = FakeClock()
    app = Ratchet(sqlite_url, allowed_modules=["timeout_jobs"], clock=clock)
    try:
        worker = app.worker(default_sla=timedelta(minutes=7))
        app.enqueue(tj.report_deadline).with_timeout(timedelta(seconds=42)).submit()
        app.enqueue(tj.report_deadline).submit()
        worker.liveness.register()
        results = set()
        for job in worker.poll_once():
            outcome = worker.execute(job)
            assert outcome is not None and outcome.result is not None
            results.add(outcome.result.strip('"'))
        assert results == {
            (clock.now() + timedelta(seconds=42)).isoformat(),
            (clock.now() + timedelta(minutes=7)).isoformat(),
        }
    finally:
        app.close()


# ------------------------------------------------------------------ cancel_job(interrupt=True)
@pytest.mark.parametrize("executor", ["threads", "processes"])
def test_cancel_with_interrupt_reaches_the_running_attempt(
    app: Ratchet, events: Events, tmp_path: Path, executor: str
) -> None:
    log = str(tmp_path / "units.log")
    with running_worker(app) as worker:
        builder: Any = app.enqueue(tj.units_with_safe_points, log, 1000, 0.02)
        if executor == "processes":
            builder = builder.with_executor("processes")
        handle = builder.with_timeout(timedelta(seconds=60)).submit()
        wait_for(lambda: "unit 1 end" in tj.lines(log), 10, "the job to get going")
        assert app.cancel_job(handle.id, interrupt=True)
        assert handle.status() is JobStatus.CANCELED  # at once, as with a plain cancel
        wait_for(lambda: tj.lines(log)[-1:] == ["stopped at a safe point"], 5, "a safe stop")
        wait_for(lambda: worker.stats.fenced_out == 1, 5, "its outcome to be fenced out")
        assert worker.stats.cancellations_delivered == 1
        assert handle.status() is JobStatus.CANCELED
        assert not events.of(EventKind.TIMED_OUT), "a discarded outcome publishes nothing"
        assert not app.cancel_job(handle.id, interrupt=True), "already terminal"


def test_a_cancel_with_interrupt_is_announced_to_the_node_at_once(
    app: Ratchet, tmp_path: Path
) -> None:
    """The stored request is announced through the coordinator: the node reads it now, not at
    its next poll of requests (an hour away here)."""
    log = str(tmp_path / "units.log")
    with running_worker(app, cancel_request_interval=timedelta(hours=1)) as worker:
        handle = (
            app.enqueue(tj.units_with_safe_points, log, 1000, 0.02)
            .with_timeout(timedelta(seconds=60))
            .submit()
        )
        wait_for(lambda: "unit 1 end" in tj.lines(log), 10, "the job to get going")
        wakeups = worker.stats.wakeups_received
        assert app.cancel_job(handle.id, interrupt=True)
        wait_for(lambda: tj.lines(log)[-1:] == ["stopped at a safe point"], 10, "a safe stop")
        assert worker.stats.cancellations_delivered == 1
        assert worker.stats.wakeups_received == wakeups, "the announcement is not a wakeup"


def test_a_plain_cancel_does_not_set_the_request(
    app: Ratchet, events: Events, tmp_path: Path
) -> None:
    log = str(tmp_path / "units.log")
    with running_worker(app) as worker:
        handle = app.enqueue(tj.units_with_safe_points, log, 15, 0.02).submit()
        wait_for(lambda: "unit 1 end" in tj.lines(log), 10, "the job to get going")
        assert app.cancel_job(handle.id)
        wait_for(lambda: worker.stats.fenced_out == 1, 5, "its outcome to be fenced out")
        assert tj.lines(log)[-1] == "done", "it ran to the end; its result was discarded"
        assert worker.stats.cancellations_delivered == 0
        assert handle.status() is JobStatus.CANCELED and handle.result() is None
