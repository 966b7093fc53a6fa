"""Batches and chains across real ``ratchet worker`` processes on one SQLite file."""

from __future__ import annotations

import random
import signal
from pathlib import Path

import flow_jobs
import procs
import pytest

from ratchet import EventKind, JobEvent, JobStatus, Ratchet


@pytest.fixture
def app(sqlite_url: str) -> Ratchet:
    app = Ratchet(sqlite_url, allowed_modules=["flow_jobs"])
    yield app
    app.close()


def logs(tmp_path: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(tmp_path.glob("*.log")))


def run_batch_over_processes(url: str, n: int, tmp_path: Path, timeout: float) -> None:
    """A batch of ``n`` items with ~5 % random failures, three worker processes: exact counts,
    one completion (its branches ran once), nothing left behind."""
    app = Ratchet(url, allowed_modules=["flow_jobs"])
    effects = procs.make_side_effect_db(tmp_path / "effects.db")
    rng = random.Random(n)
    items = [(i, rng.random() < 0.05) for i in range(n)]
    failing = sum(1 for _, fail in items if fail)
    events: list[JobEvent] = []
    app.add_event_listener(events.append)
    batch = (
        app.enqueue_batch(f"{n}-items")
        .for_each([{"n": i, "fail": fail} for i, fail in items], flow_jobs.batch_item_spec)
        .then_on_batch_failure(flow_jobs.record_completion, effects, "on-failure")
        .then_on_batch_success(flow_jobs.record_completion, effects, "on-success")
        .then_when_failure_count(failing, flow_jobs.record_completion, effects, "count-reached")
        .then_when_failure_count(failing + 1, flow_jobs.record_completion, effects, "count-not")
        .submit()
    )
    workers = [
        procs.start_worker(
            url,
            "--concurrency",
            "32",  # trivial jobs: bigger claims and outcome batches, fewer SQLite write locks
            # a CPU-starved worker must not be declared dead (its jobs would run twice)
            "--orphan-grace",
            "30",
            app="flow_app:app",
            log=tmp_path / f"w{i}.log",
        )
        for i in range(3)
    ]
    try:
        done = procs.wait_for(
            lambda: len(procs.side_effects(effects)) >= 2, timeout=timeout, interval=0.5
        )
        assert done, (batch.context(), logs(tmp_path))
        assert procs.wait_for(
            lambda: app.store.count_by_status().get("RUNNING", 0) == 0, timeout=30
        )
    finally:
        codes = procs.stop(workers)
    try:
        assert codes == [0, 0, 0], logs(tmp_path)
        ctx = batch.context()
        assert (ctx.total, ctx.completed, ctx.failed) == (n, n - failing, failing)
        assert batch.status() is JobStatus.SUCCEEDED
        assert sorted(t for t, _ in procs.side_effects(effects)) == ["count-reached", "on-failure"]
        counts = app.store.count_by_status()
        assert counts.get("SUCCEEDED") == n - failing + 1 + 2  # children, parent, two branches
        assert counts.get("FAILED") == failing
        assert counts.get("CANCELED") == 2  # on-success and count-not
        assert not {"PENDING", "RUNNING", "WAITING"} & set(counts)
        assert [e.kind for e in events] == [EventKind.SUBMITTED], "completion ran in the workers"
        assert "Traceback" not in logs(tmp_path)
    finally:
        app.close()


def test_ten_thousand_item_batch_three_workers_exact_counts_one_completion(
    sqlite_url: str, tmp_path: Path
) -> None:
    run_batch_over_processes(sqlite_url, 10_000, tmp_path, timeout=400)


@pytest.mark.postgres
def test_batch_over_three_workers_on_postgres(postgres_store_url: str, tmp_path: Path) -> None:
    run_batch_over_processes(postgres_store_url, 1_000, tmp_path, timeout=240)


@pytest.mark.postgres
@pytest.mark.slow
def test_ten_thousand_item_batch_over_three_workers_on_postgres(
    postgres_store_url: str, tmp_path: Path
) -> None:
    run_batch_over_processes(postgres_store_url, 10_000, tmp_path, timeout=300)


def test_chain_survives_a_worker_kill(app: Ratchet, sqlite_url: str, tmp_path: Path) -> None:
    effects = procs.make_side_effect_db(tmp_path / "effects.db")
    builder = app.enqueue(flow_jobs.slow_step, effects, "s0", 0.05)
    for i in range(1, 6):
        builder = builder.then(flow_jobs.slow_step, effects, f"s{i}", 1.5 if i == 2 else 0.05)
    head = builder.submit()
    victim = procs.start_worker(sqlite_url, app="flow_app:app", log=tmp_path / "victim.log")
    try:
        assert procs.wait_for(
            lambda: {t for t, _ in procs.side_effects(effects)} >= {"s0", "s1"}, timeout=60
        ), logs(tmp_path)
        assert procs.wait_for(lambda: app.store.count_by_status().get("RUNNING", 0) == 1, 30)
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    assert "s2" not in {t for t, _ in procs.side_effects(effects)}, "killed mid-step"
    survivor = procs.start_worker(sqlite_url, app="flow_app:app", log=tmp_path / "survivor.log")
    try:
        finished = procs.wait_for(
            lambda: len({t for t, _ in procs.side_effects(effects)}) == 6, timeout=90
        )
        assert finished, logs(tmp_path)
        assert procs.wait_for(
            lambda: app.store.count_by_status().get("SUCCEEDED", 0) == 6, timeout=30
        )
    finally:
        assert procs.stop([survivor]) == [0]
    order = [t for t, _ in procs.side_effects(effects)]
    assert list(dict.fromkeys(order)) == [f"s{i}" for i in range(6)], "in chain order"
    steps = app.list_jobs(limit=10)
    assert {s.status for s in steps} == {JobStatus.SUCCEEDED}
    abandoned = [a for s in steps for a in app.attempts(s.job_id) if a.outcome == "ABANDONED"]
    assert abandoned, "the killed step was recovered and run again"
    # At least once: only a step whose attempt was abandoned (killed, or its node presumed dead
    # on a starved machine) may have run twice.
    assert len(order) - 6 <= len(abandoned) - 1
    assert head.status() is JobStatus.SUCCEEDED
