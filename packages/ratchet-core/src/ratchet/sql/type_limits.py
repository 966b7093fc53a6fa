"""Per execution type limits for the SQL store (:class:`~ratchet.ports.TypeLimitStore`).

Cluster-wide and exact: an admission locks the type's limit row (``FOR UPDATE`` on PostgreSQL
and MySQL; SQLite's write lock serialises every writer), reads the starts of the last minute and
the attempts still executing, lets :func:`ratchet.domain.type_limits.decide` answer, and records
the admitted attempt, all in one transaction; admissions of one type therefore queue on one row.
An attempt counts as executing while its row is not released and its job is still RUNNING or
TIMED_OUT under that epoch, so the attempts of a dead node stop counting once they are taken over
or end, without a janitor. Rows older than the window that no longer count are deleted by the
admissions of their type.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import and_, delete, func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ratchet.domain.type_limits import RATE_WINDOW, TypeDecision, TypeLimit, decide
from ratchet.sql import schema
from ratchet.sql.watcher_store import OWNED

if TYPE_CHECKING:
    from ratchet.sql.dialect import SqlDialect

T = TypeVar("T")

LIMITS = schema.type_limit
STARTS = schema.type_start
Q = schema.job_queue
_MS = timedelta(milliseconds=1)


def _limit_of(row: Any) -> TypeLimit:
    return TypeLimit(row.target, row.rate_per_minute, row.max_concurrent, row.retry_delay_ms * _MS)


class TypeLimitStoreMixin:
    """Adds :class:`~ratchet.ports.TypeLimitStore` to :class:`~ratchet.sql.store.SqlStore`."""

    if TYPE_CHECKING:
        dialect: SqlDialect

        def _run(self, work: Callable[[Connection], T], *, write: bool = True) -> T: ...

    def set_type_limit(self, limit: TypeLimit, *, now: datetime) -> None:
        """Create or replace the limit of ``limit.target``."""
        values = {
            "rate_per_minute": limit.rate_per_minute,
            "max_concurrent": limit.max_concurrent,
            "retry_delay_ms": int(limit.retry_delay / _MS),
            "updated_at": now,
        }

        def work(conn: Connection) -> None:
            found = update(LIMITS).where(LIMITS.c.target == limit.target).values(**values)
            if not conn.execute(found).rowcount:
                conn.execute(insert(LIMITS).values(target=limit.target, **values))

        try:
            self._run(work)
        except IntegrityError:  # another node inserted it first: update theirs
            self._run(work)

    def get_type_limit(self, target: str) -> TypeLimit | None:
        row = self._run(
            lambda conn: conn.execute(select(LIMITS).where(LIMITS.c.target == target)).first(),
            write=False,
        )
        return None if row is None else _limit_of(row)

    def list_type_limits(self) -> list[TypeLimit]:
        def work(conn: Connection) -> list[TypeLimit]:
            return [_limit_of(r) for r in conn.execute(select(LIMITS).order_by(LIMITS.c.target))]

        return self._run(work, write=False)

    def delete_type_limit(self, target: str) -> bool:
        def work(conn: Connection) -> bool:
            return bool(conn.execute(delete(LIMITS).where(LIMITS.c.target == target)).rowcount)

        return self._run(work)

    def admit_type(
        self, target: str, job_id: uuid.UUID, epoch: int, node_id: str, *, now: datetime
    ) -> TypeDecision:
        """Admit the attempt ``(job_id, epoch)`` of ``target`` now, or say until when it waits.

        Idempotent for one attempt (a second call finds it admitted)."""

        def work(conn: Connection) -> TypeDecision:
            row = conn.execute(
                self.dialect.lock_rows(select(LIMITS).where(LIMITS.c.target == target))
            ).first()
            if row is None:
                return TypeDecision(True)
            mine = and_(STARTS.c.job_id == job_id, STARTS.c.epoch == epoch)
            if conn.execute(select(STARTS.c.job_id).where(mine)).first() is not None:
                return TypeDecision(True)
            cutoff = now - RATE_WINDOW
            recent = list(
                conn.execute(
                    select(STARTS.c.started_at).where(
                        STARTS.c.target == target, STARTS.c.started_at > cutoff
                    )
                ).scalars()
            )
            executing = conn.execute(
                select(func.count())
                .select_from(STARTS.join(Q, Q.c.job_id == STARTS.c.job_id))
                .where(
                    STARTS.c.target == target,
                    STARTS.c.released == 0,
                    Q.c.epoch == STARTS.c.epoch,
                    Q.c.status.in_(OWNED),
                )
            ).scalar_one()
            decision = decide(_limit_of(row), now, recent_starts=recent, executing=executing)
            if decision.admitted:
                conn.execute(
                    insert(STARTS).values(
                        job_id=job_id,
                        epoch=epoch,
                        target=target,
                        node_id=node_id,
                        started_at=now,
                        released=0,
                    )
                )
                self._forget_old_starts(conn, target, cutoff)
            return decision

        return self._run(work)

    @staticmethod
    def _forget_old_starts(conn: Connection, target: str, cutoff: datetime) -> None:
        """Delete the rows of ``target`` that count for nothing any more: older than the rate
        window, and released or no longer owned under their epoch (a plain read, then deletes
        by primary key: no locking scan of the queue)."""
        old = conn.execute(
            select(STARTS.c.job_id, STARTS.c.epoch, STARTS.c.released, Q.c.epoch.label("live"))
            .select_from(STARTS.outerjoin(Q, Q.c.job_id == STARTS.c.job_id))
            .where(STARTS.c.target == target, STARTS.c.started_at <= cutoff)
            .limit(100)
        ).all()
        for r in old:
            if r.released or r.live != r.epoch:
                conn.execute(
                    delete(STARTS).where(STARTS.c.job_id == r.job_id, STARTS.c.epoch == r.epoch)
                )

    def release_type(self, job_id: uuid.UUID, epoch: int) -> bool:
        """The attempt ``(job_id, epoch)`` ended: it no longer counts as executing."""

        def work(conn: Connection) -> bool:
            return bool(
                conn.execute(
                    update(STARTS)
                    .where(STARTS.c.job_id == job_id, STARTS.c.epoch == epoch)
                    .values(released=1)
                ).rowcount
            )

        return self._run(work)
