"""Store capability: ``cancel_job(id, interrupt=True)`` reaches the node running the job.

Design: the request cancels the job at once, exactly like ``cancel_job`` (the queue row goes,
the job is CANCELED, the attempt's late result is fenced out), and in the same transaction leaves
a row in ``scheduler_cancel_request`` naming the attempt ``(job_id, epoch)`` and its owner node.
The owner reads its rows on a periodic task (a cheap indexed read; the write that takes them
happens only when there are some) and sets the attempt's cancellation request. A job is never
kept alive by a pending request, and an owner that died cannot bring it back.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Connection, Row

from ratchet.domain.lifecycle import JobStatus, sources_of
from ratchet.domain.model import FlowWrite
from ratchet.domain.workflow import FlowEffect, FlowResolver
from ratchet.ports import CancelRequest
from ratchet.sql import schema
from ratchet.sql.watcher_store import OWNED
from ratchet.sql.workflow_store import REFUSE_ALL

if TYPE_CHECKING:
    from ratchet.sql.dialect import SqlDialect

T = TypeVar("T")

Q = schema.job_queue
CR = schema.cancel_request

#: Requests no owner took for this long (their node died) are swept by the next request.
STALE_AFTER = timedelta(days=1)
_CANCELLABLE = sources_of(JobStatus.CANCELED)


class CancellationStoreMixin:
    """Adds :class:`~ratchet.ports.CancellationStore` to :class:`~ratchet.sql.store.SqlStore`."""

    if TYPE_CHECKING:
        dialect: SqlDialect

        def _run(self, work: Callable[[Connection], T], *, write: bool = True) -> T: ...

        def _terminate(
            self,
            conn: Connection,
            ids: Sequence[uuid.UUID],
            status: JobStatus,
            now: datetime,
            *,
            effects: list[FlowEffect],
            resolve: FlowResolver,
            superseded_by: uuid.UUID | None = None,
            error: str | None = None,
        ) -> None: ...

    def request_cancellation(
        self, job_id: uuid.UUID, *, now: datetime, resolve: FlowResolver | None = None
    ) -> FlowWrite[bool]:
        """Cancel a live job; if it was running, leave a request for its owner to stop it."""

        def work(conn: Connection) -> FlowWrite[bool]:
            stmt = select(Q.c.status, Q.c.epoch, Q.c.picked_by).where(Q.c.job_id == job_id)
            row: Row[Any] | None = conn.execute(self.dialect.lock_rows(stmt)).first()
            if row is None or JobStatus(row.status) not in _CANCELLABLE:
                return FlowWrite(False)
            if row.status in OWNED and row.picked_by is not None:
                conn.execute(delete(CR).where(CR.c.requested_at < now - STALE_AFTER))
                conn.execute(
                    insert(CR).values(
                        job_id=job_id, epoch=row.epoch, node_id=row.picked_by, requested_at=now
                    )
                )
            effects: list[FlowEffect] = []
            self._terminate(
                conn,
                [job_id],
                JobStatus.CANCELED,
                now,
                effects=effects,
                resolve=resolve or REFUSE_ALL,
            )
            return FlowWrite(True, tuple(effects))

        return self._run(work)

    def cancellation_requests(self, node_id: str, *, now: datetime) -> list[CancelRequest]:
        """Take (return and delete) the requests addressed to ``node_id``, oldest first."""
        probe = select(CR.c.job_id).where(CR.c.node_id == node_id).limit(1)
        if self._run(lambda conn: conn.execute(probe).first(), write=False) is None:
            return []

        def work(conn: Connection) -> list[CancelRequest]:
            stmt = select(CR).where(CR.c.node_id == node_id).order_by(CR.c.requested_at)
            rows = conn.execute(self.dialect.lock_rows(stmt)).all()
            if rows:
                conn.execute(
                    delete(CR).where(
                        CR.c.node_id == node_id, CR.c.job_id.in_([r.job_id for r in rows])
                    )
                )
            return [CancelRequest(r.job_id, r.epoch, r.requested_at) for r in rows]

        return self._run(work)
