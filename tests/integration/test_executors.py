"""Real jobs past their deadlines in each executor provider (threads, asyncio, processes).

Timeouts are short real ones (0.3-1.5 s); every wait is on a condition with a deadline.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import timeout_jobs as tj
from timeout_harness import Events, running_worker, wait_for

from ratchet import EventKind, JobStatus, Ratchet, hookimpl
from ratchet.adapters.processes import ProcessExecutorProvider
from ratchet.plugins import Plugins, make_plugin_manager

EXECUTORS = ["threads", "asyncio", "processes"]
SAFE_POINTS = {
    "threads": tj.units_with_safe_points,
    "asyncio": tj.async_units_with_safe_points,
    "processes": tj.units_with_safe_points,
}
OVERRUN = {"threads": tj.overrun, "asyncio": tj.async_overrun, "processes": tj.overrun}


@pytest.fixture
def app(sqlite_url: str) -> Iterator[Ratchet]:
    app = Ratchet(sqlite_url, allowed_modules=["timeout_jobs"])
    yield app
    app.close()


@pytest.fixture
def events(app: Ratchet) -> Events:
    return Events(app)


def submit(app: Ratchet, executor: str, fn: Any, *args: Any, timeout: float, **opts: Any) -> Any:
    builder = app.enqueue(fn, *args).with_timeout(timedelta(seconds=timeout))
    if executor == "processes":  # the others are the defaults for sync / async def targets
        builder = builder.with_executor("processes")
    if "retries" in opts:
        builder = builder.with_max_retries(opts["retries"])
    return builder.submit()


def warm_up(app: Ratchet, events: Events, executor: str) -> int | None:
    """Run one quick job first so a child process exists (its start-up is not in the test's
    deadline); returns the child's pid."""
    if executor != "processes":
        return None
    handle = app.enqueue(tj.where_am_i).with_executor("processes").submit()
    events.settle(handle)
    pid: int = handle.result()["pid"]
    assert pid != os.getpid()
    return pid


@pytest.mark.parametrize("executor", EXECUTORS)
def test_job_stops_at_a_safe_point_and_counts_as_timeout(
    app: Ratchet, events: Events, tmp_path: Path, executor: str
) -> None:
    log = str(tmp_path / "units.log")
    with running_worker(app, cancellation_grace=timedelta(seconds=1)) as worker:
        warm_up(app, events, executor)
        handle = submit(app, executor, SAFE_POINTS[executor], log, 500, 0.05, timeout=1.5)
        events.settle(handle)
        record = handle.record()
        assert record.status is JobStatus.FAILED
        assert "CancellationRequestedException" in record.last_error
        lines = tj.lines(log)
        assert lines[-1] == "stopped at a safe point"
        assert lines[-2].endswith(" end"), "it stopped between units, not inside one"
        (timed_out,) = events.of(EventKind.TIMED_OUT, handle.id)
        assert timed_out.data["executionTimeout"] == timedelta(seconds=1.5)
        assert timed_out.data["elapsed"] < timedelta(seconds=1.5), "before the deadline"
        assert timed_out.data["attempt"] == 1
        assert events.kinds(handle.id)[-3:] == [
            EventKind.TIMED_OUT,
            EventKind.FAILED,
            EventKind.DEAD_LETTERED,
        ]
        assert worker.stats.timed_out == 1 and worker.stats.zombies == 0


@pytest.mark.parametrize("executor", EXECUTORS)
def test_job_without_safe_points_is_interrupted_at_the_deadline(
    app: Ratchet, events: Events, tmp_path: Path, executor: str
) -> None:
    log = str(tmp_path / "overrun.log")
    # A zombie is a call still running 5 s after its deadline (1 s by default: a pause of the
    # test process, such as a full garbage collection late in a long test run, is not one).
    with running_worker(app, zombie_grace=timedelta(seconds=5)) as worker:
        warm_up(app, events, executor)
        handle = submit(app, executor, OVERRUN[executor], log, 30, timeout=0.5)
        events.settle(handle)
        record = handle.record()
        assert record.status is JobStatus.FAILED
        assert "JobTimeoutError" in record.last_error and "0.5s timeout" in record.last_error
        (timed_out,) = events.of(EventKind.TIMED_OUT, handle.id)
        assert timed_out.data["elapsed"] >= timedelta(seconds=0.5)
        # The call really stopped: its slot comes back long before the 30 s it wanted.
        wait_for(lambda: worker.free_slots() == worker.config.concurrency, 5, "the slot")
        expected = {
            "threads": "interrupted by JobTimeoutError",
            "asyncio": "interrupted by CancelledError",
            "processes": None,  # SIGTERM ends the child before any handler runs
        }[executor]
        if expected:
            wait_for(lambda: tj.lines(log)[-1] == expected, 5, expected)
        else:
            provider = worker.executor("processes")
            assert isinstance(provider, ProcessExecutorProvider) and provider.killed == 1
        assert worker.stats.zombies == 0
        assert "done" not in tj.lines(log)


def test_thread_blocked_in_c_becomes_a_zombie_that_holds_its_slot(
    app: Ratchet, events: Events, tmp_path: Path
) -> None:
    log = str(tmp_path / "shared.log")
    with running_worker(app, concurrency=1) as worker:
        stuck = submit(app, "threads", tj.sleep_in_c, log, 1.5, timeout=0.3)
        events.settle(stuck)
        # Recorded as timed out at once, while the thread still sleeps in C.
        assert stuck.status() is JobStatus.FAILED
        assert "exceeded its 0.3s timeout" in stuck.record().last_error
        assert not any(line.startswith("returned") for line in tj.lines(log))
        wait_for(lambda: worker.stats.zombies == 1, 5, "the zombie to be counted")
        assert worker.stats.zombies_active == 1
        assert worker.free_slots() == 0, "the zombie occupies its slot"
        follower = app.enqueue(tj.record_start, log).submit()
        events.settle(follower)
        lines = tj.lines(log)
        returned = next(i for i, line in enumerate(lines) if line.startswith("returned"))
        started = next(i for i, line in enumerate(lines[1:], 1) if line.startswith("start"))
        assert returned < started, "nothing was claimed into the zombie's slot"
        assert lines[returned] == "returned with JobTimeoutError"  # lands when C returns
        assert worker.stats.zombies_active == 0
        assert worker.stats.late_results_discarded >= 1
        # Its late end changed nothing: one attempt, recorded as the timeout.
        assert stuck.status() is JobStatus.FAILED
        (attempt,) = app.attempts(stuck.id)
        assert "exceeded its 0.3s timeout" in (attempt.error or "")
        assert follower.status() is JobStatus.SUCCEEDED


def test_process_blocked_in_c_is_killed_and_replaced(
    app: Ratchet, events: Events, tmp_path: Path
) -> None:
    log = str(tmp_path / "sleep.log")
    with running_worker(app) as worker:
        first_pid = warm_up(app, events, "processes")
        stuck = submit(app, "processes", tj.sleep_in_c, log, 60, timeout=0.5)
        events.settle(stuck)
        assert "exceeded its 0.5s timeout" in stuck.record().last_error
        wait_for(lambda: worker.free_slots() == worker.config.concurrency, 5, "the slot")
        assert f"pid={first_pid}" in tj.lines(log)[0]
        assert first_pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(first_pid, 0)  # killed and reaped
        after = app.enqueue(tj.where_am_i).with_executor("processes").submit()
        events.settle(after)
        assert after.result()["pid"] not in (first_pid, os.getpid())
        assert worker.stats.zombies == 0


def test_async_def_targets_default_to_the_asyncio_loop(app: Ratchet, events: Events) -> None:
    with running_worker(app, default_sla=timedelta(minutes=5)):
        coro = app.enqueue(tj.async_where_am_i).submit()
        plain = app.enqueue(tj.where_am_i).submit()
        events.settle(coro, plain)
        assert coro.result()["thread"] == "ratchet-asyncio"
        assert plain.result()["thread"].startswith("ratchet-job")
        assert coro.result()["pid"] == plain.result()["pid"] == os.getpid()
        assert coro.result()["job_id"] == str(coro.id)
        assert coro.result()["deadline"] is not None  # the default SLA applies


def test_process_results_and_errors_cross_as_json(app: Ratchet, events: Events) -> None:
    with running_worker(app):
        ok = app.enqueue(tj.where_am_i).with_executor("processes").with_param("k", "v").submit()
        retried = app.enqueue(tj.boom, "kaput").with_executor("processes").with_max_retries(1)
        retried_handle = retried.submit()
        permanent = (
            app.enqueue(tj.boom_permanently, "no").with_executor("processes").with_max_retries(3)
        ).submit()
        crash = app.enqueue(tj.crash_process).with_executor("processes").submit()
        events.settle(ok, retried_handle, permanent, crash)
        assert ok.result()["job_id"] == str(ok.id)
        assert retried_handle.record().last_error == "RuntimeError: kaput"
        assert len(app.attempts(retried_handle.id)) == 2
        assert permanent.record().last_error == "timeout_jobs.Permanent: no"
        assert len(app.attempts(permanent.id)) == 1, "do-not-retry survives the process boundary"
        assert "exited with code 3" in crash.record().last_error


# ------------------------------------------------------------------ a plugin's provider
class PlainPoolProvider:
    """A third-party provider without ``run``: it cannot interrupt anything."""

    name = "plain"

    def __init__(self, max_workers: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers, thread_name_prefix="plain")

    def submit(self, fn: Any) -> Future[Any]:
        return self._pool.submit(fn)

    def shutdown(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait)


class PlainPlugin:
    @hookimpl
    def ratchet_register_executor_providers(self, registry: Any) -> None:
        registry.add("plain", PlainPoolProvider)


def test_a_plugin_provider_that_cannot_interrupt_still_gets_timeouts(
    sqlite_url: str, tmp_path: Path
) -> None:
    plugins = Plugins(make_plugin_manager(extra=[PlainPlugin()]))
    app = Ratchet(sqlite_url, allowed_modules=["timeout_jobs"], plugins=plugins)
    events = Events(app)
    log = str(tmp_path / "plain.log")
    try:
        with running_worker(app) as worker:
            handle = (
                app.enqueue(tj.overrun, log, 1.0)
                .with_executor("plain")
                .with_timeout(timedelta(seconds=0.3))
                .submit()
            )
            events.settle(handle)
            assert "exceeded its 0.3s timeout" in handle.record().last_error
            wait_for(lambda: worker.stats.zombies == 1, 5, "the uninterruptible call to count")
            wait_for(lambda: tj.lines(log)[-1:] == ["done"], 5, "the call to end on its own")
            wait_for(lambda: worker.stats.zombies_active == 0, 5, "the slot to come back")
            assert handle.status() is JobStatus.FAILED, "its late success was discarded"
            assert worker.stats.late_results_discarded == 1
    finally:
        app.close()
