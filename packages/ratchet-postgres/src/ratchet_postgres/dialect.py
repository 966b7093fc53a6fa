"""The PostgreSQL dialect: ``SKIP LOCKED`` claims, an advisory migration lock, SQLSTATE mapping."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, Select, any_, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from ratchet.sql.dialect import ErrorKind, SqlDialect
from ratchet.sql.pool import ShrinkingQueuePool, install_socket_check

#: Key of the transaction-level advisory lock held while migrations run (ASCII "ratchetM").
MIGRATION_LOCK_KEY = 0x7261746368657444

#: Constraint names PostgreSQL reports for the uniqueness rules a submission can break.
IDEMPOTENCY_CONSTRAINT = "scheduler_idempotency_key_pkey"
#: A job id taken: the job table's or the queue's primary key (whichever the insert hits first).
JOB_ID_CONSTRAINTS = frozenset({"scheduler_job_pkey", "scheduler_job_queue_pkey"})
BUSINESS_KEY_CONSTRAINT = "uq_queue_business_key"

UNIQUE_VIOLATION = "23505"
#: Serialization failure, deadlock detected, lock not available (NOWAIT / lock_timeout).
RETRYABLE_STATES = frozenset({"40001", "40P01", "55P03"})
#: Admin shutdown, crash shutdown, cannot connect now (starting up / shutting down).
TRANSIENT_STATES = frozenset({"57P01", "57P02", "57P03"})
#: Too many connections (``max_connections``, or the slots reserved for superusers).
TOO_MANY_CONNECTIONS = "53300"
#: What PgBouncer says when it refuses a client over its ``max_client_conn``.
PGBOUNCER_CLIENT_LIMIT = "max_client_conn"
#: What the server says when it refuses a connection over a limit. A refused connection
#: attempt reaches psycopg as libpq's message, without the SQLSTATE.
LIMIT_MESSAGES = (
    "too many connections",  # for role / for database (CONNECTION LIMIT)
    "too many clients already",  # max_connections
    "remaining connection slots are reserved",  # max_connections minus the reserved ones
    PGBOUNCER_CLIENT_LIMIT,
)

#: Pool defaults: a worker uses a poller, a writer and a heartbeat connection plus occasional
#: reads from job threads; submitters in the same process share the pool.
DEFAULT_POOL_SIZE = 10
DEFAULT_MAX_OVERFLOW = 20


#: psycopg's ``prepare_threshold`` on a direct connection: no statement is prepared because it
#: ran often. A prepared statement may get a *generic* plan after five calls, built from the
#: table sizes of that moment and kept until the table's statistics change; built while the
#: queue was empty (a worker polling an idle queue, a watcher pass), it reads the queue by
#: sequential scans once it holds many jobs. Not None, which the store keeps for PgBouncer's
#: transaction pooling, where no statement may be prepared by name at all.
NEVER_AUTO_PREPARE = 2**62


class PostgresDialect(SqlDialect):
    """PostgreSQL >= 12 through psycopg 3."""

    name = "postgresql"
    skip_locked = True
    migration_locations = (str(Path(__file__).resolve().parent / "migrations"),)
    multi_host = True
    switches_autocommit = True

    def engine_kwargs(self, url: str) -> dict[str, Any]:
        """Pooled connections are checked on checkout (see :meth:`configure_engine`)."""
        return {
            "poolclass": ShrinkingQueuePool,
            "pool_size": DEFAULT_POOL_SIZE,
            "max_overflow": DEFAULT_MAX_OVERFLOW,
            "pool_timeout": 30,
            "connect_args": {
                # psycopg prepares a statement once a connection has run it five times, and the
                # server may then plan it once for good (see NEVER_AUTO_PREPARE); the statements
                # that gain from being prepared are prepared by name (NamedStatement).
                "prepare_threshold": NEVER_AUTO_PREPARE,
                "connect_timeout": 5,
                "application_name": "ratchet",
                # Notice a dead server or a broken network instead of hanging on a socket.
                "keepalives": 1,
                "keepalives_idle": 10,
                "keepalives_interval": 5,
                "keepalives_count": 3,
            },
        }

    def configure_engine(self, engine: Engine, *, write: bool) -> None:
        """Check a pooled connection's socket on checkout (a ping only if the server spoke), so
        a worker reconnects after the server restarts without a round trip per transaction."""
        install_socket_check(engine, _socket_of)

    id_list_chunk = 10_000

    def in_values(self, column: Any, values: Sequence[Any]) -> ColumnElement[bool]:
        """``column = ANY(:values)``: one array parameter, so a statement's text (and its plan)
        is the same for every list length and binding costs one parameter, not one per id."""
        array = bindparam("values", list(values), type_=ARRAY(column.type), unique=True)
        return column == any_(array)  # type: ignore[no-any-return]

    def lock_for_claim(self, stmt: Select[Any]) -> Select[Any]:
        return stmt.with_for_update(skip_locked=True)

    def lock_rows(self, stmt: Select[Any]) -> Select[Any]:
        return stmt.with_for_update()

    @contextmanager
    def migration_lock(self, conn: Connection) -> Iterator[None]:
        """Hold a transaction-level advisory lock; it is released when the migration commits.

        A node that waited for the lock then finds the schema at head and does nothing.
        """
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        yield

    def set_autocommit(self, dbapi_connection: Any, on: bool) -> None:
        """psycopg's ``autocommit`` flag: client-side, no round trip."""
        dbapi_connection.autocommit = on

    def connection_limit_setting(self, exc: BaseException) -> str:
        text = str(getattr(exc, "orig", exc))
        if PGBOUNCER_CLIENT_LIMIT in text:
            return "PgBouncer's max_client_conn"
        if "for role" in text:
            return "the role's limit (ALTER ROLE ... CONNECTION LIMIT)"
        if "for database" in text:
            return "the database's limit (ALTER DATABASE ... CONNECTION LIMIT)"
        return "PostgreSQL's max_connections (or put PgBouncer in front of it)"

    def classify(self, exc: BaseException) -> ErrorKind:
        """Classify by SQLSTATE (``exc.orig.sqlstate``), then by the connection's state."""
        orig = exc.orig if isinstance(exc, DBAPIError) else exc
        state = getattr(orig, "sqlstate", None) or ""
        if state == UNIQUE_VIOLATION:
            diag = getattr(orig, "diag", None)
            constraint = getattr(diag, "constraint_name", None)
            if constraint == IDEMPOTENCY_CONSTRAINT:
                return ErrorKind.DUPLICATE_IDEMPOTENCY_KEY
            if constraint in JOB_ID_CONSTRAINTS:
                return ErrorKind.DUPLICATE_JOB_ID
            if constraint == BUSINESS_KEY_CONSTRAINT:
                return ErrorKind.DUPLICATE_BUSINESS_KEY
            return ErrorKind.OTHER
        if state in RETRYABLE_STATES:
            return ErrorKind.RETRYABLE
        if state == TOO_MANY_CONNECTIONS or any(m in str(orig) for m in LIMIT_MESSAGES):
            return ErrorKind.CONNECTION_LIMIT
        if state.startswith("08") or state in TRANSIENT_STATES:
            return ErrorKind.TRANSIENT
        if isinstance(exc, DBAPIError) and exc.connection_invalidated:
            return ErrorKind.TRANSIENT
        if _is_dead_connection_error(orig):
            return ErrorKind.TRANSIENT
        return ErrorKind.OTHER


def _is_dead_connection_error(orig: BaseException | None) -> bool:
    """A psycopg ``OperationalError`` without SQLSTATE: refused, reset or closed connection.

    Errors the server reports always carry a SQLSTATE; those raised by libpq itself (connection
    refused, "server closed the connection unexpectedly", "consuming input failed") do not.
    """
    import psycopg

    return isinstance(orig, psycopg.OperationalError) and not getattr(orig, "sqlstate", None)


def _socket_of(dbapi_conn: Any) -> int | None:
    """The psycopg connection's socket, or None once psycopg knows it is closed or broken."""
    if dbapi_conn.closed or dbapi_conn.broken:
        return None
    return int(dbapi_conn.pgconn.socket)
