"""The SQLite dialect: WAL, a busy timeout, and every write under ``BEGIN IMMEDIATE``.

SQLite has one writer at a time per file, so the claim needs no row locks: the write lock taken
by ``BEGIN IMMEDIATE`` makes claims from several worker processes on one machine exclusive.
A database in a file gets its write-ahead log checkpointed on a thread of its own
(:mod:`ratchet.sql.sqlite_checkpoint`) once the store first writes.
"""

from __future__ import annotations

import sqlite3
import weakref
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from ratchet.sql.dialect import ErrorKind, SqlDialect
from ratchet.sql.sqlite_checkpoint import BACKSTOP_PAGES, WalCheckpointer

#: The tables keyed by job id: SQLite names a broken primary key ``<table>.job_id``.
JOB_ID_TABLES = ("scheduler_job", "scheduler_job_queue")

BUSY_TIMEOUT_MS = 30_000


class SqliteDialect(SqlDialect):
    name = "sqlite"
    skip_locked = False
    multi_host = False
    migration_locations = (str(Path(__file__).resolve().parent / "sqlite_migrations"),)
    driver_begin = "BEGIN IMMEDIATE"

    def __init__(self, *, background_checkpoints: bool = True) -> None:
        self.background_checkpoints = background_checkpoints
        """Whether a database in a file gets a :class:`WalCheckpointer` (False: commits
        checkpoint the log past SQLite's default 1,000 pages, and no thread starts)."""
        self.checkpointer: WalCheckpointer | None = None
        """Checkpoints the log of a database in a file, from the write engine's first
        connection on (None before it, for a database in memory, or when turned off)."""

    def engine_kwargs(self, url: str) -> dict[str, Any]:
        return {"connect_args": {"timeout": BUSY_TIMEOUT_MS / 1000, "check_same_thread": False}}

    def separate_write_engine(self) -> bool:
        return True

    def configure_engine(self, engine: Engine, *, write: bool) -> None:
        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, record: Any) -> None:
            dbapi_conn.isolation_level = None  # we emit BEGIN ourselves
            cur = dbapi_conn.cursor()
            (mode,) = cur.execute("PRAGMA journal_mode=WAL").fetchone()
            cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            cur.execute("PRAGMA synchronous=NORMAL")
            if write and self.background_checkpoints and str(mode).lower() == "wal":
                self._checkpoint_in_background(cur)
            cur.close()

        begin = self.driver_begin if write else "BEGIN"

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            # Straight to the driver: a full SQLAlchemy execution costs twenty times more than
            # this statement, on every transaction. Errors are wrapped as SQLAlchemy would.
            try:
                conn.connection.dbapi_connection.execute(begin)
            except sqlite3.Error as exc:
                raise DBAPIError.instance(
                    begin, (), exc, sqlite3.Error, dialect=conn.dialect
                ) from exc

    def _checkpoint_in_background(self, cursor: Any) -> None:
        """Leave the log's checkpoints to the checkpointer (started here, for a database in a
        file), commits checkpointing only past :data:`BACKSTOP_PAGES`."""
        if self.checkpointer is None:
            path = next(
                (row[2] for row in cursor.execute("PRAGMA database_list") if row[1] == "main"), ""
            )
            if not path:
                return  # in memory, or a temporary database: no log to checkpoint
            self.checkpointer = WalCheckpointer(path)
            # A store dropped without close() stops its thread when it is collected.
            weakref.finalize(self, self.checkpointer.stop, 0)
        cursor.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}")
        self.checkpointer.ensure_running()

    def close(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.stop()

    def skip_duplicate_keys_clause(self, dialect_name: str) -> str | None:
        """``ON CONFLICT DO NOTHING`` (SQLite 3.24+): the key look-up of a submission is then
        needed only when a key was taken."""
        if dialect_name == "sqlite" and sqlite3.sqlite_version_info >= (3, 24):
            return "ON CONFLICT DO NOTHING"
        return None

    def classify(self, exc: BaseException) -> ErrorKind:
        orig = exc.orig if isinstance(exc, DBAPIError) else exc
        text = str(orig)
        if isinstance(orig, sqlite3.IntegrityError):
            if "idempotency_key" in text:
                return ErrorKind.DUPLICATE_IDEMPOTENCY_KEY
            if any(text.endswith(f"{table}.job_id") for table in JOB_ID_TABLES):
                return ErrorKind.DUPLICATE_JOB_ID
            if "business_key" in text:
                return ErrorKind.DUPLICATE_BUSINESS_KEY
            return ErrorKind.OTHER
        if isinstance(orig, sqlite3.OperationalError):
            if "locked" in text or "busy" in text:
                return ErrorKind.RETRYABLE
            if "unable to open" in text or "disk I/O" in text:
                return ErrorKind.TRANSIENT
        return ErrorKind.OTHER
