"""``JobHandle.wait``: block until a worker has run the job, with a bounded wait."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
import sample_jobs

from ratchet import JobStatus, Ratchet
from ratchet.engine.builder import JobHandle


def test_wait_returns_once_a_worker_ran_the_job(app: Ratchet) -> None:
    worker = app.worker(
        concurrency=2, min_delay=timedelta(milliseconds=50), burst_delay=timedelta(milliseconds=20)
    )
    worker.start()
    try:
        handle = app.enqueue(sample_jobs.record, {"a": 1}).submit()
        assert handle.wait(timeout=20) is JobStatus.SUCCEEDED
        assert handle.result() == {"a": 1}
        failed = app.enqueue(sample_jobs.fail_always, "no").submit()
        assert failed.wait(timeout=20) is JobStatus.FAILED
    finally:
        worker.stop()


def test_without_a_worker_wait_times_out_and_says_why(app: Ratchet) -> None:
    handle = app.enqueue(sample_jobs.noop).submit()
    started = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        handle.wait(timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 2
    assert str(info.value) == (
        f"job {handle.id} is still PENDING after 0.3 s; is a worker running? "
        "(`ratchet worker MODULE:APP`)"
    )


def test_wait_reads_the_store_with_a_bounded_backoff(
    app: Ratchet, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = app.enqueue(sample_jobs.noop).submit()
    sleeps: list[float] = []
    now = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(time, "sleep", sleep)
    with pytest.raises(TimeoutError):
        handle.wait(timeout=5)
    assert sleeps[:4] == [0.01, 0.02, 0.04, 0.08]
    assert max(sleeps) == 0.5 and sum(sleeps) == pytest.approx(5)


def test_an_ended_job_returns_at_once(app: Ratchet) -> None:
    handle = app.enqueue(sample_jobs.noop).submit()
    app.cancel_job(handle.id)
    assert handle.wait(timeout=0) is JobStatus.CANCELED


@pytest.mark.parametrize("timeout", [-1, float("inf"), float("nan"), True, "5", None])
def test_a_bad_timeout_is_refused(app: Ratchet, timeout: Any) -> None:
    handle = app.enqueue(sample_jobs.noop).submit()
    with pytest.raises(ValueError, match="timeout must be a number of seconds"):
        handle.wait(timeout=timeout)


def test_a_job_that_does_not_exist(app: Ratchet) -> None:
    with pytest.raises(LookupError, match="does not exist"):
        JobHandle(uuid.uuid4(), app).wait(timeout=1)
