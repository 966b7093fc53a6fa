"""Jobs and the app for the PostgreSQL subprocess tests (workers run ``ratchet worker pg_jobs:app``).

The app is built on first access from ``RATCHET_PG_TEST_URL`` (and ``RATCHET_PG_TEST_COORDINATOR``,
default ``local``), so the test process can import the job functions without an app.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import psycopg

_local = threading.local()
_app: Any = None
_app_lock = threading.Lock()

SIDE_EFFECT_DDL = (
    "CREATE TABLE side_effect (n integer NOT NULL, pid integer NOT NULL,"
    " at timestamptz NOT NULL DEFAULT clock_timestamp())"
)


def libpq(url: str) -> str:
    """A libpq URI for the store URL (without the store's own ``pgbouncer`` switch)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url).difference_update_query(["pgbouncer"]).set(drivername="postgresql")
    return parsed.render_as_string(hide_password=False)


def _conn() -> psycopg.Connection[Any]:
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed or conn.broken:
        url = os.environ["RATCHET_PG_TEST_URL"]
        # Through PgBouncer (transaction pooling) no statement may be prepared by name.
        options: dict[str, Any] = {"prepare_threshold": None} if "pgbouncer=" in url else {}
        conn = psycopg.connect(libpq(url), autocommit=True, **options)
        _local.conn = conn
    return conn


def record(n: int, sleep_ms: int = 0) -> None:
    """The side effect: one row per execution (no unique key, so a second run would show)."""
    if sleep_ms:
        time.sleep(sleep_ms / 1000)  # stands for the job's own work
    _conn().execute("INSERT INTO side_effect (n, pid) VALUES (%s, %s)", (n, os.getpid()))


def noop(n: int = 0) -> None:
    """Does nothing (benchmarks)."""


def __getattr__(name: str) -> Any:
    global _app
    if name != "app":
        raise AttributeError(name)
    with _app_lock:
        if _app is None:
            from ratchet import Ratchet

            _app = Ratchet(
                os.environ["RATCHET_PG_TEST_URL"],
                allowed_modules=["pg_jobs"],
                coordinator=os.environ.get("RATCHET_PG_TEST_COORDINATOR", "local"),
            )
        return _app
