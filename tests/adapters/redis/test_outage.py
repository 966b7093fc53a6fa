"""Redis goes away while workers run: polling still runs every job; wakeups come back by themselves.

Two worker apps (two nodes, each with its own coordinator) and a client app share one SQLite
file and one Redis cluster channel, so a hint from the client reaches the workers only through
Redis. Every poll delay is POLL seconds: a worker in BURST mode can only have got there through
a wakeup, and a start within a fraction of POLL is what a wakeup buys.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ratchet import JobPriority
from ratchet.config import WorkerConfig
from ratchet.testing import wait_until
from ratchet_redis_coordinator import CoordinatorState

from .conftest import cluster_url

pytestmark = pytest.mark.redis
POLL = 2.0
LOGGER = "ratchet.coordinator.redis"


def config() -> WorkerConfig:
    poll = timedelta(seconds=POLL)
    return WorkerConfig(
        concurrency=4,
        burst_delay=poll,
        min_delay=poll,
        max_delay=poll,
        deep_idle_delay=poll,
        deep_idle_after=timedelta(seconds=1),
        drain_timeout=timedelta(seconds=5),
    )


def critical_start(client: Any, jobs: Any, starts: str, tag: str) -> float:
    """Submit a CRITICAL job; seconds from submit to its start (it must start within 10 s)."""
    begun = jobs.now_ns()
    client.enqueue(jobs.record_start, starts, tag).with_priority(JobPriority.CRITICAL).submit()
    assert wait_until(lambda: tag in jobs.read_starts(starts), 10), f"{tag} never started"
    return (jobs.read_starts(starts)[tag][0] - begun) / 1e9


def test_jobs_run_during_a_redis_outage_and_wakeups_resume(
    stoppable_redis: Any, jobs: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    db_url = f"sqlite:///{tmp_path / 'jobs.db'}"
    url = cluster_url(stoppable_redis, reconnect_max=0.2)
    starts = str(tmp_path / "starts.log")
    apps = [jobs.make_app(db_url, url, node_name=f"worker-{i}") for i in range(2)]
    client = jobs.make_app(db_url, url, node_name="client")
    workers = [app.worker(config()) for app in apps]

    def wakeups() -> list[int]:  # the new-work hints each worker received
        return [worker.stats.wakeups_received for worker in workers]

    coordinators = [app.coordinator for app in (*apps, client)]
    try:
        for worker in workers:
            worker.start()
        assert all(c.state is CoordinatorState.CONNECTED for c in coordinators)

        # 1. Healthy: the hint crosses Redis to both workers and one starts the job at once.
        assert wakeups() == [0, 0]
        latency = critical_start(client, jobs, starts, "healthy")
        assert latency < POLL / 2, f"healthy start took {latency:.3f} s"
        assert wait_until(lambda: min(wakeups()) >= 1, 5), f"hints per worker: {wakeups()}"
        assert wakeups() == [1, 1]

        # 2. Outage: submissions neither fail nor hang, and polling runs every job.
        stoppable_redis.stop()
        assert wait_until(
            lambda: all(c.state is CoordinatorState.RECONNECTING for c in coordinators), 10
        )
        tags = [f"outage-{i}" for i in range(6)]
        for tag in tags:
            begun = time.perf_counter()
            client.enqueue(jobs.record_start, starts, tag).with_priority(
                JobPriority.CRITICAL
            ).submit()
            assert time.perf_counter() - begun < 0.5, "a submission hung on the dead Redis"
        assert wait_until(lambda: set(tags) <= set(jobs.read_starts(starts)), 3 * POLL + 5), (
            "polling did not run the jobs submitted during the outage"
        )
        assert wait_until(lambda: client.coordinator.stats.publish_errors >= 1, 5)

        # 3. Redis is back: nothing is restarted, and wakeups work again.
        stoppable_redis.start()
        assert all(c.wait_connected(10) for c in coordinators)
        before = wakeups()
        latency = critical_start(client, jobs, starts, "recovered")
        assert wait_until(
            lambda: all(now > then for now, then in zip(wakeups(), before, strict=True)), 5
        ), f"hints per worker before/after: {before} / {wakeups()}"
        assert latency < POLL / 2, f"start after recovery took {latency:.3f} s"
        print(f"\nwakeup start after the outage: {latency * 1000:.1f} ms (poll delay {POLL} s)")
    finally:
        for worker in workers:
            worker.stop()
        for app in (*apps, client):
            app.close()

    ours = [r for r in caplog.records if r.name == LOGGER]
    lost = [r for r in ours if r.levelno == logging.WARNING]
    back = [r for r in ours if "work again" in r.getMessage()]
    assert len(lost) == len(coordinators), [r.getMessage() for r in lost]  # once per node
    assert len(back) == len(coordinators), [r.getMessage() for r in back]
