"""The MySQL / MariaDB dialect: ``SKIP LOCKED`` claims, a ``GET_LOCK`` migration lock, error codes.

Sessions run under READ COMMITTED: under InnoDB's default REPEATABLE READ, locking reads also
take gap and next-key locks on the claim index, so concurrent ``SKIP LOCKED`` claims, inserts and
deletes of queue rows block and deadlock each other (Solid Queue's MySQL deadlocks). READ
COMMITTED takes record locks only.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Select, event, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError

from ratchet.sql.dialect import ErrorKind, SqlDialect
from ratchet.sql.pool import DEFAULT_IDLE_PING_SECONDS

log = logging.getLogger("ratchet.mysql")

#: Prefix of the named lock held while migrations run (named locks are server-wide, so the
#: database name follows it: two databases on one server migrate independently).
MIGRATION_LOCK_NAME = "ratchet_migrate"
#: Seconds a node waits for another node's migration before giving up.
MIGRATION_LOCK_TIMEOUT = 300

#: The isolation level every session asks for.
ISOLATION_LEVEL = "READ COMMITTED"

IDEMPOTENCY_TABLE = "scheduler_idempotency_key"
BUSINESS_KEY_INDEX = "uq_queue_business_key"

ER_DUP_ENTRY = 1062
#: Deadlock found (1213), lock wait timeout (1205), MySQL 8 ``NOWAIT`` (3572), MariaDB's
#: "record has changed since last read" under snapshot isolation (1020).
RETRYABLE_CODES = frozenset({1213, 1205, 3572, 1020})
#: Server gone away (2006), lost connection (2013), cannot connect (2003), lost connection at
#: handshake (2055), connection killed (1927), shutdown in progress (1053), too many
#: connections (1040), MySQL 8 inactivity disconnect (4031).
TRANSIENT_CODES = frozenset({2006, 2013, 2003, 2055, 1927, 1053, 1040, 4031})

#: Pool defaults: a worker uses a poller, a writer and a heartbeat connection plus occasional
#: reads from job threads; submitters in the same process share the pool.
DEFAULT_POOL_SIZE = 10
DEFAULT_MAX_OVERFLOW = 20
#: Recycle pooled connections before a server's ``wait_timeout`` (8 h by default) closes them.
POOL_RECYCLE_SECONDS = 3600

#: Largest multi-statement query the batched-update pipeline sends (well under the smallest
#: default ``max_allowed_packet``, 16 MiB on MariaDB 10.6 and 64 MiB on MySQL 8).
PIPELINE_MAX_BYTES = 1 << 20
#: PyMySQL's ``CLIENT.MULTI_STATEMENTS`` capability flag.
CLIENT_MULTI_STATEMENTS = 1 << 16

_DUP_KEY = re.compile(r"for key '(?:[^'.]*\.)?([^']+)'")


def error_code(exc: BaseException) -> int | None:
    """The server or client error number of a PyMySQL error (wrapped or not), if any."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    return None


class MySQLDialect(SqlDialect):
    """MySQL 8.0+ and MariaDB 10.6+ through PyMySQL."""

    name = "mysql"
    skip_locked = True
    multi_host = True
    ping_idle_after = DEFAULT_IDLE_PING_SECONDS

    def engine_kwargs(self, url: str) -> dict[str, Any]:
        """READ COMMITTED, utf8mb4, UTC session time zone, recycled pooled connections (idle ones
        are pinged before use, see ``ping_idle_after``)."""
        connect_args: dict[str, Any] = {
            "charset": "utf8mb4",
            "connect_timeout": 5,
            # CURRENT_TIMESTAMP & co. in UTC (the schema itself stores integer microseconds).
            "init_command": "SET time_zone = '+00:00'",
        }
        flag = make_url(url).query.get("ssl_disabled")
        if isinstance(flag, str):
            # PyMySQL would take the string "false" as true.
            connect_args["ssl_disabled"] = flag.strip().lower() in ("1", "true", "yes", "on")
        return {
            "pool_recycle": POOL_RECYCLE_SECONDS,
            "pool_size": DEFAULT_POOL_SIZE,
            "max_overflow": DEFAULT_MAX_OVERFLOW,
            "pool_timeout": 30,
            "isolation_level": ISOLATION_LEVEL,
            "connect_args": connect_args,
        }

    def configure_engine(self, engine: Engine, *, write: bool) -> None:
        """Check the isolation level; send batched UPDATE/DELETEs in one round trip.

        PyMySQL runs ``executemany`` of anything but ``INSERT ... VALUES`` as one round trip per
        row, so recording 100 outcomes would cost 200 round trips. The store's engine enables
        ``CLIENT_MULTI_STATEMENTS`` and sends those statements, each escaped by the driver, as
        one multi-statement query instead: same statements, same order, same transaction.
        """
        state = {"checked": False}

        @event.listens_for(engine, "do_connect")
        def _multi_statements(dialect: Any, rec: Any, cargs: Any, cparams: dict[str, Any]) -> None:
            cparams["client_flag"] = int(cparams.get("client_flag", 0)) | CLIENT_MULTI_STATEMENTS

        @event.listens_for(engine, "do_executemany")
        def _pipeline(cursor: Any, statement: str, parameters: Any, context: Any) -> bool | None:
            if len(parameters) < 2 or statement.lstrip()[:6].upper() not in ("UPDATE", "DELETE"):
                return None
            pipeline_executemany(cursor, statement, parameters)
            return True

        @event.listens_for(engine, "connect")
        def _check_isolation(dbapi_conn: Any, record: Any) -> None:
            if state["checked"]:
                return
            state["checked"] = True
            level = engine.dialect.get_isolation_level(dbapi_conn)
            if str(level).upper().replace("-", " ") != ISOLATION_LEVEL:
                log.warning(
                    "MySQL session isolation is %s, not %s: SKIP LOCKED claims take gap locks "
                    "and become deadlock-prone (see docs/mysql.md)",
                    level,
                    ISOLATION_LEVEL,
                )

    def lock_for_claim(self, stmt: Select[Any]) -> Select[Any]:
        return stmt.with_for_update(skip_locked=True)

    def lock_rows(self, stmt: Select[Any]) -> Select[Any]:
        return stmt.with_for_update()

    @contextmanager
    def migration_lock(self, conn: Connection) -> Iterator[None]:
        """Hold ``GET_LOCK('ratchet_migrate.<database>')`` on a second session for the whole Alembic run.

        MySQL commits DDL implicitly, so a transaction cannot serialise migrations; a named lock
        can. The migration's own transaction (the version-table rows) is committed before the
        lock is released, so a node that waited then finds the schema at head and does nothing.
        """
        name = migration_lock_name(conn.engine.url.database)
        with conn.engine.connect() as holder:
            got = holder.execute(
                text("SELECT GET_LOCK(:name, :timeout)"),
                {"name": name, "timeout": MIGRATION_LOCK_TIMEOUT},
            ).scalar()
            holder.commit()
            if got != 1:
                raise TimeoutError(
                    f"could not take the migration lock {name!r} within "
                    f"{MIGRATION_LOCK_TIMEOUT} s (another node is still migrating?)"
                )
            try:
                yield
                conn.commit()
            finally:
                try:
                    holder.execute(text("SELECT RELEASE_LOCK(:name)"), {"name": name})
                    holder.commit()
                except DBAPIError:
                    # The lock dies with its session: make sure the pool never reuses it.
                    holder.invalidate()

    def classify(self, exc: BaseException) -> ErrorKind:
        """Classify by error number; duplicates by the key named in the message."""
        code = error_code(exc)
        if code == ER_DUP_ENTRY:
            return _classify_duplicate(exc)
        if code in RETRYABLE_CODES:
            return ErrorKind.RETRYABLE
        if code in TRANSIENT_CODES:
            return ErrorKind.TRANSIENT
        if isinstance(exc, DBAPIError) and exc.connection_invalidated:
            return ErrorKind.TRANSIENT
        return ErrorKind.OTHER


def migration_lock_name(database: str | None) -> str:
    """The named lock of one database's migrations (at most 64 characters, as servers allow)."""
    return f"{MIGRATION_LOCK_NAME}.{database or ''}"[:64]


def pipeline_executemany(cursor: Any, statement: str, parameters: Any) -> int:
    """Run ``statement`` once per parameter set in as few multi-statement queries as fit.

    Sets and returns ``cursor.rowcount`` as the sum over all statements, like ``executemany``.
    An error stops the server at the failing statement and is raised from ``nextset()``.
    """
    total = 0
    batch: list[str] = []
    size = 0

    def flush() -> None:
        nonlocal total, size
        cursor.execute(";\n".join(batch))
        total += max(cursor.rowcount, 0)
        while cursor.nextset():
            total += max(cursor.rowcount, 0)
        batch.clear()
        size = 0

    for params in parameters:
        sql = cursor.mogrify(statement, params)
        if batch and size + len(sql) > PIPELINE_MAX_BYTES:
            flush()
        batch.append(sql)
        size += len(sql) + 2
    if batch:
        flush()
    cursor.rowcount = total
    return total


def _classify_duplicate(exc: BaseException) -> ErrorKind:
    """Which uniqueness rule a 1062 broke.

    MySQL 8 names the key ``table.key``; MariaDB names only the key, and a primary key is always
    ``PRIMARY``, so a bare ``PRIMARY`` counts as the idempotency key only when the failing
    statement inserted into the idempotency-key table.
    """
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    message = str(getattr(orig, "args", ("", ""))[-1])
    match = _DUP_KEY.search(message)
    qualified = match.group(0) if match else ""
    key = match.group(1) if match else ""
    if key == BUSINESS_KEY_INDEX:
        return ErrorKind.DUPLICATE_BUSINESS_KEY
    if key == "PRIMARY":
        if f"{IDEMPOTENCY_TABLE}.PRIMARY" in qualified:
            return ErrorKind.DUPLICATE_IDEMPOTENCY_KEY
        statement = getattr(exc, "statement", None) or ""
        if "." not in qualified.removeprefix("for key '") and re.match(
            rf"\s*INSERT\s+INTO\s+`?{IDEMPOTENCY_TABLE}`?", statement, re.IGNORECASE
        ):
            return ErrorKind.DUPLICATE_IDEMPOTENCY_KEY
    return ErrorKind.OTHER
