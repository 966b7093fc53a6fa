"""The reads of the query API (:class:`~ratchet.ports.QueryStore`) for the SQL store.

Every listing is a keyset scan in job id order (newest first) driven by one index that ends
with ``job_id`` (migration 0011): a status filter reads ``(status, job_id)`` of the queue table
for live statuses (on PostgreSQL only the statuses other than PENDING and RUNNING, whose pages
walk the queue's primary key or read the claim or owner index, migration pg04) and
``(terminal_status, job_id)`` of the end table for ended ones, one short query per status,
merged here; a tag reads ``(tag, job_id)``; otherwise the job table's primary
key, with the other filters as predicates (each has its own ``(column, job_id)`` index the
planner may prefer). No query uses OFFSET, so page 10,000 costs what page 1 does.
"""

from __future__ import annotations

import heapq
import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Select, and_, func, or_, select
from sqlalchemy.engine import Connection

from ratchet.domain.lifecycle import TERMINAL_STATUSES, JobPriority, JobStatus
from ratchet.domain.model import JobRecord
from ratchet.domain.query import JobLink, JobQuery, QueueHealth, RunningJob
from ratchet.domain.workflow import WorkflowCondition
from ratchet.sql import schema

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sqlalchemy.engine import Engine, Row

T = TypeVar("T")

Q = schema.job_queue
J = schema.job
END = schema.job_end
JOB_WITH_STATE = schema.job_with_state
TAGS = schema.job_tag
WC = schema.workflow_condition

#: How many levels of dependants :meth:`QueryStoreMixin.dependants` follows at most.
MAX_DEPTH = 100


class QueryStoreMixin:
    """:class:`~ratchet.ports.QueryStore` for :class:`~ratchet.sql.store.SqlStore`."""

    if TYPE_CHECKING:
        read_engine: Engine

        def _run(self, work: Callable[[Connection], T], *, write: bool = True) -> T: ...

        def _record_cols(self) -> list[Any]: ...

        def _to_record(self, r: Row[Any], last_epoch: int | None = None) -> JobRecord: ...

    def query_jobs(
        self, query: JobQuery, *, after: uuid.UUID | None, limit: int
    ) -> list[JobRecord]:
        """At most ``limit`` jobs matching ``query``, job id descending, ids below ``after``."""

        def work(conn: Connection) -> list[JobRecord]:
            if not query.statuses:
                return [self._to_record(r) for r in conn.execute(_page(self, query, after, limit))]
            per_status = [
                list(conn.execute(_page(self, query, after, limit, status)))
                for status in query.statuses
            ]
            merged = heapq.merge(*per_status, key=lambda r: r.job_id.bytes, reverse=True)
            return [self._to_record(r) for _, r in zip(range(limit), merged, strict=False)]

        return self._run(work, write=False)

    def dependants(self, job_id: uuid.UUID, *, limit: int) -> list[JobRecord]:
        """Jobs depending on ``job_id``, then on those, breadth first, at most ``limit``."""

        def work(conn: Connection) -> list[JobRecord]:
            found: list[JobRecord] = []
            seen = {job_id}
            level = [job_id]
            for _ in range(MAX_DEPTH):
                if not level or len(found) >= limit:
                    break
                rows = conn.execute(
                    _joined(self)
                    .where(J.c.depends_on.in_(level))
                    .order_by(J.c.job_id)
                    .limit(limit - len(found))
                ).all()
                fresh = [r for r in rows if r.job_id not in seen]
                seen.update(r.job_id for r in fresh)
                found += [self._to_record(r) for r in fresh]
                level = [r.job_id for r in fresh]
            return found

        return self._run(work, write=False)

    def job_links(self, job_ids: Sequence[uuid.UUID], *, limit: int) -> list[JobLink]:
        """The edges touching ``job_ids``: each job's own parent (``depends_on``) and the jobs
        that depend on it, with the branch condition where the child is a branch."""
        ids = list(dict.fromkeys(job_ids))
        if not ids or limit <= 0:
            return []

        def work(conn: Connection) -> list[JobLink]:
            touching = or_(J.c.job_id.in_(ids), J.c.depends_on.in_(ids))
            stmt = (
                select(
                    J.c.depends_on,
                    J.c.job_id,
                    WC.c.condition_type,
                    WC.c.condition_expression,
                    WC.c.condition_priority,
                    WC.c.description,
                )
                .select_from(J.outerjoin(WC, WC.c.child_job_id == J.c.job_id))
                .where(touching, J.c.depends_on.is_not(None))
                .order_by(J.c.depends_on, J.c.job_id)
                .limit(limit)
            )
            return [
                JobLink(
                    r.depends_on,
                    r.job_id,
                    None
                    if r.condition_type is None
                    else WorkflowCondition.from_row(
                        r.condition_type, r.condition_expression, r.condition_priority
                    ),
                    r.description,
                )
                for r in conn.execute(stmt)
            ]

        return self._run(work, write=False)

    def queue_health(self, *, now: datetime, window: timedelta) -> QueueHealth:
        """The queue's counts at ``now``; ended-job counts over ``window`` before it."""
        since = now - window
        pending = JobStatus.PENDING.value

        def work(conn: Connection) -> QueueHealth:
            live: dict[str, int] = dict(
                conn.execute(select(Q.c.status, func.count()).group_by(Q.c.status)).all()
            )
            # Per priority level, so that each is a range scan of the claim index.
            due = 0
            oldest: datetime | None = None
            for priority in JobPriority:
                base = (Q.c.status == pending, Q.c.priority == int(priority))
                row = conn.execute(
                    select(func.count(), func.min(Q.c.scheduled_time)).where(
                        *base, Q.c.scheduled_time <= now
                    )
                ).one()
                due += row[0]
                if row[1] is not None and (oldest is None or row[1] < oldest):
                    oldest = row[1]
            ended = {}
            for status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED):
                ended[status] = conn.execute(
                    select(func.count()).where(
                        END.c.terminal_status == status.value,
                        END.c.terminated_at >= since,
                        END.c.terminated_at <= now,
                    )
                ).scalar_one()
            failed = conn.execute(
                select(func.count()).where(END.c.terminal_status == JobStatus.FAILED.value)
            ).scalar_one()
            by_node: dict[str, int] = dict(
                conn.execute(
                    select(Q.c.picked_by, func.count())
                    .where(Q.c.status == JobStatus.RUNNING.value, Q.c.picked_by.is_not(None))
                    .group_by(Q.c.picked_by)
                ).all()
            )
            return QueueHealth(
                at=now,
                window=window,
                live=live,
                failed=failed,
                due_now=due,
                oldest_due=oldest,
                succeeded_in_window=ended[JobStatus.SUCCEEDED],
                failed_in_window=ended[JobStatus.FAILED],
                canceled_in_window=ended[JobStatus.CANCELED],
                running_by_node=by_node,
            )

        return self._run(work, write=False)

    def running_jobs(self, *, limit: int) -> list[RunningJob]:
        """Jobs nodes hold now (RUNNING, QUEUED), by node then id, at most ``limit``."""
        held = (JobStatus.RUNNING.value, JobStatus.QUEUED.value)

        def work(conn: Connection) -> list[RunningJob]:
            rows = conn.execute(
                select(Q.c.job_id, Q.c.picked_by, Q.c.status, J.c.target, Q.c.picked_at)
                .join(J, J.c.job_id == Q.c.job_id)
                .where(Q.c.status.in_(held), Q.c.picked_by.is_not(None))
                .order_by(Q.c.picked_by, Q.c.job_id)
                .limit(limit)
            )
            return [
                RunningJob(r.job_id, r.picked_by, JobStatus(r.status), r.target, r.picked_at)
                for r in rows
            ]

        return self._run(work, write=False)


def _records(store: QueryStoreMixin, joined: Any) -> Select[Any]:
    """The record columns over ``joined``: the job table with its queue row and its end,
    joined in the order that lets the filter's index drive the scan."""
    return select(*store._record_cols()).select_from(joined)


def _joined(store: QueryStoreMixin) -> Select[Any]:
    """The record columns over the job table with its queue row or its end, if it has one."""
    return _records(store, JOB_WITH_STATE)


def _page(
    store: QueryStoreMixin,
    query: JobQuery,
    after: uuid.UUID | None,
    limit: int,
    status: JobStatus | None = None,
) -> Select[Any]:
    """One keyset page: ``status`` (if given) picks the driving index, ``query``'s other
    filters are predicates."""
    if status is not None and status not in TERMINAL_STATUSES:
        # Live: the queue row carries the status; its (status, job_id) index drives the page.
        key = Q.c.job_id
        live = Q.join(J, J.c.job_id == Q.c.job_id).outerjoin(END, END.c.job_id == J.c.job_id)
        stmt = _records(store, live).where(Q.c.status == status.value)
    elif status is not None:
        # Ended: the end row carries the status; its (terminal_status, job_id) index drives it.
        key = END.c.job_id
        ended = schema.ended_job.outerjoin(Q, Q.c.job_id == J.c.job_id)
        stmt = _records(store, ended).where(END.c.terminal_status == status.value)
    elif query.tag is not None:
        key = TAGS.c.job_id
        tagged = (
            TAGS.join(J, J.c.job_id == TAGS.c.job_id)
            .outerjoin(Q, Q.c.job_id == J.c.job_id)
            .outerjoin(END, END.c.job_id == J.c.job_id)
        )
        stmt = _records(store, tagged).where(TAGS.c.tag == query.tag)
    else:
        key = J.c.job_id
        stmt = _joined(store)
    if query.tag is not None and key is not TAGS.c.job_id:
        stmt = stmt.where(J.c.job_id.in_(select(TAGS.c.job_id).where(TAGS.c.tag == query.tag)))
    stmt = stmt.where(*_predicates(query))
    if after is not None:
        stmt = stmt.where(key < after)
    return stmt.order_by(key.desc()).limit(limit)


def _predicates(query: JobQuery) -> list[Any]:
    """The filters of ``query`` other than status and tag, as conditions on the job table."""
    conditions: list[Any] = []
    if query.target is not None:
        conditions.append(J.c.target == query.target)
    if query.business_key is not None:
        conditions.append(J.c.business_key == query.business_key)
    if query.created_after is not None:
        conditions.append(J.c.created_at >= query.created_after)
    if query.created_before is not None:
        conditions.append(J.c.created_at < query.created_before)
    if query.finished_after is not None:
        conditions.append(END.c.terminated_at >= query.finished_after)
    if query.finished_before is not None:
        conditions.append(END.c.terminated_at < query.finished_before)
    if query.recurring_master_id is not None:
        conditions.append(J.c.recurring_master_id == query.recurring_master_id)
    if query.batch_id is not None:
        conditions.append(and_(J.c.batch_id == query.batch_id, J.c.job_id != query.batch_id))
    if query.workflow_id is not None:
        w = query.workflow_id
        conditions.append(or_(J.c.job_id == w, J.c.chain_id == w, J.c.depends_on == w))
    return conditions
