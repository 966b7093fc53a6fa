"""Jobs and the app of the MySQL cluster tests (imported by worker subprocesses as ``mysql_jobs``).

``ratchet worker mysql_jobs:app`` builds the app on first access from ``RATCHET_TEST_DB_URL``.
Every job writes one row into the side-effect table ``side_effect`` (its own autocommitted
statement), so the table proves how often each job really ran. When ``RATCHET_TEST_STATS_DIR`` is
set, the process writes its store's ``retried_errors`` there at exit (after the SIGTERM drain).
``RATCHET_TEST_CIRCUIT_BREAKERS=0`` turns the per-target circuit breakers off (the soak's planned
failures would otherwise keep the breaker of ``flaky`` open, which tests the breaker, not the
store).
"""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path
from typing import Any

from ratchet import Ratchet

SIDE_EFFECT_DDL = (
    "CREATE TABLE IF NOT EXISTS side_effect ("
    " id BIGINT AUTO_INCREMENT PRIMARY KEY, job_no INT NOT NULL, pid INT NOT NULL,"
    " KEY (job_no)) ENGINE=InnoDB"
)

_app: Ratchet | None = None
_local = threading.local()
_lock = threading.Lock()


def make_app(db_url: str, **options: Any) -> Ratchet:
    """An app that may run this module's jobs (the schema must exist)."""
    return Ratchet(db_url, allowed_modules=[__name__], **options)


def _connection() -> Any:
    """This thread's own autocommit PyMySQL connection to the test database."""
    conn = getattr(_local, "conn", None)
    if conn is None:
        import pymysql
        from sqlalchemy.engine import make_url

        u = make_url(os.environ["RATCHET_TEST_DB_URL"])
        conn = pymysql.connect(
            host=u.host,
            port=u.port or 3306,
            user=u.username,
            password=u.password or "",
            database=u.database,
            autocommit=True,
            ssl_disabled=True,
        )
        _local.conn = conn
    return conn


def touch(job_no: int) -> None:
    """The side effect: one row per execution."""
    with _connection().cursor() as cur:
        cur.execute("INSERT INTO side_effect (job_no, pid) VALUES (%s, %s)", (job_no, os.getpid()))


def flaky(job_no: int, failures: int) -> None:
    """Fails its first ``failures`` attempts (counted in the side-effect table), then succeeds."""
    with _connection().cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM side_effect WHERE job_no = %s", (job_no,))
        (seen,) = cur.fetchone()
    touch(job_no)
    if seen < failures:
        raise RuntimeError(f"planned failure {seen + 1} of {failures} for job {job_no}")


def _write_stats() -> None:
    directory = os.environ.get("RATCHET_TEST_STATS_DIR")
    if directory and _app is not None:
        retried = getattr(_app.store, "retried_errors", 0)
        Path(directory, f"retried-{os.getpid()}.txt").write_text(str(retried))


def __getattr__(name: str) -> Any:
    global _app
    if name == "app":
        with _lock:
            if _app is None:
                breakers = os.environ.get("RATCHET_TEST_CIRCUIT_BREAKERS", "1") != "0"
                _app = make_app(os.environ["RATCHET_TEST_DB_URL"], circuit_breakers=breakers)
                atexit.register(_write_stats)
        return _app
    raise AttributeError(name)
