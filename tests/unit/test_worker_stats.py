"""Worker statistics stay bounded however many jobs a worker runs."""

from __future__ import annotations

import uuid

from ratchet.engine.stats import RecentOutcomes, WorkerStats


def test_recent_outcomes_keep_only_the_newest_keys() -> None:
    recent = RecentOutcomes(3)
    ids = [uuid.UUID(int=i) for i in range(5)]
    for job_id in ids:
        recent[job_id] = "SUCCEEDED"
    assert list(recent) == ids[2:]


def test_rewriting_a_key_makes_it_the_newest() -> None:
    recent = RecentOutcomes(2)
    a, b, c = (uuid.UUID(int=i) for i in range(3))
    recent[a] = "RETRY"
    recent[b] = "SUCCEEDED"
    recent[a] = "SUCCEEDED"  # a's second attempt
    recent[c] = "DEAD"
    assert recent == {a: "SUCCEEDED", c: "DEAD"}


def test_worker_stats_bound_the_per_job_record() -> None:
    stats = WorkerStats()
    for i in range(10_050):
        stats.by_job[uuid.UUID(int=i)] = "SUCCEEDED"
    assert len(stats.by_job) == 10_000
    assert uuid.UUID(int=10_049) in stats.by_job and uuid.UUID(int=0) not in stats.by_job
