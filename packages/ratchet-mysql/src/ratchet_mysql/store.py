"""The MySQL / MariaDB store: the shared SQL store with MySQL's differences.

The claim's candidate query locks as it selects: per priority level, the oldest due PENDING
rows that nobody else holds, ``ORDER BY scheduled_time, job_id LIMIT n FOR UPDATE SKIP LOCKED``,
one parenthesised branch per level in one ``UNION ALL`` (an index range scan on
``idx_queue_claim`` each). A concurrent claimer therefore never sees a candidate it then fails
to lock, and looks past rows others hold instead of coming back short.

The claim and the outcome batch are the shared store's statements, written out as SQL text by
the store (ids as hex literals, strings through the driver's escaping) and sent as
multi-statement queries: a claim is two round trips (candidates; then the update, the attempt
rows and the definitions), an outcome batch two (the fenced read; then every write). The shared
store would take five and four, and run every value through SQLAlchemy's bind processing and the
driver's per-type dispatch. ``tests/adapters/mysql/test_store_mariadb.py`` checks both against
the shared store's versions, row for row.
"""

from __future__ import annotations

import logging
import uuid
from collections import namedtuple
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Select, select, text, union_all
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ProgrammingError

from ratchet.domain.lifecycle import JobPriority, JobStatus
from ratchet.domain.model import ClaimedJob, Outcome, OutcomeKind, OutcomeWrite
from ratchet.domain.priority import claim_order_key
from ratchet.domain.workflow import FlowResolver
from ratchet.ports import iter_chunks
from ratchet.sql import schema
from ratchet.sql.claimed import DEFINITIONS, claimed_job
from ratchet.sql.prepared import PreparedInsert
from ratchet.sql.store import CHUNK, SqlStore
from ratchet.sql.types import to_micros
from ratchet.sql.watcher import OWNED
from ratchet_mysql.dialect import (
    MULTI_RESULTS,
    PIPELINE_MAX_BYTES,
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
_TERMINAL = {
    OutcomeKind.SUCCEEDED: JobStatus.SUCCEEDED.value,
    OutcomeKind.DEAD: JobStatus.FAILED.value,
}
_BACK = (OutcomeKind.RETRY, OutcomeKind.RESCHEDULE)
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
        self._locking_union = True
        """Whether the server accepts the per-level locking UNION (else: the generic claim)."""
        self._definition_processors: list[Any] | None = None
        self._definitions_head: str | None = None
        super().__init__(url, dialect, **engine_options)

    # ------------------------------------------------------------------ claim
    def _claim(
        self, conn: Connection, node_id: str, limit: int, now: datetime, boost: timedelta
    ) -> list[ClaimedJob]:
        if not self._locking_union:
            return super()._claim(conn, node_id, limit, now, boost)
        try:
            rows = self._candidate_rows(conn, now, limit)
        except ProgrammingError as exc:
            if error_code(exc) not in SYNTAX_ERRORS:
                raise
            # A statement the server refuses to parse leaves the transaction usable.
            log.warning(
                "the server rejects locking clauses in UNION branches (%s); claiming with "
                "separate candidate and lock queries",
                exc.orig,
            )
            self._locking_union = False
            self._candidate_stmt = None  # rebuilt without the locking union
            return super()._claim(conn, node_id, limit, now, boost)
        if not rows:
            return []
        # The rows are locked by this transaction and were PENDING when read (a locking read
        # sees the latest committed version): the shared store's re-check is not needed.
        rows.sort(
            key=lambda r: claim_order_key(r.priority, r.scheduled_time, str(r.job_id), now, boost)
        )
        chosen = rows[:limit]
        literal = self.driver.literal(conn.connection.driver_connection)
        node, at = literal(node_id), to_micros(now)
        ids = ",".join(_hex(r.job_id) for r in chosen)
        attempts = ",".join(
            f"({_hex(r.job_id)},{r.attempts + 1},{r.epoch + 1},{node},{at},'{_RUNNING}')"
            for r in chosen
        )
        results = self._multi(
            conn,
            f"UPDATE {Q.name} SET status = '{_RUNNING}', picked_by = {node}, picked_at = {at},"
            f" epoch = epoch + 1 WHERE job_id IN ({ids}) AND status = '{_PENDING}';\n"
            f"INSERT INTO {schema.job_execution.name}"
            " (job_id, attempt_no, epoch, node_id, started_at, outcome)"
            f" VALUES {attempts};\n{self._definitions_sql()}({ids})",
        )
        if results[0][0] != len(chosen):
            raise AssertionError("claimed rows changed under the claim lock")
        definitions = self._definitions(results[2][1])
        return [claimed_job(r, definitions[r.job_id], now, epoch=r.epoch + 1) for r in chosen]

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

    def _multi(self, conn: Connection, query: str) -> list[tuple[int, Any]]:
        """Run a multi-statement ``query``; ``(rowcount, rows or None)`` of each statement."""
        results: list[tuple[int, Any]] = []
        conn.exec_driver_sql(
            query, execution_options={**_NO_PARAMETERS, MULTI_RESULTS: results}
        ).close()
        return results

    # ------------------------------------------------------------------ outcomes
    def _record(
        self,
        conn: Connection,
        node_id: str,
        outcomes: Sequence[Outcome],
        now: datetime,
        resolve: FlowResolver,
    ) -> OutcomeWrite:
        """The shared store's fenced write: a locking read of the rows this node still owns,
        then every write (the same statements, one per job and table) in as few multi-statement
        queries as fit in :data:`PIPELINE_MAX_BYTES`."""
        literal = self.driver.literal(conn.connection.driver_connection)
        node = literal(node_id)
        owned: dict[bytes, tuple[int, int]] = {}
        for chunk in iter_chunks(outcomes, CHUNK):
            ids = ",".join(_hex(o.job_id) for o in chunk)
            rows = conn.exec_driver_sql(
                f"SELECT job_id, epoch, attempts FROM {Q.name} WHERE job_id IN ({ids})"
                f" AND picked_by = {node} AND status IN ({_OWNED_IN}) FOR UPDATE",
                execution_options=_NO_PARAMETERS,
            )
            owned.update({job_id: (epoch, attempts) for job_id, epoch, attempts in rows})
        fenced: list[uuid.UUID] = []
        accepted: list[tuple[Outcome, int]] = []
        for o in outcomes:
            row = owned.get(o.job_id.bytes)
            if row is None or row[0] != o.epoch:
                fenced.append(o.job_id)
            else:
                accepted.append((o, row[1]))
        if not accepted:
            return OutcomeWrite(tuple(fenced))
        terminal = [(o, a) for o, a in accepted if o.kind in _TERMINAL]
        back = [(o, a) for o, a in accepted if o.kind in _BACK]
        # One statement per job (deletes by primary key: with an IN list MySQL/MariaDB may scan
        # the table and wait on, then deadlock with, other workers' rows).
        statements = [f"DELETE FROM {Q.name} WHERE job_id = {_hex(o.job_id)}" for o, _ in terminal]
        statements += [
            f"UPDATE {schema.job.name} SET terminal_status = '{_TERMINAL[o.kind]}',"
            f" terminal_error = {literal(o.error)}, result = {literal(o.result)},"
            f" terminated_at = {to_micros(o.finished_at)},"
            f" attempts = {a + (0 if o.kind is OutcomeKind.SUCCEEDED else 1)}"
            f" WHERE job_id = {_hex(o.job_id)}"
            for o, a in terminal
        ]
        statements += [
            f"UPDATE {Q.name} SET status = '{_PENDING}',"
            f" scheduled_time = {to_micros(o.retry_at or now)},"
            f" attempts = {a + (1 if o.kind is OutcomeKind.RETRY else 0)},"
            f" last_error = COALESCE({literal(o.error)}, last_error),"
            " picked_by = NULL, picked_at = NULL, timed_out_at = NULL"
            f" WHERE job_id = {_hex(o.job_id)}"
            for o, a in back
        ]
        statements += [
            f"UPDATE {schema.job_execution.name} SET finished_at = {to_micros(o.finished_at)},"
            f" outcome = '{o.kind.value}', error = {literal(o.error)}"
            f" WHERE job_id = {_hex(o.job_id)} AND attempt_no = {a + 1} AND epoch = {o.epoch}"
            for o, a in accepted
        ]
        batch: list[str] = []
        size = 0
        for sql in statements:
            if batch and size + len(sql) > PIPELINE_MAX_BYTES:
                self._multi(conn, ";\n".join(batch))
                batch, size = [], 0
            batch.append(sql)
            size += len(sql) + 2
        self._multi(conn, ";\n".join(batch))
        return self._written(conn, fenced, [o for o, _ in accepted], now, resolve)

    def _insert_rows(
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
        batch: list[str] = []
        size = 0
        for values in render_values(escape, rows):
            if batch and size + len(values) > PIPELINE_MAX_BYTES:
                self._send_values(conn, head, batch)
                batch, size = [], 0
            batch.append(values)
            size += len(values) + 1
        self._send_values(conn, head, batch)

    @staticmethod
    def _send_values(conn: Connection, head: str, batch: list[str]) -> None:
        conn.exec_driver_sql(head + ",".join(batch), execution_options={"no_parameters": True})

    def database_time(self) -> datetime:
        """The server's UTC clock with microseconds (``CURRENT_TIMESTAMP`` has whole seconds)."""

        def work(conn: Connection) -> datetime:
            value = conn.execute(text("SELECT UTC_TIMESTAMP(6)")).scalar_one()
            return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]

        return self._run(work, write=False)

    def _candidates(self, now: datetime, limit: int) -> Select[Any]:
        """Per priority level, the ``limit`` oldest due jobs nobody holds, locked as read."""
        if not self._locking_union:
            return super()._candidates(now, limit)
        branches = [
            select(Q.c.job_id, Q.c.priority, Q.c.scheduled_time, Q.c.epoch, Q.c.attempts)
            .where(
                Q.c.status == JobStatus.PENDING.value,
                Q.c.priority == int(level),
                Q.c.scheduled_time <= now,
            )
            .order_by(Q.c.scheduled_time, Q.c.job_id)
            .limit(limit)
            .with_for_update(skip_locked=True)
            for level in sorted(JobPriority, reverse=True)
        ]
        return union_all(*branches)  # type: ignore[return-value]
