"""Resource limits and permits for the SQL store (:class:`~ratchet.ports.PermitStore`).

Exactness under concurrency: an acquirer locks the resource's limit row (``FOR UPDATE`` on
PostgreSQL and MySQL; SQLite's ``BEGIN IMMEDIATE`` write lock serialises every writer anyway),
then counts the held permits and inserts its own in the same transaction. Acquirers of one
resource therefore queue on one row, and the count they see includes every permit committed
before them. A resource without a limit row is unlimited: its permits are recorded (so that a
limit registered later counts them) but never refused.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.resources import (
    PermitDecision,
    PermitRecord,
    ResourceLimit,
    validate_resource_name,
)
from ratchet.sql import schema

if TYPE_CHECKING:
    from ratchet.sql.dialect import SqlDialect

T = TypeVar("T")

LIMIT = schema.resource_limit
PERMIT = schema.resource_permit
Q = schema.job_queue
NODE = schema.node


def _ms(value: timedelta) -> int:
    return int(value / timedelta(milliseconds=1))


def _to_limit(row: Any) -> ResourceLimit:
    return ResourceLimit(
        row.resource_name,
        row.max_concurrent,
        timedelta(milliseconds=row.retry_delay_ms),
        row.description,
    )


class PermitStoreMixin:
    """The :class:`~ratchet.ports.PermitStore` capability, mixed into ``SqlStore``."""

    if TYPE_CHECKING:
        dialect: SqlDialect

        def _run(self, work: Callable[[Connection], T], *, write: bool = True) -> T: ...

    # ------------------------------------------------------------------ limits
    def set_resource_limit(self, limit: ResourceLimit, *, now: datetime) -> None:
        values = {
            "max_concurrent": limit.max_concurrent,
            "retry_delay_ms": _ms(limit.retry_delay),
            "description": limit.description,
            "updated_at": now,
        }

        def work(conn: Connection) -> None:
            stmt = select(LIMIT.c.resource_name).where(LIMIT.c.resource_name == limit.name)
            if conn.execute(self.dialect.lock_rows(stmt)).first() is not None:
                conn.execute(
                    update(LIMIT).where(LIMIT.c.resource_name == limit.name).values(**values)
                )
            else:
                conn.execute(
                    insert(LIMIT).values(resource_name=limit.name, created_at=now, **values)
                )

        try:
            self._run(work)
        except IntegrityError:
            # Another node inserted the same limit between our check and our insert.
            self._run(work)

    def get_resource_limit(self, name: str) -> ResourceLimit | None:
        def work(conn: Connection) -> ResourceLimit | None:
            row = conn.execute(select(LIMIT).where(LIMIT.c.resource_name == name)).first()
            return None if row is None else _to_limit(row)

        return self._run(work, write=False)

    def list_resource_limits(self) -> list[ResourceLimit]:
        def work(conn: Connection) -> list[ResourceLimit]:
            rows = conn.execute(select(LIMIT).order_by(LIMIT.c.resource_name))
            return [_to_limit(r) for r in rows]

        return self._run(work, write=False)

    def delete_resource_limit(self, name: str) -> bool:
        def work(conn: Connection) -> bool:
            return bool(conn.execute(delete(LIMIT).where(LIMIT.c.resource_name == name)).rowcount)

        return self._run(work)

    # ------------------------------------------------------------------ permits
    def acquire_permit(
        self, resource: str, job_id: uuid.UUID, epoch: int, node_id: str, *, now: datetime
    ) -> PermitDecision:
        resource = validate_resource_name(resource)

        def work(conn: Connection) -> PermitDecision:
            owner = conn.execute(
                select(Q.c.epoch).where(
                    Q.c.job_id == job_id,
                    Q.c.picked_by == node_id,
                    Q.c.status == JobStatus.RUNNING.value,
                )
            ).first()
            if owner is None or owner.epoch != epoch:
                return PermitDecision(False, 0, None, owned=False)
            limit = conn.execute(
                self.dialect.lock_rows(
                    select(LIMIT.c.max_concurrent, LIMIT.c.retry_delay_ms).where(
                        LIMIT.c.resource_name == resource
                    )
                )
            ).first()
            in_use = conn.execute(
                select(func.count()).select_from(PERMIT).where(PERMIT.c.resource_name == resource)
            ).scalar_one()
            cap = None if limit is None else int(limit.max_concurrent)
            held = conn.execute(
                select(PERMIT.c.resource_name).where(
                    PERMIT.c.job_id == job_id, PERMIT.c.epoch == epoch
                )
            ).first()
            if held is not None:
                return PermitDecision(True, in_use, cap)
            if limit is not None and in_use >= limit.max_concurrent:
                return PermitDecision(
                    False, in_use, cap, timedelta(milliseconds=limit.retry_delay_ms)
                )
            conn.execute(
                insert(PERMIT).values(
                    job_id=job_id,
                    epoch=epoch,
                    resource_name=resource,
                    node_id=node_id,
                    acquired_at=now,
                )
            )
            return PermitDecision(True, in_use + 1, cap)

        return self._run(work)

    def release_permit(self, job_id: uuid.UUID, epoch: int) -> bool:
        def work(conn: Connection) -> bool:
            return bool(
                conn.execute(
                    delete(PERMIT).where(PERMIT.c.job_id == job_id, PERMIT.c.epoch == epoch)
                ).rowcount
            )

        return self._run(work)

    def list_permits(self, resource: str | None = None) -> list[PermitRecord]:
        def work(conn: Connection) -> list[PermitRecord]:
            stmt = select(PERMIT).order_by(PERMIT.c.acquired_at, PERMIT.c.job_id)
            if resource is not None:
                stmt = stmt.where(PERMIT.c.resource_name == resource)
            return [
                PermitRecord(r.resource_name, r.job_id, r.epoch, r.node_id, r.acquired_at)
                for r in conn.execute(stmt)
            ]

        return self._run(work, write=False)

    def _reclaim_dead_permits(self, conn: Connection, cutoff: datetime) -> int:
        """Delete permits of nodes without a heartbeat since ``cutoff`` (in the caller's
        transaction). The watcher reclaims permits itself: a node it declares dead loses them at
        once, a node without a live row once they are ``dead_after`` old
        (:mod:`ratchet.sql.watcher_store`)."""
        alive = select(NODE.c.node_id).where(NODE.c.heartbeat_at >= cutoff)
        return int(
            conn.execute(
                delete(PERMIT).where(PERMIT.c.acquired_at < cutoff, PERMIT.c.node_id.not_in(alive))
            ).rowcount
        )

    def reclaim_permits(self, *, now: datetime, grace: timedelta) -> int:
        return self._run(lambda conn: self._reclaim_dead_permits(conn, now - grace))

    def release_stale_permits(
        self, node_id: str, keep: Collection[tuple[uuid.UUID, int]], *, before: datetime
    ) -> int:
        kept = set(keep)

        def work(conn: Connection) -> int:
            rows = conn.execute(
                select(PERMIT.c.job_id, PERMIT.c.epoch).where(
                    PERMIT.c.node_id == node_id, PERMIT.c.acquired_at < before
                )
            ).all()
            stale = [(r.job_id, r.epoch) for r in rows if (r.job_id, r.epoch) not in kept]
            for job_id, epoch in stale:
                conn.execute(
                    delete(PERMIT).where(PERMIT.c.job_id == job_id, PERMIT.c.epoch == epoch)
                )
            return len(stale)

        return self._run(work)
