"""Clusters of ``ratchet worker`` processes on one PostgreSQL database.

Every job writes one row to ``side_effect`` (no unique key), so a job that ran twice or never
shows up there; the store must agree (every job SUCCEEDED once, nothing left in the queue).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from types import ModuleType
from typing import Any

import psycopg
import pytest

from ratchet import BackoffPolicy, Ratchet
from ratchet.testing import assert_eventually

pytestmark = pytest.mark.postgres

FAST_POLLING = ("--min-delay", "0.05", "--max-delay", "0.2", "--burst-delay", "0.02")


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@pytest.fixture
def db(postgres_store_url: str, pg_jobs: ModuleType) -> Iterator[psycopg.Connection[Any]]:
    conn = psycopg.connect(_libpq(postgres_store_url), autocommit=True)
    conn.execute(pg_jobs.SIDE_EFFECT_DDL)
    yield conn
    conn.close()


@pytest.fixture
def client(postgres_store_url: str, pg_jobs: ModuleType) -> Iterator[Ratchet]:
    app = Ratchet(postgres_store_url, allowed_modules=["pg_jobs"])
    yield app
    app.close()


def _scalar(conn: psycopg.Connection[Any], sql: str, *params: Any) -> Any:
    row = conn.execute(sql, params or None).fetchone()
    assert row is not None
    return row[0]


def _deadlocks(conn: psycopg.Connection[Any]) -> int:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return int(
        _scalar(conn, "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
    )


def submit(client: Ratchet, pg_jobs: ModuleType, n: int, chunk: int = 2000, **kw: Any) -> None:
    for start in range(0, n, chunk):
        builders = []
        for i in range(start, min(n, start + chunk)):
            b = client.enqueue(pg_jobs.record, i, **kw)
            builders.append(
                b.with_max_retries(20).with_backoff(
                    BackoffPolicy.FIXED, timedelta(milliseconds=200)
                )
            )
        client.submit_many(builders)


def wait_until(
    predicate: Callable[[], bool], timeout: float, what: str, check: Callable[[], None]
) -> None:
    """Poll the database for progress of other processes; ``check`` fails the test at once if
    one of them died."""

    def progressed() -> bool:
        check()
        return predicate()

    assert_eventually(progressed, timeout, what, interval=0.1)


def succeeded(conn: psycopg.Connection[Any]) -> int:
    return int(
        _scalar(conn, "SELECT count(*) FROM scheduler_job_end WHERE terminal_status = 'SUCCEEDED'")
    )


def assert_exactly_once(conn: psycopg.Connection[Any], n: int) -> None:
    rows, distinct, low, high = conn.execute(
        "SELECT count(*), count(DISTINCT n), min(n), max(n) FROM side_effect"
    ).fetchone() or (0, 0, None, None)
    twice = conn.execute(
        "SELECT n, count(*) FROM side_effect GROUP BY n HAVING count(*) > 1 LIMIT 5"
    ).fetchall()
    assert twice == [], f"jobs that ran more than once: {twice}"
    assert (rows, distinct, low, high) == (n, n, 0, n - 1)
    assert _scalar(conn, "SELECT count(*) FROM scheduler_job_queue") == 0, "jobs left behind"
    assert succeeded(conn) == n
    assert (
        _scalar(
            conn,
            "SELECT count(*) FROM (SELECT job_id FROM scheduler_job_execution"
            " WHERE outcome = 'SUCCEEDED' GROUP BY job_id HAVING count(*) = 1) s",
        )
        == n
    ), "every job has exactly one successful attempt"


def run_cluster(
    workers: Any,
    db: psycopg.Connection[Any],
    client: Ratchet,
    pg_jobs: ModuleType,
    *,
    processes: int,
    jobs: int,
    timeout: float,
) -> None:
    deadlocks_before = _deadlocks(db)
    workers.start(processes, "--concurrency", "16", "--batch-size", "32", *FAST_POLLING)
    submit(client, pg_jobs, jobs)
    wait_until(lambda: succeeded(db) >= jobs, timeout, f"{jobs} jobs", workers.assert_running)
    codes = workers.stop()
    assert codes == [0] * processes, workers.logs()[-5000:]
    assert_exactly_once(db, jobs)
    by_worker = dict(db.execute("SELECT pid, count(*) FROM side_effect GROUP BY pid").fetchall())
    assert len(by_worker) >= 2, f"the work was not shared: {by_worker}"
    logs = workers.logs()
    assert "deadlock" not in logs.lower()
    assert "Traceback" not in logs, logs[-5000:]
    assert _deadlocks(db) == deadlocks_before, "the server detected deadlocks"


def test_two_workers_process_2000_jobs_exactly_once(
    workers: Any, db: psycopg.Connection[Any], client: Ratchet, pg_jobs: ModuleType
) -> None:
    run_cluster(workers, db, client, pg_jobs, processes=2, jobs=2_000, timeout=120)


@pytest.mark.slow
def test_four_workers_process_20000_jobs_exactly_once(
    workers: Any, db: psycopg.Connection[Any], client: Ratchet, pg_jobs: ModuleType
) -> None:
    run_cluster(workers, db, client, pg_jobs, processes=4, jobs=20_000, timeout=600)


def test_workers_survive_a_server_restart(
    workers: Any,
    db: psycopg.Connection[Any],
    client: Ratchet,
    pg_jobs: ModuleType,
    postgres_server: Any,
    postgres_store_url: str,
) -> None:
    """Restart PostgreSQL mid-run: workers reconnect, every job still ends exactly once."""
    if not hasattr(postgres_server, "restart"):
        pytest.skip("N/A: an external server (RATCHET_TEST_POSTGRES_URL) cannot be restarted here")
    jobs = 3_000
    workers.start(
        2, "--concurrency", "8", "--batch-size", "16", "--heartbeat", "0.5", *FAST_POLLING
    )
    submit(client, pg_jobs, jobs, sleep_ms=5)
    wait_until(lambda: succeeded(db) >= jobs // 5, 120, "the first fifth", workers.assert_running)
    db.close()
    postgres_server.restart()
    restarted_at = time.time()
    conn = psycopg.connect(_libpq(postgres_store_url), autocommit=True)
    try:
        done_before = succeeded(conn)
        assert done_before < jobs, "the run ended before the restart; nothing was tested"
        wait_until(
            lambda: succeeded(conn) >= jobs,
            180,
            f"{jobs} jobs after the restart",
            workers.assert_running,
        )
        # Every worker kept claiming, running and heartbeating after the restart.
        after = dict(
            conn.execute(
                "SELECT pid, count(*) FROM side_effect WHERE at > to_timestamp(%s) GROUP BY pid",
                (restarted_at,),
            ).fetchall()
        )
        assert len(after) == 2, f"a worker stopped working after the restart: {after}"
        wait_until(
            lambda: (
                _scalar(
                    conn,
                    "SELECT count(*) FROM scheduler_node WHERE heartbeat_at > %s",
                    int(restarted_at * 1_000_000),
                )
                == 2
            ),
            30,
            "both heartbeats after the restart",
            workers.assert_running,
        )
        codes = workers.stop()
        assert codes == [0, 0], workers.logs()[-5000:]
        assert_exactly_once(conn, jobs)
        logs = workers.logs()
        assert "database unavailable" in logs  # the outage was noticed ...
        assert "reachable again" in logs  # ... and survived
        assert "Traceback" not in logs and "Exception in thread" not in logs, logs[-5000:]
    finally:
        conn.close()


def test_wakeup_starts_a_job_long_before_the_next_poll(
    workers: Any, db: psycopg.Connection[Any], pg_jobs: ModuleType, postgres_store_url: str
) -> None:
    """Polling every 60 s, a worker still starts a submitted job within a second."""
    slow = ("--min-delay", "60", "--max-delay", "60", "--burst-delay", "60")
    workers.start(1, "--concurrency", "4", *slow, coordinator="postgres")
    wait_until(
        lambda: (
            _scalar(
                db,
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name = 'ratchet-listener' AND query LIKE 'LISTEN%%'",
            )
            == 1
        ),
        60,
        "the worker's listener",
        workers.assert_running,
    )
    wait_until(
        lambda: _scalar(db, "SELECT count(*) FROM scheduler_node") == 1,
        60,
        "the worker's registration",
        workers.assert_running,
    )
    app = Ratchet(postgres_store_url, allowed_modules=["pg_jobs"], coordinator="postgres")
    latencies = []
    try:
        for i in range(5):
            started = time.monotonic()
            app.enqueue(pg_jobs.record, i).submit()
            wait_until(
                lambda i=i: _scalar(db, "SELECT count(*) FROM side_effect WHERE n = %s", i) == 1,
                30,
                f"job {i} to run",
                workers.assert_running,
            )
            latencies.append(time.monotonic() - started)
    finally:
        app.close()
    assert max(latencies) < 2.0, f"submit -> run took {latencies} s with 60 s polling"
    assert workers.stop() == [0]
