"""One driver statement run through libpq as a statement prepared by name on each connection.

psycopg's ``cursor.execute`` parses the query for its ``%(name)s`` parameters, adapts each
value, counts executions before it prepares, and drives the round trip through a generator: for
a submission of one job that costs more client CPU than the round trip itself. A
:class:`NamedStatement` does that work once (the ``$n`` text, the parameter order, a name) and
then sends each execution as libpq's ``PQexecPrepared`` with text values, which releases the GIL
while it waits for the server.

Where no statement may be prepared by name (psycopg's ``prepare_threshold`` is None, as the
store sets it behind PgBouncer in transaction pooling mode) it runs through a cursor instead.

A statement whose best plan depends on how many rows its tables hold is made with
``planned_per_call``. The server may give a statement prepared by name a *generic* plan after
five calls, built from the table sizes of that moment and kept until the table's statistics
change: a claim whose generic plan was built on an empty queue read it by sequential scans once
it held 50,000 jobs (``docs/postgres.md``). Such a statement is still prepared by name (parsed
and analysed once per connection), but each call runs in one pipeline behind a statement that
sets ``plan_cache_mode`` to ``force_custom_plan`` for that call's transaction only: the server
plans it at every call, for its parameters and the tables as they are then.

A statement ``serialized_by`` an advisory lock key takes that lock in the same leading statement
(the claim: see ``PostgresClaim.serialized``). The lock is held until the pipeline's implicit
transaction commits, and the statement itself starts only once it holds the lock, with a
snapshot taken then: it sees what the lock's previous holder committed.
"""

from __future__ import annotations

import hashlib
import re
import select
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import Transformer

#: ``%(name)s`` parameters and ``%%`` escapes of psycopg's named parameter style.
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%")

#: SQLSTATE of a prepared statement the server does not know (gone with a ``DISCARD ALL``).
_UNKNOWN_STATEMENT = b"26000"
#: SQLSTATE of a name already prepared in the session.
_ALREADY_PREPARED = b"42P05"

#: Run before a ``planned_per_call`` statement, in its transaction: plan it for this call.
_CUSTOM_PLAN = "set_config('plan_cache_mode', 'force_custom_plan', true)"


def _prelude(planned_per_call: bool, serialized_by: int | None) -> tuple[bytes, bytes] | None:
    """The name and text of the statement run before one ``planned_per_call`` or
    ``serialized_by`` a lock, in its transaction (None when it needs none)."""
    calls = [_CUSTOM_PLAN] if planned_per_call else []
    if serialized_by is not None:
        calls.append(f"pg_advisory_xact_lock({int(serialized_by)})")
    if not calls:
        return None
    sql = f"SELECT {', '.join(calls)}".encode()
    return b"ratchet_prelude_" + hashlib.blake2b(sql, digest_size=6).hexdigest().encode(), sql


class NamedStatement:
    """``statement`` (driver SQL, ``%(name)s`` parameters) prepared once per connection under a
    name derived from its text, then executed by that name (``planned_per_call``: planned for
    each call's parameters and tables, never given a generic plan): :meth:`execute` for a
    statement that returns no rows, :meth:`fetch` for one that does."""

    def __init__(
        self, statement: str, *, planned_per_call: bool = False, serialized_by: int | None = None
    ) -> None:
        order: list[str] = []

        def positional(match: re.Match[str]) -> str:
            name = match.group(1)
            if name is None:
                return "%"
            if name not in order:
                order.append(name)
            return f"${order.index(name) + 1}"

        self.statement = statement.encode()
        self.sql = _PLACEHOLDER.sub(positional, statement).encode()
        self.parameters = tuple(order)
        self.name = b"ratchet_" + hashlib.blake2b(self.sql, digest_size=8).hexdigest().encode()
        if planned_per_call and not order:
            raise ValueError(
                "a statement planned at every call needs parameters: the server reuses one"
                " plan for a prepared statement without any"
            )
        self.planned_per_call = planned_per_call
        """Planned at every call for the tables as they are then (see the module's notes)."""
        self.serialized_by = serialized_by
        """The key of the transaction-level advisory lock each call takes before the statement
        runs (None: none). The statement then starts after the lock's previous holder has
        committed, and its snapshot sees what that holder wrote."""
        self._prelude = _prelude(planned_per_call, serialized_by)
        self._prepared_on: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()
        self.columns: tuple[str, ...] | None = None
        """The names of the columns :meth:`fetch` returns (known after its first call)."""

    def execute(self, driver: psycopg.Connection[Any], params: Mapping[str, Any]) -> int:
        """Run the statement with ``params`` on ``driver``; the number of rows it affected. On
        an idle connection the statement commits on its own, whatever the connection's
        autocommit flag; inside a transaction it is part of it.

        :raises psycopg.Error: as ``cursor.execute`` raises it.
        """
        if not _by_name(driver):
            return int(self._through_cursor(driver, params))
        result = self._run(driver, params, pq.ExecStatus.COMMAND_OK)
        return int(result.command_tuples or 0)

    def fetch(self, driver: psycopg.Connection[Any], params: Mapping[str, Any]) -> list[Any]:
        """Run the statement with ``params`` on ``driver`` and return its rows as tuples, the
        values loaded as a cursor loads them (psycopg's loaders), without the cursor's query
        parsing, adaptation and generator-driven round trip: one round trip, which waits for
        the server with the GIL released. Commits on its own on an idle connection, as
        :meth:`execute`.

        :raises psycopg.Error: as ``cursor.execute`` raises it.
        """
        if not _by_name(driver):
            return list(self._through_cursor(driver, params, fetch=True))
        return self.rows(driver, self._run(driver, params, pq.ExecStatus.TUPLES_OK))

    def rows(self, driver: psycopg.Connection[Any], result: pq.abc.PGresult) -> list[Any]:
        """The rows of ``result`` (this statement's, run on ``driver``) as tuples loaded by
        psycopg's loaders; notes the statement's :attr:`columns` the first time."""
        if self.columns is None:
            self.columns = tuple((result.fname(i) or b"").decode() for i in range(result.nfields))
        loader = Transformer(driver)
        loader.set_pgresult(result)
        return loader.load_rows(0, result.ntuples, tuple)

    def values(self, params: Mapping[str, Any]) -> list[bytes | None]:
        """``params`` as the statement's ``$n`` values, in order, in PostgreSQL's text format.

        :raises TypeError: for a value with no text form here (see :func:`_text`).
        """
        return [_text(params[name]) for name in self.parameters]

    def _run(
        self, driver: psycopg.Connection[Any], params: Mapping[str, Any], ok: pq.ExecStatus
    ) -> pq.abc.PGresult:
        """The result of executing the statement by name (prepared first where needed)."""
        values = self.values(params)
        for _ in range(2):
            if driver not in self._prepared_on:
                self._prepare(driver)
            if self._prelude is not None:
                found = _after_prelude(driver.pgconn, self._prelude[0], self.name, values)
                if found is None:
                    raise psycopg.OperationalError("the connection to the server was lost")
                result = found
            else:
                result = driver.pgconn.exec_prepared(self.name, values)
            if result.status == ok:
                return result
            if result.error_field(pq.DiagnosticField.SQLSTATE) != _UNKNOWN_STATEMENT:
                break
            self._prepared_on.discard(driver)  # the server forgot it: prepare it again
        raise self._error(driver, result)

    def _through_cursor(
        self, driver: psycopg.Connection[Any], params: Mapping[str, Any], *, fetch: bool = False
    ) -> Any:
        """The statement through a cursor, committed on its own on an idle connection: its
        rows (``fetch``) or the number of rows it affected."""
        idle = driver.pgconn.transaction_status == pq.TransactionStatus.IDLE
        if idle and not driver.autocommit:  # else psycopg would open a transaction
            driver.autocommit = True
            try:
                return self._through_cursor(driver, params, fetch=fetch)
            finally:
                driver.autocommit = False
        with driver.cursor() as cursor:
            with _serialized(driver, self.serialized_by):  # its results are in once it ends
                prepare = False if self.planned_per_call else None
                cursor.execute(self.statement, params, prepare=prepare)
            if not fetch:
                return int(cursor.rowcount)
            if self.columns is None and cursor.description is not None:
                self.columns = tuple(column.name for column in cursor.description)
            return cursor.fetchall()

    def _prepare(self, driver: psycopg.Connection[Any]) -> None:
        """Prepare the statement on ``driver``'s session (with the plan-mode statement run
        before it when it is ``planned_per_call``). One the session has already (a server
        connection handed on by PgBouncer in session pooling without a reset) is the same
        statement: its name comes from its text."""
        wanted = [(self.name, self.sql)]
        if self._prelude is not None:
            wanted.append(self._prelude)
        for name, sql in wanted:
            result = driver.pgconn.prepare(name, sql)
            if result.status != pq.ExecStatus.COMMAND_OK and (
                result.error_field(pq.DiagnosticField.SQLSTATE) != _ALREADY_PREPARED
            ):
                raise self._error(driver, result)
        self._prepared_on.add(driver)

    @staticmethod
    def _error(driver: psycopg.Connection[Any], result: pq.abc.PGresult) -> psycopg.Error:
        """The psycopg exception of a failed ``result``; an OperationalError when the
        connection itself failed (no SQLSTATE)."""
        error = psycopg.errors.error_from_result(result, encoding=driver.info.encoding)
        if not error.sqlstate and driver.closed:
            return psycopg.OperationalError(str(error) or "the connection to the server was lost")
        return error


@contextmanager
def _serialized(driver: psycopg.Connection[Any], lock_key: int | None) -> Iterator[None]:
    """Around a statement run through a cursor: nothing, or (``lock_key``) a pipeline that
    first takes that advisory lock. On an idle autocommit connection the two run as one
    implicit transaction, sent together: the lock is released when it commits, and no pause of
    this process between the two can hold it longer."""
    if lock_key is None:
        yield
        return
    with driver.pipeline():
        driver.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key,), prepare=False)
        yield


def _after_prelude(
    pgconn: pq.abc.PGconn, prelude: bytes, name: bytes, values: list[bytes | None]
) -> pq.abc.PGresult | None:
    """The result of the prepared statement ``name`` run with ``values`` after the prepared
    statement ``prelude`` (the plan mode, an advisory lock): one pipeline (one round trip, one
    implicit transaction, each statement with a snapshot of its own). The first failed result
    stands for the whole (the prelude's own failure included); None when the connection was
    lost before any result. Waits release the GIL (``select``)."""
    results: list[pq.abc.PGresult] = []
    pgconn.enter_pipeline_mode()
    try:
        pgconn.send_query_prepared(prelude, [])
        pgconn.send_query_prepared(name, values)
        pgconn.pipeline_sync()
        while pgconn.flush():
            select.select([], [pgconn.socket], [])
        while pgconn.status == pq.ConnStatus.OK:
            while pgconn.is_busy():
                select.select([pgconn.socket], [], [])
                pgconn.consume_input()
            result = pgconn.get_result()
            if result is None:  # the end of one statement's results
                continue
            if result.status == pq.ExecStatus.PIPELINE_SYNC:
                break
            results.append(result)
    finally:
        _leave_pipeline(pgconn)
    for result in results:
        if result.status == pq.ExecStatus.FATAL_ERROR:
            return result
    return results[-1] if results else None


def _leave_pipeline(pgconn: pq.abc.PGconn) -> None:
    """Take ``pgconn`` out of pipeline mode; close it if that cannot be done (a pipeline left
    half read would be misread by the next user of the connection)."""
    if pgconn.status != pq.ConnStatus.OK or pgconn.pipeline_status == pq.PipelineStatus.OFF:
        return
    try:
        pgconn.exit_pipeline_mode()
    except psycopg.Error:
        pgconn.finish()


def _by_name(driver: psycopg.Connection[Any]) -> bool:
    """Whether a statement may run by name on ``driver`` now: prepared statements are on (not
    behind PgBouncer in transaction pooling) and no transaction is open (a statement run by
    name commits on its own)."""
    return driver.prepare_threshold is not None and (
        driver.pgconn.transaction_status == pq.TransactionStatus.IDLE
    )


def _text(value: Any) -> bytes | None:
    """``value`` in PostgreSQL's text format (the statement casts each parameter)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes):
        return value
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        return _text_array(value)
    raise TypeError(f"no text form for a {type(value).__name__} parameter")


def _text_array(items: list[str] | tuple[str, ...]) -> bytes:
    """``items`` as a ``text[]`` literal: each element quoted, its quotes and backslashes
    escaped."""
    quoted = ('"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"' for item in items)
    return ("{" + ",".join(quoted) + "}").encode()
