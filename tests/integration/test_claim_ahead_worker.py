"""A worker whose runs end fast claims ahead of its threads, and still runs no more jobs at
once than it has threads."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import sample_jobs

from ratchet import Ratchet

JOBS = 3000


def _watch(worker: Any) -> tuple[list[int], list[int]]:
    """Record the size of each claim and the most attempts running at once."""
    claims: list[int] = []
    running = [0, 0]  # now, most
    lock = threading.Lock()
    acquire, execute = worker.liveness.acquire, worker.runner.execute

    def counted_acquire(wanted: int) -> Any:
        claimed = acquire(wanted)
        claims.append(len(claimed))
        return claimed

    def counted_execute(job: Any) -> Any:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        try:
            return execute(job)
        finally:
            with lock:
                running[0] -= 1

    worker.liveness.acquire = counted_acquire
    worker.runner.execute = counted_execute
    return claims, running


def _drain(app: Ratchet, **settings: Any) -> tuple[list[int], int]:
    app.submit_many([app.enqueue(sample_jobs.noop) for _ in range(JOBS)])
    worker = app.worker(concurrency=2, **settings)
    claims, running = _watch(worker)
    worker.start()
    try:
        assert worker.wait_until(lambda: worker.stats.succeeded >= JOBS, timeout=120)
    finally:
        worker.stop()
    assert app.store.count_by_status().get("SUCCEEDED") == JOBS
    return claims, running[1]


def test_fast_runs_are_claimed_ahead_of_the_threads(app: Ratchet) -> None:
    claims, most_at_once = _drain(app)
    assert max(claims) > 2  # more than the two threads in one claim
    assert most_at_once <= 2


def test_a_zero_claim_ahead_claims_only_for_free_threads(app: Ratchet) -> None:
    claims, most_at_once = _drain(app, claim_ahead=timedelta(0))
    assert max(claims) <= 2
    assert most_at_once <= 2
