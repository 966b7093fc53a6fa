"""Job modules for the gate tests: resource permits, circuit breakers, class policy, beans.

``ratchet worker gate_jobs:make_app`` builds an app from the environment (``GATE_DB_URL``,
``GATE_LIMIT``, ``GATE_RETRY_MS``), so worker subprocesses share one limit configuration.
"""

from __future__ import annotations

import os
import sqlite3
import time
from datetime import timedelta
from typing import Any

from ratchet import JobContext, Ratchet, circuit_breaker

RESOURCE = "payment-api"


def make_app() -> Ratchet:
    """The app of a worker subprocess (limits from the environment, stored at start)."""
    limit = int(os.environ.get("GATE_LIMIT", "2"))
    retry = timedelta(milliseconds=int(os.environ.get("GATE_RETRY_MS", "100")))
    return Ratchet(
        os.environ["GATE_DB_URL"],
        allowed_modules=["gate_jobs"],
        resource_limits={RESOURCE: (limit, retry)},
    )


# ------------------------------------------------------------------------------ permits
def make_span_db(path: str) -> str:
    """A side-effect table the jobs write their start / end times and pids into."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE span(token TEXT, pid INTEGER, started REAL, ended REAL)")
    conn.commit()
    conn.close()
    return path


def _write(db: str, sql: str, *args: Any) -> int:
    conn = sqlite3.connect(db, timeout=30)
    try:
        rowid = conn.execute(sql, args).lastrowid
        conn.commit()
        return rowid or 0
    finally:
        conn.close()


def _start(db: str, token: str) -> int:
    """One row per execution (a re-run after a takeover gets its own)."""
    sql = "INSERT INTO span(token, pid, started) VALUES (?, ?, ?)"
    return _write(db, sql, token, os.getpid(), time.time())


def _end(db: str, row: int) -> None:
    _write(db, "UPDATE span SET ended = ? WHERE rowid = ?", time.time(), row)


def spans(db: str) -> list[tuple[str, int, float, float | None]]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return list(conn.execute("SELECT token, pid, started, ended FROM span ORDER BY started"))
    finally:
        conn.close()


def hold_resource(db: str, token: str, seconds: float) -> str:
    """Record when this execution starts and ends (measured by the job itself)."""
    row = _start(db, token)
    time.sleep(seconds)  # the work being limited
    _end(db, row)
    return token


def hold_until_killed(db: str, token: str) -> str:
    """First execution: record the start and block (the test kills the process). Later
    executions (after recovery) finish at once."""
    conn = sqlite3.connect(db, timeout=30)
    try:
        seen = conn.execute("SELECT 1 FROM span WHERE token = ?", (token,)).fetchone()
    finally:
        conn.close()
    row = _start(db, token)
    if seen is None:
        time.sleep(600)
    _end(db, row)
    return "recovered"


def fail_with(message: str) -> None:
    raise RuntimeError(message)


# ------------------------------------------------------------------------------ breakers
class Declined(Exception):
    """A business outcome, not an outage: ignored by the payments breaker."""


class GatewayDown(ConnectionError):
    pass


@circuit_breaker(service="payments", profile="FAST", ignore=Declined)
def charge(outcome: str) -> str:
    """``ok``, ``down`` (a failure), ``declined`` (ignored) or ``wrapped`` (down, as a cause)."""
    if outcome == "down":
        raise GatewayDown("gateway unreachable")
    if outcome == "declined":
        raise Declined("card declined")
    if outcome == "wrapped":
        try:
            raise GatewayDown("socket reset")
        except GatewayDown as exc:
            raise RuntimeError("charge failed") from exc
    if outcome == "declined-wrapping-down":
        try:
            raise GatewayDown("socket reset")
        except GatewayDown as exc:
            raise Declined("declined after reset") from exc
    return "ok"


@circuit_breaker(profile="EXTERNAL_API", record=ConnectionError)
def fetch(outcome: str) -> str:
    """Only ConnectionErrors count against its breaker (named ``gate_jobs.fetch``)."""
    if outcome == "down":
        raise ConnectionError("no route")
    if outcome == "bug":
        raise ValueError("a bug, not an outage")
    return "fetched"


def plain(value: Any) -> Any:
    """No decorator: its breaker is ``gate_jobs.plain`` with the app's default profile."""
    if value == "fail":
        raise RuntimeError("plain failure")
    return value


def attempt_number() -> int:
    return JobContext.current().attempt


# ------------------------------------------------------------------------------ beans
class Counter:
    """A bean that counts how often the default resolver constructed it."""

    constructed = 0

    def __init__(self) -> None:
        type(self).constructed += 1
        self.calls = 0

    def bump(self) -> int:
        self.calls += 1
        return self.calls
