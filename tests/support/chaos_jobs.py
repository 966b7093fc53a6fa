"""The chaos job: checkpointed steps, then a side effect fenced by the job's token.

The side-effect store (``RATCHET_CHAOS_EFFECTS``: a SQLite file path or a PostgreSQL URL) is the
*resource* of Kleppmann's fencing: ``chaos_token`` remembers the highest epoch that wrote for each
job and refuses lower ones; ``chaos_effect`` logs every attempt to write, accepted or not, in
order. A zombie that comes back after its job was taken over is refused there too.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from typing import Any

from ratchet import JobContext

_local = threading.local()

SQLITE_DDL = (
    "CREATE TABLE chaos_token (job_id TEXT PRIMARY KEY, epoch INTEGER NOT NULL)",
    "CREATE TABLE chaos_effect (id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL,"
    " epoch INTEGER NOT NULL, pid INTEGER NOT NULL, accepted INTEGER NOT NULL)",
)
POSTGRES_DDL = (
    "CREATE TABLE chaos_token (job_id text PRIMARY KEY, epoch integer NOT NULL)",
    "CREATE TABLE chaos_effect (id bigserial PRIMARY KEY, job_id text NOT NULL,"
    " epoch integer NOT NULL, pid integer NOT NULL, accepted boolean NOT NULL)",
)
UPSERT = (
    "INSERT INTO chaos_token (job_id, epoch) VALUES ({p}, {p}) ON CONFLICT (job_id) DO UPDATE"
    " SET epoch = excluded.epoch WHERE chaos_token.epoch <= excluded.epoch RETURNING epoch"
)
LOG = "INSERT INTO chaos_effect (job_id, epoch, pid, accepted) VALUES ({p}, {p}, {p}, {p})"


def _target() -> str:
    return os.environ["RATCHET_CHAOS_EFFECTS"]


def is_postgres(target: str) -> bool:
    return target.startswith("postgresql")


def libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def _write(job_id: str, epoch: int) -> bool:
    """One transaction: take the token if no higher epoch holds it, and log the attempt."""
    target = _target()
    if is_postgres(target):
        import psycopg

        conn = getattr(_local, "pg", None)
        if conn is None or conn.closed or conn.broken:
            conn = _local.pg = psycopg.connect(libpq(target), autocommit=True)
        with conn.transaction():
            accepted = conn.execute(UPSERT.format(p="%s"), (job_id, epoch)).fetchone() is not None
            conn.execute(LOG.format(p="%s"), (job_id, epoch, os.getpid(), accepted))
        return accepted
    db = getattr(_local, "sqlite", None)
    if db is None:
        db = _local.sqlite = sqlite3.connect(target, timeout=60, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    try:
        accepted = db.execute(UPSERT.format(p="?"), (job_id, epoch)).fetchone() is not None
        db.execute(LOG.format(p="?"), (job_id, epoch, os.getpid(), int(accepted)))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return accepted


def create_effects(target: str) -> None:
    """Create the side-effect tables (a SQLite file or the PostgreSQL database)."""
    if is_postgres(target):
        import psycopg

        with psycopg.connect(libpq(target), autocommit=True) as conn:
            for ddl in POSTGRES_DDL:
                conn.execute(ddl)
        return
    db = sqlite3.connect(target)
    db.execute("PRAGMA journal_mode=WAL")
    for ddl in SQLITE_DDL:
        db.execute(ddl)
    db.commit()
    db.close()


def effects(target: str) -> list[tuple[int, str, int, int, bool]]:
    """Every logged write, in order: (id, job id, epoch, pid, accepted)."""
    query = "SELECT id, job_id, epoch, pid, accepted FROM chaos_effect ORDER BY id"
    if is_postgres(target):
        import psycopg

        with psycopg.connect(libpq(target)) as conn:
            return [(i, j, e, p, bool(a)) for i, j, e, p, a in conn.execute(query)]
    db = sqlite3.connect(target, timeout=60)
    try:
        return [(i, j, e, p, bool(a)) for i, j, e, p, a in db.execute(query)]
    finally:
        db.close()


def step(steps: int, step_ms: int) -> dict[str, Any]:
    """Work in ``steps`` checkpointed steps (resuming from the last checkpoint), then write the
    fenced side effect; returns the token it ran under."""
    ctx = JobContext.current()
    job_id, epoch = ctx.fencing_token()
    last = ctx.last_checkpoint()
    for n in range((last.step if last is not None else 0) + 1, steps + 1):
        time.sleep(step_ms / 1000)  # the job's own work
        ctx.checkpoint(n, {"pid": os.getpid()})  # raises FencedOut once taken over
    accepted = _write(str(job_id), epoch)
    return {"job": str(job_id), "epoch": epoch, "accepted": accepted}
