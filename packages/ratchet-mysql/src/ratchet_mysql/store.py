"""The MySQL / MariaDB store: the shared SQL store with MySQL's differences.

The claim's candidate query locks as it selects: per priority level, the oldest due PENDING
rows that nobody else holds, ``ORDER BY scheduled_time, job_id LIMIT n FOR UPDATE SKIP LOCKED``,
one parenthesised branch per level in one ``UNION ALL`` (an index range scan on
``idx_queue_claim`` each). A concurrent claimer therefore never sees a candidate it then fails
to lock, and looks past rows others hold instead of coming back short.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Select, select, text, union_all
from sqlalchemy.engine import Connection, make_url

from ratchet.domain.lifecycle import JobPriority, JobStatus
from ratchet.sql import schema
from ratchet.sql.store import SqlStore
from ratchet_mysql.dialect import MySQLDialect

Q = schema.job_queue

DRIVER = "pymysql"


def normalize_url(url: str) -> str:
    """``mysql://`` and ``mariadb://`` (without a driver) mean PyMySQL."""
    parsed = make_url(url)
    backend, _, driver = parsed.drivername.partition("+")
    if backend in ("mysql", "mariadb") and not driver:
        parsed = parsed.set(drivername=f"{backend}+{DRIVER}")
    return parsed.render_as_string(hide_password=False)


class MySQLStore(SqlStore):
    """:class:`~ratchet.sql.store.SqlStore` on MySQL 8 / MariaDB."""

    def __init__(
        self, url: str, dialect: MySQLDialect | None = None, **engine_options: Any
    ) -> None:
        super().__init__(normalize_url(url), dialect or MySQLDialect(), **engine_options)

    def database_time(self) -> datetime:
        """The server's UTC clock with microseconds (``CURRENT_TIMESTAMP`` has whole seconds)."""

        def work(conn: Connection) -> datetime:
            value = conn.execute(text("SELECT UTC_TIMESTAMP(6)")).scalar_one()
            return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]

        return self._run(work, write=False)

    def _candidates(self, now: datetime, limit: int) -> Select[Any]:
        """Per priority level, the ``limit`` oldest due jobs nobody holds, locked as read."""
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
