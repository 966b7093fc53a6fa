"""The MySQL / MariaDB dialect: ``SKIP LOCKED`` claims, a ``GET_LOCK`` migration lock, error codes.

Two DBAPI drivers are supported, chosen by the URL (``mysql+pymysql://``, the default, or
``mysql+mysqldb://`` for mysqlclient, the C driver); :class:`Driver` holds what differs between
them (connection arguments, how a value becomes an SQL literal). Both raise errors whose first
argument is the server's or the client library's error number, which is all the classification
reads.

Sessions run under READ COMMITTED: under InnoDB's default REPEATABLE READ, locking reads also
take gap and next-key locks on the claim index, so concurrent ``SKIP LOCKED`` claims, inserts and
deletes of queue rows block and deadlock each other (Solid Queue's MySQL deadlocks). READ
COMMITTED takes record locks only.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Select, event, text
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError

from ratchet.sql.dialect import ErrorKind, SqlDialect
from ratchet.sql.pool import DEFAULT_IDLE_PING_SECONDS, ShrinkingQueuePool

log = logging.getLogger("ratchet.mysql")

#: Prefix of the named lock held while migrations run (named locks are server-wide, so the
#: database name follows it: two databases on one server migrate independently).
MIGRATION_LOCK_NAME = "ratchet_migrate"
#: Seconds a node waits for another node's migration before giving up.
MIGRATION_LOCK_TIMEOUT = 300

#: The isolation level every session asks for.
ISOLATION_LEVEL = "READ COMMITTED"

IDEMPOTENCY_TABLE = "scheduler_idempotency_key"
JOB_TABLE = "scheduler_job"
QUEUE_TABLE = "scheduler_job_queue"
BUSINESS_KEY_INDEX = "uq_queue_business_key"

ER_DUP_ENTRY = 1062
#: Deadlock found (1213), lock wait timeout (1205), MySQL 8 ``NOWAIT`` (3572), MariaDB's
#: "record has changed since last read" under snapshot isolation (1020).
RETRYABLE_CODES = frozenset({1213, 1205, 3572, 1020})
#: Server gone away (2006), lost connection (2013), cannot connect (2003; 2002 from MariaDB's and
#: MySQL's client libraries, under mysqlclient, for a refused TCP connection too), lost
#: connection at handshake (2055), connection killed (1927), shutdown in progress (1053), MySQL 8
#: inactivity disconnect (4031).
TRANSIENT_CODES = frozenset({2006, 2013, 2002, 2003, 2055, 1927, 1053, 4031})
#: Too many connections (1040: ``max_connections``; 1203: ``max_user_connections``; 1226: an
#: account's own ``MAX_USER_CONNECTIONS``).
CONNECTION_LIMIT_CODES = frozenset({1040, 1203, 1226})

#: Pool defaults: a worker uses a poller, a writer and a heartbeat connection plus occasional
#: reads from job threads; submitters in the same process share the pool.
DEFAULT_POOL_SIZE = 10
DEFAULT_MAX_OVERFLOW = 20
#: Recycle pooled connections before a server's ``wait_timeout`` (8 h by default) closes them.
POOL_RECYCLE_SECONDS = 3600

#: Largest multi-statement query the batched-update pipeline sends (well under the smallest
#: default ``max_allowed_packet``, 16 MiB on MariaDB 10.6 and 64 MiB on MySQL 8).
PIPELINE_MAX_BYTES = 1 << 20
#: The protocol's ``CLIENT_MULTI_STATEMENTS`` capability flag (PyMySQL and mysqlclient alike).
CLIENT_MULTI_STATEMENTS = 1 << 16

#: Execution option of a multi-statement query (``Connection.exec_driver_sql`` with
#: ``no_parameters``): a list that receives ``(rowcount, rows or None)`` of every statement.
MULTI_RESULTS = "ratchet_multi_results"

_DUP_KEY = re.compile(r"for key '(?:[^'.]*\.)?([^']+)'")


def error_code(exc: BaseException) -> int | None:
    """The server or client error number of a PyMySQL or mysqlclient error (wrapped or not)."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    return None


def _flag(value: Any) -> bool:
    """A URL query flag as a boolean (``"false"`` is false, unlike ``bool("false")``)."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


class Driver:
    """What differs between the DBAPI drivers: PyMySQL (pure Python, the default)."""

    name = "pymysql"

    def connect_args(self, query: Any) -> dict[str, Any]:
        """Driver-specific connection arguments, given the URL's query."""
        flag = query.get("ssl_disabled")
        if isinstance(flag, str):
            # PyMySQL would take the string "false" as true.
            return {"ssl_disabled": _flag(flag)}
        return {}

    def prepare_connect(self, cparams: dict[str, Any]) -> None:
        """Adjust the arguments of each new connection (after SQLAlchemy's, before connecting)."""

    def quote(self, dbapi_conn: Any) -> Callable[[str], str]:
        """``str -> quoted, escaped SQL string literal`` for the connection (its charset and
        ``NO_BACKSLASH_ESCAPES``)."""
        return dbapi_conn.escape  # type: ignore[no-any-return]

    def fallback(self, dbapi_conn: Any) -> Callable[[Any], str]:
        """The driver's own literal of any value (used for the uncommon types)."""
        return dbapi_conn.escape  # type: ignore[no-any-return]

    def literal(self, dbapi_conn: Any) -> Callable[[Any], str]:
        """``value -> SQL literal``: what the driver's client-side interpolation makes of it.

        Both drivers interpolate parameters into the statement text on the client (neither uses
        server-side prepared statements) through a generic, per-type dispatch written in Python.
        The store's statements bind only integers, byte strings (ids), strings and NULL; those
        are rendered here directly (byte strings as ``X'..'`` hex literals, as PyMySQL does), any
        other type by the driver.
        """
        quote = self.quote(dbapi_conn)
        fallback = self.fallback(dbapi_conn)

        def literal(value: Any) -> str:
            kind = type(value)
            if kind is bytes:
                return "X'" + value.hex() + "'"
            if kind is int:
                return int.__repr__(value)
            if value is None:
                return "NULL"
            if kind is str:
                return quote(value)
            return fallback(value)

        return literal

    def render(self, dbapi_conn: Any, statement: str, params: Any) -> str:
        """``statement`` (``format`` paramstyle) with ``params`` interpolated, as the driver's
        ``execute`` would send it."""
        literal = self.literal(dbapi_conn)
        if isinstance(params, dict):
            return statement % {k: literal(v) for k, v in params.items()}
        return statement % tuple(map(literal, params))


class MySQLdbDriver(Driver):
    """mysqlclient (``MySQLdb``): libmariadb / libmysqlclient through a C extension.

    It reads the protocol and parses rows in C. It has no ``ssl_disabled`` argument: the flag
    becomes ``ssl_mode="DISABLED"``, which mysqlclient emulates on MariaDB's client library too.
    """

    name = "mysqldb"

    def connect_args(self, query: Any) -> dict[str, Any]:
        return {}

    def prepare_connect(self, cparams: dict[str, Any]) -> None:
        if "ssl_disabled" in cparams and _flag(cparams.pop("ssl_disabled")):
            cparams.setdefault("ssl_mode", "DISABLED")

    def quote(self, dbapi_conn: Any) -> Callable[[str], str]:
        string_literal = dbapi_conn.string_literal  # C: mysql_real_escape_string, quoted
        encoding = dbapi_conn.encoding

        def quote(value: str) -> str:
            return string_literal(value.encode(encoding)).decode(encoding)  # type: ignore[no-any-return]

        return quote

    def fallback(self, dbapi_conn: Any) -> Callable[[Any], str]:
        to_bytes = dbapi_conn.literal
        encoding = dbapi_conn.encoding

        def fallback(value: Any) -> str:
            if isinstance(value, bytes | bytearray):
                return "X'" + bytes(value).hex() + "'"
            return to_bytes(value).decode(encoding)  # type: ignore[no-any-return]

        return fallback


#: The drivers by SQLAlchemy driver name (``mysql+<name>://``).
DRIVERS: dict[str, Driver] = {d.name: d for d in (Driver(), MySQLdbDriver())}


def driver_of(url: str | URL) -> Driver:
    """The :class:`Driver` of a ``mysql+<driver>://`` URL (PyMySQL when none is named)."""
    name = make_url(url).get_driver_name()
    if name in ("", "mysql", "mariadb"):  # no "+driver": SQLAlchemy's default would be MySQLdb
        name = "pymysql"
    try:
        return DRIVERS[name]
    except KeyError:
        raise ValueError(
            f"unsupported MySQL driver {name!r}: use mysql+pymysql:// or mysql+mysqldb:// "
            "(mysqlclient)"
        ) from None


class MySQLDialect(SqlDialect):
    """MySQL 8.0+ and MariaDB 10.6+ through PyMySQL or mysqlclient."""

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
            **driver_of(url).connect_args(make_url(url).query),
        }
        return {
            "poolclass": ShrinkingQueuePool,
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
        driver = driver_of(engine.url)

        @event.listens_for(engine, "do_connect")
        def _multi_statements(dialect: Any, rec: Any, cargs: Any, cparams: dict[str, Any]) -> None:
            cparams["client_flag"] = int(cparams.get("client_flag", 0)) | CLIENT_MULTI_STATEMENTS
            driver.prepare_connect(cparams)

        @event.listens_for(engine, "do_executemany")
        def _pipeline(cursor: Any, statement: str, parameters: Any, context: Any) -> bool | None:
            if len(parameters) < 2:
                return None
            verb = statement.lstrip()[:6].upper()
            if verb == "INSERT":
                return insert_executemany(cursor, statement, parameters, driver) or None
            if verb not in ("UPDATE", "DELETE"):
                return None
            pipeline_executemany(cursor, statement, parameters, driver)
            return True

        @event.listens_for(engine, "do_execute_no_params")
        def _multi(cursor: Any, statement: str, context: Any) -> bool | None:
            results = context.execution_options.get(MULTI_RESULTS)
            if results is None:
                return None
            run_multi(cursor, statement, results)
            return True

        @event.listens_for(engine, "do_execute")
        def _interpolate(cursor: Any, statement: str, parameters: Any, context: Any) -> bool | None:
            # The driver would do the same interpolation through its generic per-type dispatch.
            if not parameters:
                return None
            cursor.execute(driver.render(cursor.connection, statement, parameters))
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

    def connection_limit_setting(self, exc: BaseException) -> str:
        code = error_code(exc)
        if code == 1203:
            return "the server's max_user_connections"
        if code == 1226:
            return "the account's MAX_USER_CONNECTIONS (ALTER USER ... WITH MAX_USER_CONNECTIONS)"
        return "the server's max_connections"

    def classify(self, exc: BaseException) -> ErrorKind:
        """Classify by error number; duplicates by the key named in the message."""
        code = error_code(exc)
        if code == ER_DUP_ENTRY:
            return _classify_duplicate(exc)
        if code in RETRYABLE_CODES:
            return ErrorKind.RETRYABLE
        if code in TRANSIENT_CODES:
            return ErrorKind.TRANSIENT
        if code in CONNECTION_LIMIT_CODES:
            return ErrorKind.CONNECTION_LIMIT
        if isinstance(exc, DBAPIError) and exc.connection_invalidated:
            return ErrorKind.TRANSIENT
        return ErrorKind.OTHER


def migration_lock_name(database: str | None) -> str:
    """The named lock of one database's migrations (at most 64 characters, as servers allow)."""
    return f"{MIGRATION_LOCK_NAME}.{database or ''}"[:64]


def run_multi(cursor: Any, query: str, results: list[tuple[int, Any]]) -> None:
    """Send a multi-statement ``query``; append ``(rowcount, rows or None)`` of each statement.

    The server stops at a failing statement; its error is raised by ``nextset()``, inside the
    engine's error handling (so it is classified and a lost connection invalidated as usual).
    """
    cursor.execute(query)
    while True:
        rows = cursor.fetchall() if cursor.description else None
        results.append((cursor.rowcount, rows))
        if not cursor.nextset():
            return


def insert_executemany(cursor: Any, statement: str, parameters: Any, driver: Driver) -> bool:
    """Run ``INSERT ... VALUES (%s, ...)`` for every parameter set as multi-row ``INSERT`` statements of
    up to :data:`PIPELINE_MAX_BYTES`, values rendered by ``driver`` (as the drivers' own
    ``executemany`` does, minus their per-value type dispatch). Returns False, having done
    nothing, for any other shape of statement (the driver then runs it)."""
    head, sep, row = statement.rpartition(" VALUES ")
    if not sep or row.count("(") != 1 or not (row.startswith("(") and row.endswith(")")):
        return False
    render = driver.render
    conn = cursor.connection
    head += sep
    total = 0
    batch: list[str] = []
    size = 0
    for params in parameters:
        values = render(conn, row, params)
        if batch and size + len(values) > PIPELINE_MAX_BYTES:
            cursor.execute(head + ",".join(batch))
            total += max(cursor.rowcount, 0)
            batch, size = [], 0
        batch.append(values)
        size += len(values) + 1
    cursor.execute(head + ",".join(batch))
    cursor.rowcount = total + max(cursor.rowcount, 0)
    return True


def pipeline_executemany(
    cursor: Any, statement: str, parameters: Any, driver: Driver | None = None
) -> int:
    """Run ``statement`` once per parameter set in as few multi-statement queries as fit.

    Sets and returns ``cursor.rowcount`` as the sum over all statements, like ``executemany``.
    An error stops the server at the failing statement and is raised from ``nextset()``.
    """
    render = (driver or DRIVERS["pymysql"]).render
    conn = cursor.connection
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
        sql = render(conn, statement, params)
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
    statement inserted into the idempotency-key table, and as a job id only when it inserted
    into the job table.
    """
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    message = str(getattr(orig, "args", ("", ""))[-1])
    match = _DUP_KEY.search(message)
    qualified = match.group(0) if match else ""
    key = match.group(1) if match else ""
    if key == BUSINESS_KEY_INDEX:
        return ErrorKind.DUPLICATE_BUSINESS_KEY
    if key == "PRIMARY":
        statement = getattr(exc, "statement", None) or ""
        bare = "." not in qualified.removeprefix("for key '")
        for table, kind in _PRIMARY_KEYS:
            if f"{table}.PRIMARY" in qualified or (
                bare and re.match(rf"\s*INSERT\s+INTO\s+`?{table}`?[\s(]", statement, re.I)
            ):
                return kind
    return ErrorKind.OTHER


#: The tables whose primary key is a uniqueness rule a submission can break, and what breaking it
#: means.
_PRIMARY_KEYS = (
    (IDEMPOTENCY_TABLE, ErrorKind.DUPLICATE_IDEMPOTENCY_KEY),
    (JOB_TABLE, ErrorKind.DUPLICATE_JOB_ID),
    (QUEUE_TABLE, ErrorKind.DUPLICATE_JOB_ID),
)
