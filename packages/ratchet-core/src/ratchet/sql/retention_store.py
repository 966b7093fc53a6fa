"""Retention, the archive, tombstones, the dead-letter queue and job logs for the SQL store
(:class:`~ratchet.ports.RetentionStore`, :class:`~ratchet.ports.JobLogStore`).

Each removal is one short transaction: it picks at most ``limit`` ended jobs through
``idx_job_end_time`` (their ends' status and time) with a skip-locked select (rows another
transaction holds are left for the next batch, so a removal never waits and never makes anybody
wait on a live job's rows), copies them to the archive when asked, then deletes them with
everything that belongs to them, their ends last. The lease (``try_lock``) comes from
:class:`~ratchet.sql.recurring_store.RecurringStoreMixin`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import and_, delete, exists, func, insert, or_, select, tuple_
from sqlalchemy.engine import Connection, Row

from ratchet.domain.joblog import JobLogLine, LogLevel
from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.model import JobRecord, is_own_id_key
from ratchet.domain.retention import DeadLetterFilter, PageCursor, check_replay_limit
from ratchet.domain.text import storable_text
from ratchet.domain.workflow import JobType
from ratchet.ports import iter_chunks
from ratchet.sql import schema

if TYPE_CHECKING:
    from sqlalchemy import Select

    from ratchet.sql.dialect import SqlDialect

T = TypeVar("T")

J = schema.job
END = schema.job_end
ENDED = schema.ended_job
Q = schema.job_queue
TAGS = schema.job_tag
AFFINITY = schema.job_affinity
EXE = schema.job_execution
IDEM = schema.idempotency_key
LOG = schema.job_log
ARCHIVE = schema.job_archive
WF = schema.workflow_condition
BATCH = schema.batch
PERMIT = schema.resource_permit
CANCEL = schema.cancel_request

_CHILD = J.alias("retention_child")
_BRANCH_CHILD = J.alias("retention_branch_child")
FAILED = JobStatus.FAILED.value

#: Rows per statement when writing job log lines (keeps every tuple IN list small).
ID_CHUNK = 500


def _no_living_lineage() -> Any:
    """True for a job no other stored job refers to: no dependant (chains, workflow steps),
    no stored branch child, and (for a batch parent) no child left."""
    no_dependants = ~exists(select(_CHILD.c.job_id).where(_CHILD.c.depends_on == J.c.job_id))
    no_branches = ~exists(
        select(WF.c.child_job_id)
        .select_from(WF.join(_BRANCH_CHILD, _BRANCH_CHILD.c.job_id == WF.c.child_job_id))
        .where(WF.c.parent_job_id == J.c.job_id)
    )
    no_children = or_(
        J.c.job_type.is_(None),
        J.c.job_type != JobType.BATCH_PARENT.value,
        ~exists(
            select(_CHILD.c.job_id).where(
                _CHILD.c.batch_id == J.c.job_id, _CHILD.c.job_id != J.c.job_id
            )
        ),
    )
    return and_(no_dependants, no_branches, no_children)


def _dead_letter_conditions(flt: DeadLetterFilter) -> list[Any]:
    conds: list[Any] = [END.c.terminal_status == FAILED]
    if flt.target is not None:
        conds.append(J.c.target == flt.target)
    if flt.tag is not None:
        conds.append(J.c.job_id.in_(select(TAGS.c.job_id).where(TAGS.c.tag == flt.tag.lower())))
    if flt.failed_before is not None:
        conds.append(END.c.terminated_at < flt.failed_before)
    if flt.failed_after is not None:
        conds.append(END.c.terminated_at >= flt.failed_after)
    if flt.error_contains is not None:
        conds.append(END.c.terminal_error.contains(flt.error_contains, autoescape=True))
    return conds


def _line(r: Row[Any]) -> JobLogLine:
    return JobLogLine(
        job_id=r.job_id,
        epoch=r.epoch,
        seq=r.seq,
        attempt=r.attempt_no,
        logged_at=r.logged_at,
        level=LogLevel(r.level),
        message=r.message,
    )


class RetentionStoreMixin:
    """Retention, archive, tombstones, dead letters and job logs of :class:`SqlStore`."""

    if TYPE_CHECKING:
        dialect: SqlDialect

        def _run(
            self, work: Callable[[Connection], T], *, write: bool = True, autocommit: bool = False
        ) -> T: ...

        def _record_cols(self) -> list[Any]: ...

        def _to_record(self, r: Row[Any], last_epoch: int | None = None) -> JobRecord: ...

        def _requeue_failed(
            self, conn: Connection, ids: Sequence[uuid.UUID], now: datetime
        ) -> int: ...

        def _raise_business_key_conflict(self, exc: Any) -> None: ...

    # ------------------------------------------------------------------ removal
    def _removable(self, conditions: Sequence[Any], limit: int) -> Select[Any]:
        stmt = (
            select(J.c.job_id, J.c.job_type, J.c.has_dependents)
            .select_from(ENDED)
            .where(*conditions, _no_living_lineage())
            .order_by(END.c.terminated_at, END.c.job_id)
            .limit(limit)
        )
        return self.dialect.lock_for_claim(stmt)

    def _remove(
        self,
        conn: Connection,
        rows: Sequence[Row[Any]],
        status: str,
        *,
        archive: bool,
        now: datetime,
        node_id: str,
    ) -> int:
        """Delete the jobs of ``rows`` (picked by :meth:`_removable`) and all that is theirs."""
        among = self.dialect.in_values
        removed = 0
        for chunk in iter_chunks(list(rows), self.dialect.id_list_chunk):
            ids = [r.job_id for r in chunk]
            if archive:
                self._archive(conn, ids, now, node_id)
            for table in (TAGS, AFFINITY, EXE, LOG, CANCEL, PERMIT):
                conn.execute(delete(table).where(among(table.c.job_id, ids)))
            # Only flow jobs own branch conditions and batch rows.
            parents = [r.job_id for r in chunk if r.has_dependents]
            if parents:
                conn.execute(delete(WF).where(among(WF.c.parent_job_id, parents)))
            batches = [r.job_id for r in chunk if r.job_type == JobType.BATCH_PARENT.value]
            if batches:
                conn.execute(delete(BATCH).where(among(BATCH.c.batch_id, batches)))
            ended = select(END.c.job_id).where(
                END.c.job_id == J.c.job_id, END.c.terminal_status == status
            )
            removed += conn.execute(
                delete(J).where(among(J.c.job_id, ids), ended.exists())
            ).rowcount
            conn.execute(
                delete(END).where(among(END.c.job_id, ids), END.c.terminal_status == status)
            )
        return removed

    def _archive(
        self, conn: Connection, ids: Sequence[uuid.UUID], now: datetime, node_id: str
    ) -> None:
        among = self.dialect.in_values
        history: dict[uuid.UUID, list[dict[str, Any]]] = {job_id: [] for job_id in ids}
        for a in conn.execute(
            select(EXE).where(among(EXE.c.job_id, ids)).order_by(EXE.c.started_at, EXE.c.epoch)
        ):
            history[a.job_id].append(
                {
                    "attempt": a.attempt_no,
                    "epoch": a.epoch,
                    "node": a.node_id,
                    "started_at": a.started_at.isoformat(),
                    "finished_at": a.finished_at.isoformat() if a.finished_at else None,
                    "outcome": a.outcome,
                    "error": a.error,
                }
            )
        rows = [
            {
                "job_id": r.job_id,
                "final_status": r.terminal_status,
                "target": r.target,
                "payload": r.payload,
                "result": r.result,
                "final_error": r.terminal_error,
                "priority": r.priority,
                "attempts": r.attempts,
                "max_retries": r.max_retries,
                "tags": r.tags,
                "params": r.params,
                "idempotency_key": r.idempotency_key,
                "business_key": r.business_key,
                "executor": r.executor,
                "job_type": r.job_type,
                "batch_id": r.batch_id,
                "chain_id": r.chain_id,
                "depends_on": r.depends_on,
                "recurring_master_id": r.recurring_master_id,
                "superseded_by": r.superseded_by,
                "created_at": r.created_at,
                "terminated_at": r.terminated_at,
                "archived_at": now,
                "archived_by": storable_text(node_id)[:128],
                "attempt_history": json.dumps(history[r.job_id]),
            }
            for r in conn.execute(
                select(J, *schema.job_end_state).select_from(ENDED).where(among(J.c.job_id, ids))
            )
        ]
        if rows:
            # A job archived before (then restored by hand) is replaced by its newer end.
            conn.execute(
                delete(ARCHIVE).where(among(ARCHIVE.c.job_id, [r["job_id"] for r in rows]))
            )
            conn.execute(insert(ARCHIVE), rows)

    def prune_jobs(
        self,
        status: JobStatus,
        before: datetime,
        *,
        limit: int,
        archive: bool,
        now: datetime,
        node_id: str,
    ) -> int:
        if status not in (JobStatus.SUCCEEDED, JobStatus.CANCELED, JobStatus.FAILED):
            raise ValueError(f"only ended jobs are removed, not {status.value} ones")
        conditions = [END.c.terminal_status == status.value, END.c.terminated_at < before]

        def work(conn: Connection) -> int:
            rows = conn.execute(self._removable(conditions, limit)).all()
            if not rows:
                return 0
            return self._remove(conn, rows, status.value, archive=archive, now=now, node_id=node_id)

        return self._run(work)

    def count_prunable(self, status: JobStatus, before: datetime) -> int:
        def work(conn: Connection) -> int:
            return int(
                conn.execute(
                    select(func.count())
                    .select_from(ENDED)
                    .where(
                        END.c.terminal_status == status.value,
                        END.c.terminated_at < before,
                        _no_living_lineage(),
                    )
                ).scalar_one()
            )

        return self._run(work, write=False)

    def archived_job(self, job_id: uuid.UUID) -> dict[str, Any] | None:
        def work(conn: Connection) -> dict[str, Any] | None:
            row = conn.execute(select(ARCHIVE).where(ARCHIVE.c.job_id == job_id)).first()
            if row is None:
                return None
            doc = dict(row._mapping)
            doc["attempt_history"] = json.loads(row.attempt_history or "[]")
            return doc

        return self._run(work, write=False)

    # ------------------------------------------------------------------ tombstones
    def _tombstones(self, before: datetime) -> list[Any]:
        return [
            IDEM.c.created_at < before,
            ~exists(select(Q.c.job_id).where(Q.c.job_id == IDEM.c.job_id)),
        ]

    def purge_tombstones(self, before: datetime, *, limit: int) -> int:
        def work(conn: Connection) -> int:
            stmt = select(IDEM.c.idempotency_key).where(*self._tombstones(before)).limit(limit)
            keys = list(conn.execute(self.dialect.lock_for_claim(stmt)).scalars())
            if not keys:
                return 0
            among = self.dialect.in_values(IDEM.c.idempotency_key, keys)
            return int(conn.execute(delete(IDEM).where(among)).rowcount)

        return self._run(work)

    def purge_own_id_keys(
        self, after: str | None, *, limit: int, dry_run: bool = False
    ) -> tuple[int, str | None]:
        def work(conn: Connection) -> tuple[int, str | None]:
            page = select(IDEM.c.idempotency_key, IDEM.c.job_id)
            if after is not None:
                page = page.where(IDEM.c.idempotency_key > after)
            rows = conn.execute(page.order_by(IDEM.c.idempotency_key).limit(limit)).all()
            if not rows:
                return 0, None
            own = [r.idempotency_key for r in rows if is_own_id_key(r.idempotency_key, r.job_id)]
            if own and not dry_run:
                conn.execute(
                    delete(IDEM).where(self.dialect.in_values(IDEM.c.idempotency_key, own))
                )
            return len(own), rows[-1].idempotency_key

        return self._run(work, write=not dry_run)

    def count_tombstones(self, before: datetime) -> int:
        def work(conn: Connection) -> int:
            stmt = select(func.count()).select_from(IDEM).where(*self._tombstones(before))
            return int(conn.execute(stmt).scalar_one())

        return self._run(work, write=False)

    # ------------------------------------------------------------------ dead letters
    def list_dead_letters(
        self, flt: DeadLetterFilter, *, limit: int, after: PageCursor | None = None
    ) -> list[JobRecord]:
        conds = _dead_letter_conditions(flt)
        if after is not None:
            conds.append(
                or_(
                    END.c.terminated_at < after.ended_at,
                    and_(END.c.terminated_at == after.ended_at, END.c.job_id < after.job_id),
                )
            )

        def work(conn: Connection) -> list[JobRecord]:
            rows = conn.execute(
                select(*self._record_cols())
                .select_from(ENDED.outerjoin(Q, Q.c.job_id == J.c.job_id))
                .where(*conds)
                .order_by(END.c.terminated_at.desc(), END.c.job_id.desc())
                .limit(limit)
            )
            return [self._to_record(r) for r in rows]

        return self._run(work, write=False)

    def count_dead_letters(self, flt: DeadLetterFilter) -> int:
        def work(conn: Connection) -> int:
            stmt = select(func.count()).select_from(ENDED).where(*_dead_letter_conditions(flt))
            return int(conn.execute(stmt).scalar_one())

        return self._run(work, write=False)

    def replay_dead_letters(self, flt: DeadLetterFilter, limit: int, *, now: datetime) -> int:
        check_replay_limit(limit)
        from sqlalchemy.exc import DBAPIError

        def work(conn: Connection) -> int:
            stmt = (
                select(J.c.job_id)
                .select_from(ENDED)
                .where(*_dead_letter_conditions(flt))
                .order_by(END.c.terminated_at, END.c.job_id)
                .limit(limit)
            )
            ids = list(conn.execute(stmt).scalars())
            return self._requeue_failed(conn, ids, now)

        try:
            return self._run(work)
        except DBAPIError as exc:
            self._raise_business_key_conflict(exc)
            raise

    def purge_dead_letters(self, flt: DeadLetterFilter, *, limit: int, now: datetime) -> int:
        conditions = _dead_letter_conditions(flt)

        def work(conn: Connection) -> int:
            rows = conn.execute(self._removable(conditions, limit)).all()
            if not rows:
                return 0
            return self._remove(conn, rows, FAILED, archive=False, now=now, node_id="")

        return self._run(work)

    # ------------------------------------------------------------------ job logs
    def append_job_logs(self, lines: Sequence[JobLogLine]) -> int:
        if not lines:
            return 0

        def work(conn: Connection) -> int:
            attempts = {(line.job_id, line.epoch) for line in lines}
            taken = {
                (r.job_id, r.epoch, r.seq)
                for chunk in iter_chunks(sorted(attempts), ID_CHUNK)
                for r in conn.execute(
                    select(LOG.c.job_id, LOG.c.epoch, LOG.c.seq).where(
                        tuple_(LOG.c.job_id, LOG.c.epoch).in_(list(chunk))
                    )
                )
            }
            rows = [
                {
                    "job_id": line.job_id,
                    "epoch": line.epoch,
                    "seq": line.seq,
                    "attempt_no": line.attempt,
                    "logged_at": line.logged_at,
                    "level": line.level.value,
                    "message": storable_text(line.message),
                }
                for line in lines
                if (line.job_id, line.epoch, line.seq) not in taken
            ]
            for chunk in iter_chunks(rows, ID_CHUNK):
                conn.execute(insert(LOG), list(chunk))
            return len(rows)

        return self._run(work)

    def job_logs(self, job_id: uuid.UUID, *, limit: int = 10_000) -> list[JobLogLine]:
        def work(conn: Connection) -> list[JobLogLine]:
            rows = conn.execute(
                select(LOG)
                .where(LOG.c.job_id == job_id)
                .order_by(LOG.c.epoch, LOG.c.seq)
                .limit(limit)
            )
            return [_line(r) for r in rows]

        return self._run(work, write=False)

    def purge_job_logs(self, before: datetime, *, limit: int) -> int:
        def work(conn: Connection) -> int:
            stmt = (
                select(LOG.c.job_id, LOG.c.epoch, LOG.c.seq)
                .where(LOG.c.logged_at < before)
                .order_by(LOG.c.logged_at)
                .limit(limit)
            )
            keys = [tuple(r) for r in conn.execute(self.dialect.lock_for_claim(stmt))]
            if not keys:
                return 0
            deleted = 0
            for chunk in iter_chunks(keys, ID_CHUNK):
                deleted += conn.execute(
                    delete(LOG).where(tuple_(LOG.c.job_id, LOG.c.epoch, LOG.c.seq).in_(chunk))
                ).rowcount
            return deleted

        return self._run(work)
