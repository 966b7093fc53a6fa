"""The MySQL / MariaDB store: the shared SQL store with MySQL's differences.

The claim's candidate query locks as it selects: per priority level, the oldest due PENDING
rows that nobody else holds, ``ORDER BY scheduled_time, job_id LIMIT n FOR UPDATE SKIP LOCKED``,
one parenthesised branch per level in one ``UNION ALL`` (an index range scan on
``idx_queue_claim`` each). A concurrent claimer therefore never sees a candidate it then fails
to lock, and looks past rows others hold instead of coming back short.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Select, select, text, union_all
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ProgrammingError

from ratchet.domain.lifecycle import JobPriority, JobStatus
from ratchet.domain.model import ClaimedJob
from ratchet.sql import schema
from ratchet.sql.prepared import PreparedInsert
from ratchet.sql.store import SqlStore
from ratchet_mysql.dialect import PIPELINE_MAX_BYTES, MySQLDialect, driver_of, error_code

log = logging.getLogger("ratchet.mysql")

Q = schema.job_queue
#: Parse error (1064), wrong usage of UNION and FOR UPDATE (1221), not supported (1235).
SYNTAX_ERRORS = frozenset({1064, 1221, 1235})

DRIVER = "pymysql"


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
        super().__init__(url, dialect, **engine_options)

    def _claim(
        self, conn: Connection, node_id: str, limit: int, now: datetime, boost: timedelta
    ) -> list[ClaimedJob]:
        try:
            return super()._claim(conn, node_id, limit, now, boost)
        except ProgrammingError as exc:
            if not self._locking_union or error_code(exc) not in SYNTAX_ERRORS:
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
