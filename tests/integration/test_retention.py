"""Retention, the dead-letter queue and job logs through the app on SQLite: ``context.logger()``
end to end (hostile lines included), ``app.retention`` and ``app.dlq``, and the scheduled
clean-ups of two workers sharing one database under the lease. Time is a FakeClock."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import retention_jobs

from ratchet import (
    DeadLetterFilter,
    InvalidJobOptions,
    JobLogLimits,
    JobStatus,
    Ratchet,
    RetentionSettings,
)
from ratchet.domain.joblog import LogLevel
from ratchet.domain.text import is_storable_text
from ratchet.engine.retention import DLQ_PURGE_LOCK, RETENTION_LOCK, ScheduledCleanup
from ratchet.engine.worker import Worker
from ratchet.ports import JobLogStore, RetentionStore
from ratchet.testing import FakeClock
from ratchet.testing.jobs import make_test_app

T0 = datetime(2026, 3, 2, 12, 0, 0, tzinfo=UTC)
DAY = timedelta(days=1)


@pytest.fixture(autouse=True)
def _support(support_path: Any) -> None:
    """tests/support is importable (the job module)."""


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def make_app(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., Ratchet]]:
    """Apps (nodes) on one SQLite file, sharing the FakeClock; closed at the end."""
    with ExitStack() as apps:
        yield lambda **options: apps.enter_context(
            make_test_app(["retention_jobs"], tmp_path, clock=clock, **options)
        )


@pytest.fixture
def app(make_app: Callable[..., Ratchet]) -> Ratchet:
    return make_app(retention=RetentionSettings(pause_between_batches=timedelta(0)))


def run_due(app: Ratchet) -> int:
    worker: Worker = app.worker(concurrency=4, batch_size=4)
    return worker.run_due()


# ---------------------------------------------------------------------------- job logs
def test_a_jobs_log_is_stored_per_attempt_with_levels(app: Ratchet, clock: FakeClock) -> None:
    handle = app.enqueue(retention_jobs.fails_after_logging).with_max_retries(1).submit()
    run_due(app)
    clock.advance(timedelta(minutes=5))
    run_due(app)
    assert app.get_job(handle.id).status is JobStatus.FAILED
    lines = app.retention.job_logs(handle.id)
    by_attempt = [(ln.attempt, ln.level, ln.message.splitlines()[0]) for ln in lines]
    assert by_attempt == [
        (1, LogLevel.INFO, "starting attempt 1"),
        (1, LogLevel.ERROR, "lookup failed"),
        (2, LogLevel.INFO, "starting attempt 2"),
        (2, LogLevel.ERROR, "lookup failed"),
    ]
    assert "KeyError: 'missing-row'" in lines[1].message, "exception() logs the traceback"


def run_due_in_processes(app: Ratchet) -> int:
    """``run_due``, then the worker's child processes stopped."""
    worker: Worker = app.worker(concurrency=4, batch_size=4)
    try:
        return worker.run_due()
    finally:
        for executor in worker.runner.executors():
            executor.shutdown(wait=True)


def test_a_job_in_a_child_process_has_its_log_stored_too(app: Ratchet) -> None:
    handle = (
        app.enqueue(retention_jobs.fails_after_logging)
        .with_executor("processes")
        .with_max_retries(0)
        .submit()
    )
    ok = app.enqueue(retention_jobs.chatty, 2).with_executor("processes").submit()
    run_due_in_processes(app)
    assert app.get_job(handle.id).status is JobStatus.FAILED
    failed = app.retention.job_logs(handle.id)
    assert [(ln.attempt, ln.level, ln.message.splitlines()[0]) for ln in failed] == [
        (1, LogLevel.INFO, "starting attempt 1"),
        (1, LogLevel.ERROR, "lookup failed"),
    ]
    assert "KeyError: 'missing-row'" in failed[1].message
    assert [ln.message for ln in app.retention.job_logs(ok.id)] == [
        "step 1 of 2",
        "step 2 of 2",
        "done",
    ]


def test_a_child_process_bounds_its_log_by_the_workers_limits(
    make_app: Callable[..., Ratchet],
) -> None:
    limits = JobLogLimits(max_lines=50, max_line_chars=1000, max_chars=20_000)
    app = make_app(retention=RetentionSettings(job_logs=limits))
    handle = app.enqueue(retention_jobs.hostile).with_executor("processes").submit()
    assert run_due_in_processes(app) == 1
    assert app.get_job(handle.id).result == '"survived"'
    lines = app.retention.job_logs(handle.id)
    assert len(lines) == 50
    assert all(is_storable_text(ln.message) and len(ln.message) <= 1000 for ln in lines)
    assert lines[0].message == "nul \\x00 byte"
    assert "more line(s) not stored" in lines[-1].message


def test_hostile_log_lines_never_fail_the_job_and_are_stored_bounded(
    make_app: Callable[..., Ratchet],
) -> None:
    limits = JobLogLimits(max_lines=100, max_line_chars=2000, max_chars=50_000)
    app = make_app(retention=RetentionSettings(job_logs=limits))
    handle = app.enqueue(retention_jobs.hostile).submit()
    assert run_due(app) == 1
    job = app.get_job(handle.id)
    assert job.status is JobStatus.SUCCEEDED and job.result == '"survived"'
    lines = app.retention.job_logs(handle.id)
    assert len(lines) == 100
    assert all(is_storable_text(ln.message) and len(ln.message) <= 2000 for ln in lines)
    assert sum(len(ln.message) for ln in lines) <= 50_000
    assert lines[0].message == "nul \\x00 byte"
    assert lines[1].message == "lone \\ud800 surrogate and \\udfff"
    assert lines[2].message.endswith("...")
    assert lines[3].message.startswith("<unformattable log message")
    assert lines[4].message == "<unformattable log message of type Unprintable: RuntimeError>"
    assert lines[-1].level is LogLevel.WARN
    assert "more line(s) not stored" in lines[-1].message


def test_a_failing_log_write_does_not_touch_the_outcome(
    app: Ratchet, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = app.store.capability(JobLogStore)
    assert store is not None

    def broken(lines: Any) -> int:
        raise RuntimeError("log table gone")

    monkeypatch.setattr(store, "append_job_logs", broken)
    handle = app.enqueue(retention_jobs.chatty, 3).submit()
    with caplog.at_level(logging.WARNING, logger="ratchet.worker"):
        run_due(app)
    assert app.get_job(handle.id).status is JobStatus.SUCCEEDED
    assert "4 log line(s) were not stored: log table gone" in caplog.text


def test_a_logger_outside_a_worker_goes_to_python_logging_only(
    caplog: pytest.LogCaptureFixture,
) -> None:

    from ratchet import JobContext
    from ratchet.engine.context import bound

    ctx = JobContext(uuid.uuid4(), 1, 1, "here", T0)
    with bound(ctx), caplog.at_level(logging.INFO, logger="ratchet.job"):
        logger = JobContext.current().logger()
        logger.info("hello %s", "there")
    assert not logger.stored
    assert "hello there" in caplog.text


# ---------------------------------------------------------------------------- retention
def finished(app: Ratchet, n: int) -> list[Any]:
    handles = [app.enqueue(retention_jobs.chatty, 1).submit() for _ in range(n)]
    run_due(app)
    return handles


def test_retention_removes_what_is_due_and_keeps_the_rest(app: Ratchet, clock: FakeClock) -> None:
    old = finished(app, 5)
    clock.advance(DAY * 60)
    young = finished(app, 2)
    assert app.retention.run(dry_run=True).removed == {"SUCCEEDED": 0, "CANCELED": 0}
    clock.advance(DAY * 31)
    dry = app.retention.run(dry_run=True)
    assert dry.removed == {"SUCCEEDED": 5, "CANCELED": 0} and dry.dry_run
    assert all(app.get_job(h.id) is not None for h in old), "a dry run changes nothing"
    report = app.retention.run()
    assert report.removed["SUCCEEDED"] == 5 and report.complete
    assert report.removed["job_logs"] == 4, "the young jobs' lines are past 30 days too"
    assert all(app.get_job(h.id) is None for h in old)
    assert all(app.get_job(h.id) is not None for h in young)
    assert app.retention.job_logs(young[0].id) == []


def test_archival_keeps_a_removed_job_readable(
    make_app: Callable[..., Ratchet], clock: FakeClock
) -> None:
    app = make_app(retention=RetentionSettings(archive=True, succeeded_days=1))
    [handle] = finished(app, 1)
    clock.advance(DAY * 2)
    report = app.retention.run()
    assert report.archived == 1
    assert app.get_job(handle.id) is None
    doc = app.retention.archived_job(handle.id)
    assert doc is not None and doc["final_status"] == "SUCCEEDED" and doc["result"] == "1"


def test_tombstones_stay_until_an_operator_purges_them(app: Ratchet, clock: FakeClock) -> None:
    handle = app.enqueue(retention_jobs.noop).with_idempotency_key("invoice-7").submit()
    run_due(app)
    clock.advance(DAY * 400)
    app.retention.run()
    assert app.get_job(handle.id) is None
    again = app.enqueue(retention_jobs.noop).with_idempotency_key("invoice-7").submit()
    assert again.id == handle.id, "the key still answers with the removed job"
    with pytest.raises(InvalidJobOptions):
        app.retention.purge_tombstones(-1)
    assert app.retention.purge_tombstones(365, dry_run=True) == 1
    assert app.retention.purge_tombstones(365) == 1
    fresh = app.enqueue(retention_jobs.noop).with_idempotency_key("invoice-7").submit()
    assert fresh.id != handle.id


# ---------------------------------------------------------------------------- the DLQ
def dead_letters(app: Ratchet, n: int) -> list[Any]:
    handles = [
        app.enqueue(retention_jobs.fails_after_logging).with_max_retries(0).submit()
        for _ in range(n)
    ]
    run_due(app)
    return handles


def test_the_dlq_pages_shows_replays_and_purges(app: Ratchet, clock: FakeClock) -> None:
    events: list[Any] = []
    app.add_event_listener(events.append)
    handles = dead_letters(app, 5)
    assert app.dlq.count() == 5
    first = app.dlq.list(limit=2)
    assert len(first.jobs) == 2 and first.next is not None
    second = app.dlq.list(limit=2, cursor=first.next)
    third = app.dlq.list(limit=2, cursor=second.next)
    seen = [j.job_id for page in (first, second, third) for j in page.jobs]
    assert sorted(seen) == sorted(h.id for h in handles) and third.next is None
    with pytest.raises(InvalidJobOptions):
        app.dlq.list(cursor="garbage")
    shown = app.dlq.show(handles[0].id)
    assert shown is not None and shown.attempts and shown.logs
    assert app.dlq.show(uuid.UUID(int=1)) is None
    assert app.dlq.replay(handles[0].id)
    assert (
        app.dlq.replay_matching(DeadLetterFilter(target="retention_jobs:fails_after_logging"), 2)
        == 2
    )
    assert any(e.kind.name == "BULK_RETRIED" and e.data == {"count": 2} for e in events)
    assert app.dlq.count() == 2
    assert app.dlq.purge(dry_run=True) == 2
    clock.advance(DAY)
    assert app.dlq.purge_older_than(2) == 0
    assert app.dlq.purge_older_than(0) == 2
    assert app.dlq.count() == 0


# ---------------------------------------------------------------------------- scheduling
def cleanup(worker: Worker, name: str) -> ScheduledCleanup:
    return next(t for t in worker.periodic if isinstance(t, ScheduledCleanup) and t.name == name)


def test_one_node_at_a_time_runs_retention_at_each_fire(
    make_app: Callable[..., Ratchet], clock: FakeClock
) -> None:
    settings = RetentionSettings(succeeded_days=1, pause_between_batches=timedelta(0))
    apps = [make_app(retention=settings) for _ in range(2)]
    workers = [app.worker() for i, app in enumerate(apps)]
    tasks = [cleanup(w, "retention") for w in workers]
    assert workers[0].node_id != workers[1].node_id
    assert {t.lock for t in tasks} == {RETENTION_LOCK}
    assert {t.name for w in workers for t in w.periodic if isinstance(t, ScheduledCleanup)} == {
        "retention",
        "dlq-purge",
    }
    finished(apps[0], 3)
    for task, worker in zip(tasks, workers, strict=True):
        task.run_once(worker)  # the first look only computes the next fire
        assert task.next_fire == datetime(2026, 3, 3, 1, 0, tzinfo=UTC)
    clock.set(datetime(2026, 3, 4, 1, 0, 5, tzinfo=UTC))  # a fire missed while down: runs now
    for task, worker in zip(tasks, workers, strict=True):
        task.run_once(worker)
        task.join(30)
    assert [t.runs for t in tasks] == [1, 0], "the second node found the lease taken"
    assert (
        apps[0].count_by_status().get("SUCCEEDED", 0) == 0
        if hasattr(apps[0], "count_by_status")
        else True
    )
    assert apps[0].store.count_by_status().get("SUCCEEDED", 0) == 0
    # The runner keeps the lease until the next fire; the other node waits for that one.
    clock.advance(timedelta(hours=2))
    tasks[1].run_once(workers[1])
    tasks[1].join(30)
    assert tasks[1].runs == 0
    clock.set(datetime(2026, 3, 5, 1, 0, 1, tzinfo=UTC))
    tasks[1].run_once(workers[1])
    tasks[1].join(30)
    assert tasks[1].runs == 1 and tasks[1].next_fire == datetime(2026, 3, 6, 1, 0, tzinfo=UTC)


def test_the_dlq_purge_runs_on_its_own_schedule(
    make_app: Callable[..., Ratchet], clock: FakeClock
) -> None:
    app = make_app(retention=RetentionSettings(dlq_purge_days=10, enabled=False))
    worker = app.worker()
    assert [t.name for t in worker.periodic if isinstance(t, ScheduledCleanup)] == ["dlq-purge"]
    task = cleanup(worker, "dlq-purge")
    assert task.lock == DLQ_PURGE_LOCK
    dead_letters(app, 2)
    task.run_once(worker)
    clock.advance(DAY * 11)
    task.run_once(worker)
    task.join(30)
    assert task.runs == 1 and app.dlq.count() == 0


def test_a_store_without_retention_is_reported_once(
    app: Ratchet,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    clock: FakeClock,
) -> None:
    worker = app.worker()
    task = cleanup(worker, "retention")
    original = app.store.capability

    def without(kind: type) -> Any:
        return None if kind is RetentionStore else original(kind)

    monkeypatch.setattr(app.store, "capability", without)
    task.run_once(worker)
    clock.advance(DAY * 2)
    with caplog.at_level(logging.WARNING, logger="ratchet.retention"):
        task.run_once(worker)
        task.run_once(worker)
    assert caplog.text.count("no retention support") == 1
