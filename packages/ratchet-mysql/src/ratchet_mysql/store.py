"""The MySQL / MariaDB store: the shared SQL store with MySQL's differences.

The claim's candidate query locks as it selects: per priority level, the oldest due PENDING
rows that nobody else holds, ``ORDER BY scheduled_time, job_id LIMIT n FOR UPDATE SKIP LOCKED``,
one parenthesised branch per level in one ``UNION ALL`` (an index range scan on
``idx_queue_claim`` each). A concurrent claimer therefore never sees a candidate it then fails
to lock, and looks past rows others hold instead of coming back short.

The claim, the insert and the outcome batch are the statement sets of :mod:`ratchet.sql.hotpaths`
written out as SQL text (ids as hex literals, other values through the driver's own escaping
functions) and sent as multi-statement queries (:class:`MySQLClaim`, :class:`MySQLInsert`,
:class:`MySQLOutcomes`): a claim is two round trips (candidates; then the update, the attempt rows
and the definitions), an outcome batch two (the fenced read; then every write). The generic
statement sets would take five and four, and run every value through SQLAlchemy's bind
processing and the driver's per-type dispatch. The shared store keeps the logic around them
(claim order and its checks, which outcomes are owned under their epoch, what each writes, the
fenced partition and the outcome hooks); ``ratchet.testing.dialect_contract`` checks each
against the generic statement set, row for row, through both drivers.
"""

from __future__ import annotations

import logging
import uuid
from collections import namedtuple
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Select, select, text, union_all
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ProgrammingError

from ratchet.domain.lifecycle import JobPriority, JobStatus
from ratchet.domain.model import OutcomeKind
from ratchet.ports import iter_chunks
from ratchet.sql import schema
from ratchet.sql.claimed import DEFINITIONS
from ratchet.sql.dialect import SqlDialect
from ratchet.sql.hotpaths import (
    AppliedOutcome,
    ClaimStatements,
    HotPaths,
    InsertStatements,
    OutcomeStatements,
    OwnedRow,
)
from ratchet.sql.prepared import PreparedInsert
from ratchet.sql.store import SqlStore
from ratchet.sql.types import from_micros, to_micros
from ratchet.sql.watcher_store import CHUNK, OWNED
from ratchet_mysql.dialect import (
    MULTI_RESULTS,
    PIPELINE_MAX_BYTES,
    Driver,
    MySQLDialect,
    driver_of,
    error_code,
)

log = logging.getLogger("ratchet.mysql")

Q = schema.job_queue
#: Parse error (1064), wrong usage of UNION and FOR UPDATE (1221), not supported (1235).
SYNTAX_ERRORS = frozenset({1064, 1221, 1235})

DRIVER = "pymysql"

_RUNNING, _PENDING = JobStatus.RUNNING.value, JobStatus.PENDING.value
#: The literals of the statuses and kinds an outcome writes: constants of the code, quoted
#: once (any other value is a KeyError, never text in a statement).
_STATUS_LITERALS = {s.value: f"'{s.value}'" for s in (JobStatus.SUCCEEDED, JobStatus.FAILED)}
_KIND_LITERALS = {k: f"'{k.value}'" for k in OutcomeKind}
_OWNED_IN = ", ".join(f"'{status}'" for status in OWNED)
_NO_PARAMETERS = {"no_parameters": True}

#: The claim's read of the claimed jobs' definitions: the shared store's ``DEFINITIONS`` (its
#: columns and expressions, converted by their types as SQLAlchemy would), rendered once per
#: store for its engine's dialect, followed by the ids.
_DEFINITION_COLUMNS = list(DEFINITIONS.selected_columns)
_Definition = namedtuple("_Definition", [c.key for c in _DEFINITION_COLUMNS])  # type: ignore[misc]


def _hex(job_id: uuid.UUID) -> str:
    """A job id as the literal of its ``BINARY(16)`` column."""
    return "X'" + job_id.hex + "'"


def _bytes(job_id: uuid.UUID) -> bytes:
    """A job id as its ``BINARY(16)`` column reads back."""
    return job_id.bytes


def normalize_url(url: str) -> str:
    """``mysql://`` and ``mariadb://`` (without a driver) mean PyMySQL."""
    parsed = make_url(url)
    backend, _, driver = parsed.drivername.partition("+")
    if backend in ("mysql", "mariadb") and not driver:
        parsed = parsed.set(drivername=f"{backend}+{DRIVER}")
    return parsed.render_as_string(hide_password=False)


def render_values(escape: Any, rows: Sequence[tuple[Any, ...]]) -> Iterator[str]:
    """Each row as a ``(v1,v2,...)`` SQL literal; other values than integers and NULL through
    the driver's ``escape`` (which follows the session's ``NO_BACKSLASH_ESCAPES``)."""
    for row in rows:
        parts = []
        for value in row:
            if value is None:
                parts.append("NULL")
            elif type(value) is int:
                parts.append(str(value))
            else:
                parts.append(escape(value))
        yield "(" + ",".join(parts) + ")"


def run_multi_query(conn: Connection, query: str) -> list[tuple[int, Any]]:
    """Run a multi-statement ``query``; ``(rowcount, rows or None)`` of each statement."""
    results: list[tuple[int, Any]] = []
    conn.exec_driver_sql(
        query, execution_options={**_NO_PARAMETERS, MULTI_RESULTS: results}
    ).close()
    return results


def in_batches(parts: Sequence[str], separator: int) -> Iterator[list[str]]:
    """``parts`` in consecutive groups of at most :data:`PIPELINE_MAX_BYTES` (joined by a
    separator of ``separator`` characters; a longer part goes alone)."""
    batch: list[str] = []
    size = 0
    for part in parts:
        if batch and size + len(part) > PIPELINE_MAX_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(part)
        size += len(part) + separator
    if batch:
        yield batch


class MySQLClaim(ClaimStatements):
    """The claim's candidates locked as they are read; then the mark and the definitions as one
    multi-statement query."""

    candidates_locked = True
    """True while the server accepts the per-level locking UNION (else: generic candidates,
    locked by a second query)."""

    def __init__(self, dialect: SqlDialect, engine: Any, driver: Driver) -> None:
        super().__init__(dialect)
        self.engine = engine
        self.driver = driver
        self._definition_processors: list[Any] | None = None
        self._definitions_head: str | None = None

    def candidates_select(self, now: Any, limit: Any, node_tags: Sequence[Any] = ()) -> Select[Any]:
        """Per priority level, the ``limit`` oldest due jobs nobody holds that a node with
        ``node_tags`` may run, locked as read."""
        if not self.candidates_locked:
            return super().candidates_select(now, limit, node_tags)
        branches = [
            self.level_candidates(level, now, limit, node_tags).with_for_update(skip_locked=True)
            for level in sorted(JobPriority, reverse=True)
        ]
        return union_all(*branches)  # type: ignore[return-value]

    def candidates(
        self, conn: Connection, now: datetime, limit: int, node_tags: frozenset[str] = frozenset()
    ) -> list[Any]:
        # The rows are locked by this transaction and were PENDING when read (a locking read
        # sees the latest committed version): the generic claim's second, locking query is not
        # needed.
        if not self.candidates_locked:
            return super().candidates(conn, now, limit, node_tags)
        try:
            return super().candidates(conn, now, limit, node_tags)
        except ProgrammingError as exc:
            if error_code(exc) not in SYNTAX_ERRORS:
                raise
            # A statement the server refuses to parse leaves the transaction usable.
            log.warning(
                "the server rejects locking clauses in UNION branches (%s); claiming with "
                "separate candidate and lock queries",
                exc.orig,
            )
            self.candidates_locked = False
            self._candidate_stmts.clear()  # rebuilt without the locking union
            return super().candidates(conn, now, limit, node_tags)

    def take(
        self, conn: Connection, node_id: str, chosen: Sequence[Any], now: datetime
    ) -> tuple[int, Mapping[uuid.UUID, Any]]:
        literal = self.driver.literal(conn.connection.driver_connection)
        node, at = literal(node_id), to_micros(now)
        ids = ",".join(_hex(r.job_id) for r in chosen)
        results = run_multi_query(
            conn,
            f"UPDATE {Q.name} SET status = '{_RUNNING}', picked_by = {node}, picked_at = {at},"
            f" epoch = epoch + 1, start_by = NULL WHERE job_id IN ({ids}) AND status = '{_PENDING}';\n"
            f"{self._definitions_sql()}({ids})",
        )
        return results[0][0], self._definitions(results[1][1])

    def _definitions_sql(self) -> str:
        """``SELECT <the columns of DEFINITIONS> FROM scheduler_job WHERE job_id IN `` (the id
        list follows)."""
        head = self._definitions_head
        if head is None:
            columns = select(*_DEFINITION_COLUMNS)  # DEFINITIONS without its WHERE
            compiled = columns.compile(
                dialect=self.engine.dialect, compile_kwargs={"literal_binds": True}
            )
            # No parameters follow: a driver would not turn an escaped "%%" back into "%".
            head = str(compiled).replace("%%", "%") + f" WHERE {schema.job.name}.job_id IN "
            self._definitions_head = head
        return head

    def _definitions(self, rows: Sequence[tuple[Any, ...]]) -> dict[uuid.UUID, Any]:
        """Raw rows of :meth:`_definitions_sql` by job id, converted by their column types."""
        processors = self._definition_processors
        if processors is None:
            dialect = self.engine.dialect
            processors = self._definition_processors = [
                c.type.result_processor(dialect, None) for c in _DEFINITION_COLUMNS
            ]
        out = {}
        for row in rows:
            d = _Definition(
                *(v if p is None else p(v) for p, v in zip(processors, row, strict=True))
            )
            out[d.job_id] = d
        return out


class MySQLInsert(InsertStatements):
    """Rows rendered as multi-row ``INSERT ... VALUES``."""

    def __init__(self, dialect: SqlDialect, driver: Driver) -> None:
        super().__init__(dialect)
        self.driver = driver

    def insert_rows(
        self, conn: Connection, statement: PreparedInsert, rows: Sequence[tuple[Any, ...]]
    ) -> None:
        """One multi-row ``INSERT ... VALUES`` per megabyte, rendered here.

        PyMySQL's ``executemany`` makes the same statement, but escapes every value through a
        generic per-type dispatch that costs more than the server's insert; integers and NULLs
        need no escaping, strings and bytes go through the driver's own ``escape``.
        """
        if not rows:
            return
        head = statement.sql.partition(" VALUES ")[0] + " VALUES "
        escape = self.driver.literal(conn.connection.driver_connection)
        for batch in in_batches(list(render_values(escape, rows)), 1):
            conn.exec_driver_sql(head + ",".join(batch), execution_options=_NO_PARAMETERS)


class MySQLOutcomes(OutcomeStatements):
    """The fenced read as SQL text; then every write (the generic statements, one per job and
    table) in as few multi-statement queries as fit in :data:`PIPELINE_MAX_BYTES`."""

    owned_key = staticmethod(_bytes)

    def __init__(self, dialect: SqlDialect, driver: Driver) -> None:
        super().__init__(dialect)
        self.driver = driver

    def owned(
        self, conn: Connection, node_id: str, ids: Sequence[uuid.UUID]
    ) -> Mapping[Any, OwnedRow]:
        node = self.driver.literal(conn.connection.driver_connection)(node_id)
        owned: dict[bytes, OwnedRow] = {}
        for chunk in iter_chunks(ids, CHUNK):
            rows = conn.exec_driver_sql(
                f"SELECT job_id, epoch, attempts, picked_at FROM {Q.name} WHERE job_id IN"
                f" ({','.join(map(_hex, chunk))}) AND picked_by = {node}"
                f" AND status IN ({_OWNED_IN}) FOR UPDATE",
                execution_options=_NO_PARAMETERS,
            )
            owned.update({job_id: (epoch, n, from_micros(at)) for job_id, epoch, n, at in rows})
        return owned

    def apply(self, conn: Connection, node_id: str, writes: Sequence[AppliedOutcome]) -> None:
        literal = self.driver.literal(conn.connection.driver_connection)
        node = literal(node_id)
        # One statement per job and table, in the generic order: deletes by primary key (with
        # an IN list MySQL/MariaDB may scan the table and wait on, then deadlock with, other
        # workers' rows), the returns to PENDING; then one insert of the jobs' ends and one of
        # the ended attempts' rows.
        deletes: list[str] = []
        ends: list[str] = []
        backs: list[str] = []
        attempts_ended: list[str] = []
        for w in writes:
            planned = w.planned
            o = planned.outcome
            job = _hex(o.job_id)
            error = literal(o.error)
            attempts = w.attempts + planned.attempts_added
            if planned.terminal_status is not None:
                deletes.append(f"DELETE FROM {Q.name} WHERE job_id = {job}")
                ends.append(
                    f"({job},{_STATUS_LITERALS[planned.terminal_status]},{error},"
                    f"{literal(o.result)},{to_micros(o.finished_at)},{attempts})"
                )
            else:
                backs.append(
                    f"UPDATE {Q.name} SET status = '{_PENDING}',"
                    f" scheduled_time = {to_micros(planned.pending_at)}, attempts = {attempts},"
                    f" last_error = COALESCE({error}, last_error),"
                    f" picked_by = NULL, picked_at = NULL, timed_out_at = NULL WHERE job_id = {job}"
                )
            attempts_ended.append(
                f"({job},{w.attempts + 1},{o.epoch},{node},{to_micros(w.started_at)},"
                f"{to_micros(o.finished_at)},{_KIND_LITERALS[o.kind]},{error},"
                f"{literal(o.traceback)})"
            )
        statements = deletes + backs
        for rows in in_batches(ends, 1):
            statements.append(
                f"INSERT INTO {schema.job_end.name} (job_id, terminal_status, terminal_error,"
                " result, terminated_at, attempts) VALUES " + ",".join(rows)
            )
        for rows in in_batches(attempts_ended, 1):
            statements.append(
                f"INSERT INTO {schema.job_execution.name} (job_id, attempt_no, epoch, node_id,"
                " started_at, finished_at, outcome, error, traceback) VALUES " + ",".join(rows)
            )
        for batch in in_batches(statements, 2):
            run_multi_query(conn, ";\n".join(batch))


class MySQLStore(SqlStore):
    """:class:`~ratchet.sql.store.SqlStore` on MySQL 8 / MariaDB."""

    def __init__(
        self, url: str, dialect: MySQLDialect | None = None, **engine_options: Any
    ) -> None:
        """``engine_options`` go to ``create_engine``; ``connect_args`` merge into the defaults."""
        url = normalize_url(url)
        dialect = dialect or MySQLDialect()
        if "connect_args" in engine_options:
            defaults = dialect.engine_kwargs(url)["connect_args"]
            engine_options["connect_args"] = {**defaults, **engine_options["connect_args"]}
        self.driver = driver_of(url)
        """The DBAPI driver the URL names (PyMySQL or mysqlclient)."""
        super().__init__(url, dialect, **engine_options)

    def make_hot_paths(self) -> HotPaths:
        return HotPaths(
            MySQLClaim(self.dialect, self.engine, self.driver),
            MySQLInsert(self.dialect, self.driver),
            MySQLOutcomes(self.dialect, self.driver),
        )

    def _multi(self, conn: Connection, query: str) -> list[tuple[int, Any]]:
        """Run a multi-statement ``query``; ``(rowcount, rows or None)`` of each statement."""
        return run_multi_query(conn, query)

    def database_time(self) -> datetime:
        """The server's UTC clock with microseconds (``CURRENT_TIMESTAMP`` has whole seconds)."""

        def work(conn: Connection) -> datetime:
            value = conn.execute(text("SELECT UTC_TIMESTAMP(6)")).scalar_one()
            return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]

        return self._run(work, write=False)
