"""Resource permits across real ``ratchet worker`` processes sharing one SQLite file.

The jobs measure themselves: each writes its start and end time and its pid into a side-effect
table, and the test computes how many executions of the resource overlapped.
"""

from __future__ import annotations

import signal
import subprocess
from datetime import timedelta
from pathlib import Path

import gate_jobs
import procs
import pytest
from sqlalchemy import select

from ratchet import JobStatus, Ratchet
from ratchet.sql import schema

RES = gate_jobs.RESOURCE


def max_overlap(spans: list[tuple[str, int, float, float | None]]) -> int:
    """The most executions running at one instant (an end sorts before a start at a tie)."""
    edges = []
    for _token, _pid, started, ended in spans:
        assert ended is not None, "every execution finished"
        edges += [(started, 1), (ended, -1)]
    running = peak = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):
        running += step
        peak = max(peak, running)
    return peak


def worker(
    url: str, tmp_path: Path, name: str, limit: int, *args: str, concurrency: int = 3
) -> subprocess.Popen[bytes]:
    return procs.start_worker(
        url,
        "--concurrency",
        str(concurrency),
        *args,
        app="gate_jobs:make_app",
        log=tmp_path / f"{name}.log",
        GATE_DB_URL=url,
        GATE_LIMIT=str(limit),
        GATE_RETRY_MS="50",
    )


def logs(tmp_path: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(tmp_path.glob("*.log")))


@pytest.fixture
def app(sqlite_url: str) -> Ratchet:
    app = Ratchet(sqlite_url, allowed_modules=["gate_jobs"])
    yield app
    app.close()


def test_at_most_n_executions_of_a_resource_across_three_workers(
    app: Ratchet, sqlite_url: str, tmp_path: Path
) -> None:
    limit, n = 2, 12
    db = gate_jobs.make_span_db(str(tmp_path / "spans.db"))
    limited = [
        app.enqueue(gate_jobs.hold_resource, db, f"job-{i}", 0.25).with_resource(RES)
        for i in range(n)
    ]
    free = [app.enqueue(gate_jobs.plain, i) for i in range(6)]  # not held back by the limit
    # One slot per worker: reaching the limit of 2 then takes two processes at once, so the
    # limit is tested across processes whichever worker polls first. A generous grace: a worker
    # starved of CPU must not be declared dead (and its jobs rerun).
    workers = [
        worker(sqlite_url, tmp_path, f"w{i}", limit, "--orphan-grace", "30", concurrency=1)
        for i in range(3)
    ]
    try:
        # Submit once all three are polling, so that every one of them competes for permits.
        assert procs.wait_for(lambda: len(app.store.list_nodes()) == 3, 60), logs(tmp_path)
        handles = app.submit_many(limited + free)
        done = procs.wait_for(
            lambda: all(h.status() is JobStatus.SUCCEEDED for h in handles), timeout=120
        )
        assert done, logs(tmp_path)
    finally:
        codes = procs.stop(workers)
    assert codes == [0, 0, 0], logs(tmp_path)
    spans = gate_jobs.spans(db)
    assert sorted(t for t, *_ in spans) == sorted(f"job-{i}" for i in range(n)), "exactly once"
    assert max_overlap(spans) == limit, spans
    assert len({pid for _, pid, _, _ in spans}) >= 2, "the limit held across processes"
    assert app.resource_limit(RES).max_concurrent == limit
    assert {h.record().attempts for h in handles} == {0}, "waiting for a permit is no retry"
    assert app.permits() == []


def test_permits_of_a_killed_worker_are_reclaimed(
    app: Ratchet, sqlite_url: str, tmp_path: Path
) -> None:
    db = gate_jobs.make_span_db(str(tmp_path / "spans.db"))
    app.register_resource_limit(RES, 1, timedelta(milliseconds=50))
    stuck = app.enqueue(gate_jobs.hold_until_killed, db, "stuck").with_resource(RES).submit()
    victim = worker(sqlite_url, tmp_path, "victim", limit=1)
    try:
        assert procs.wait_for(lambda: len(gate_jobs.spans(db)) == 1, timeout=60), logs(tmp_path)
        assert gate_jobs.spans(db)[0][3] is None, "still running"
        [held] = app.permits(RES)
        assert held.job_id == stuck.id
        # While the stuck job holds the only permit, another job of the resource must wait.
        other = app.enqueue(gate_jobs.hold_resource, db, "other", 0.1).with_resource(RES).submit()
        assert procs.wait_for(lambda: rescheduled(app, other.id), timeout=60), logs(tmp_path)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
    finally:
        if victim.poll() is None:
            victim.kill()
    assert [p.node_id for p in app.permits(RES)] == [held.node_id], "the dead node's permit"
    rescuer = worker(sqlite_url, tmp_path, "rescuer", limit=1)
    try:
        done = procs.wait_for(
            lambda: stuck.status() is JobStatus.SUCCEEDED and other.status() is JobStatus.SUCCEEDED,
            timeout=90,
        )
        assert done, logs(tmp_path)
    finally:
        procs.stop([rescuer])
    assert stuck.result() == "recovered"
    assert app.permits() == []
    outcomes = [a.outcome for a in app.attempts(stuck.id)]
    assert outcomes[0] == "ABANDONED" and outcomes[-1] == "SUCCEEDED", outcomes
    assert other.record().attempts == 0


def rescheduled(app: Ratchet, job_id: object) -> bool:
    """Whether an attempt of ``job_id`` was rescheduled (no permit free)."""
    exe = schema.job_execution
    with app.store.connect() as conn:
        rows = conn.execute(select(exe.c.outcome).where(exe.c.job_id == job_id)).scalars()
        return "RESCHEDULE" in set(rows)
