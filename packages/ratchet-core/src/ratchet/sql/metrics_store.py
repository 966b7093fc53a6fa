"""The :class:`~ratchet.ports.QueueGaugeStore` capability of the SQL store (metrics gauges)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from ratchet.domain.lifecycle import JobStatus
from ratchet.ports import QueueGauges
from ratchet.sql import schema

T = TypeVar("T")

Q = schema.job_queue


class QueueGaugeStoreMixin:
    """Adds :class:`~ratchet.ports.QueueGaugeStore` to :class:`~ratchet.sql.store.SqlStore`."""

    if TYPE_CHECKING:

        def _run(self, work: Callable[[Connection], T], *, write: bool = True) -> T: ...

    def queue_gauges(self, *, now: datetime) -> QueueGauges:
        # Two aggregate reads of the live table only (what the claim reads), on the read engine.
        def work(conn: Connection) -> QueueGauges:
            rows = conn.execute(
                select(Q.c.status, Q.c.priority, func.count()).group_by(Q.c.status, Q.c.priority)
            )
            depths = {(str(status), int(priority)): int(n) for status, priority, n in rows}
            oldest = conn.execute(
                select(func.min(Q.c.scheduled_time)).where(
                    Q.c.status == JobStatus.PENDING.value, Q.c.scheduled_time <= now
                )
            ).scalar_one_or_none()
            return QueueGauges(depths, oldest)

        return self._run(work, write=False)
