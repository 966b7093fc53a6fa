"""Store capability: which encryption keys the stored job arguments need (key rotation).

Reads ``scheduler_job.encryption_key_id`` (indexed, migration 0010), written at insert from the
envelope of the arguments; no payload is read or decrypted.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import case, func, select
from sqlalchemy.engine import Connection

from ratchet.ports import KeyUsage
from ratchet.sql import schema

T = TypeVar("T")

J = schema.job
Q = schema.job_queue


class EncryptionKeyStoreMixin:
    """Adds :class:`~ratchet.ports.EncryptionKeyStore` to :class:`~ratchet.sql.store.SqlStore`."""

    if TYPE_CHECKING:

        def _run(self, work: Callable[[Connection], T], *, write: bool = True) -> T: ...

    def key_usage(self) -> list[KeyUsage]:
        live = func.sum(case((Q.c.job_id.is_not(None), 1), else_=0))
        stmt = (
            select(J.c.encryption_key_id, live.label("live"), func.count().label("total"))
            .select_from(J.outerjoin(Q, Q.c.job_id == J.c.job_id))
            .group_by(J.c.encryption_key_id)
        )

        def work(conn: Connection) -> list[KeyUsage]:
            rows = conn.execute(stmt).all()
            usage = [KeyUsage(r.encryption_key_id, int(r.live or 0), int(r.total)) for r in rows]
            return sorted(usage, key=lambda u: (u.key_id is not None, u.key_id or ""))

        return self._run(work, write=False)

    def jobs_on_key(self, key_id: str, limit: int) -> list[uuid.UUID]:
        stmt = (
            select(J.c.job_id)
            .select_from(J.outerjoin(Q, Q.c.job_id == J.c.job_id))
            .where(J.c.encryption_key_id == key_id)
            .order_by(Q.c.job_id.is_(None), J.c.job_id)
            .limit(limit)
        )

        def work(conn: Connection) -> list[uuid.UUID]:
            return list(conn.execute(stmt).scalars())

        return self._run(work, write=False)
