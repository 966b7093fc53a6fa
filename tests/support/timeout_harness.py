"""Helpers for the timeout and executor tests: a fast-polling worker, condition waits and a
claimed job to hand the engine's parts directly."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from ratchet import EventKind, JobEvent, Ratchet
from ratchet.domain.lifecycle import JobPriority
from ratchet.domain.model import ClaimedJob
from ratchet.domain.options import BackoffPolicy
from ratchet.engine.worker import Worker
from ratchet.testing import FakeClock, assert_eventually

FAST = {
    "concurrency": 2,
    "burst_delay": timedelta(milliseconds=20),
    "min_delay": timedelta(milliseconds=50),
    "max_delay": timedelta(milliseconds=100),
    "deep_idle_delay": timedelta(milliseconds=100),
    "cancel_request_interval": timedelta(milliseconds=50),
    "zombie_grace": timedelta(milliseconds=200),
    "drain_timeout": timedelta(seconds=2),
}


#: The timeout of :func:`claimed_job` unless told otherwise.
CLAIMED_TIMEOUT = timedelta(seconds=100)


def claimed_job(
    timeout: timedelta | None = CLAIMED_TIMEOUT, clock: FakeClock | None = None
) -> ClaimedJob:
    """A first attempt of a no-op job, claimed now (``clock``'s now, else a fresh FakeClock's)."""
    now = (clock or FakeClock()).now()
    return ClaimedJob(
        job_id=uuid.uuid4(),
        epoch=1,
        attempt=1,
        target="timeout_jobs:noop",
        payload='{"args":[],"kwargs":{}}',
        priority=JobPriority.NORMAL,
        max_retries=0,
        backoff=BackoffPolicy.NONE,
        backoff_delay=timedelta(0),
        timeout=timeout,
        scheduled_time=now,
        claimed_at=now,
    )


@contextmanager
def running_worker(app: Ratchet, **options: Any) -> Iterator[Worker]:
    """A started worker that polls every 50 ms; stopped (drained) on exit."""
    worker: Worker = app.worker(**{**FAST, **options})
    worker.start()
    try:
        yield worker
    finally:
        worker.stop(timeout=timedelta(seconds=2))


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``predicate`` until it holds; fail after ``timeout`` seconds."""
    assert_eventually(predicate, timeout, what)


class Events:
    """Collects an app's events."""

    def __init__(self, app: Ratchet) -> None:
        self.all: list[JobEvent] = []
        app.add_event_listener(self.all.append)

    def kinds(self, job_id: Any = None) -> list[EventKind]:
        return [e.kind for e in self.all if job_id is None or e.job_id == job_id]

    def of(self, kind: EventKind, job_id: Any = None) -> list[JobEvent]:
        return [e for e in self.all if e.kind is kind and (job_id is None or e.job_id == job_id)]

    def settle(self, *handles: Any, timeout: float = 15) -> None:
        """Wait until every job's final outcome was written and its events delivered."""
        final = {EventKind.COMPLETED, EventKind.DEAD_LETTERED}
        wait_for(
            lambda: all(any(e.kind in final for e in self.of_job(h.id)) for h in handles),
            timeout,
            "the jobs to finish",
        )

    def of_job(self, job_id: Any) -> list[JobEvent]:
        return [e for e in list(self.all) if e.job_id == job_id]
