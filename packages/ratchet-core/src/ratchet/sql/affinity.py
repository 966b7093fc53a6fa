"""Node tag affinity in SQL: the affinity rows of a job, and the claim's filter.

The rule is :meth:`ratchet.domain.affinity.Affinity.allows`; :func:`affinity_allows` renders it
for the generic claim, the reservation and the takeover (PostgreSQL's one-statement claim renders
the same condition in its own text, and the dialect contract compares the two).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import ColumnElement, and_, bindparam, false, or_, select
from sqlalchemy.engine import Connection

from ratchet.domain.affinity import Affinity, StrandedJob, runnable_anywhere
from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.model import NewJob
from ratchet.domain.watcher import NodeState
from ratchet.sql import schema

T = TypeVar("T")

Q = schema.job_queue
J = schema.job
NODE = schema.node
AFFINITY = schema.job_affinity
#: Live statuses in which a job waits for a node to run it.
WAITING_FOR_A_NODE = (JobStatus.PENDING.value, JobStatus.QUEUED.value, JobStatus.TIMED_OUT.value)
AFFINITY_COLUMNS = ("job_id", "tag", "required")


def tag_list(tags: frozenset[str]) -> str | None:
    """Tags as the JSON list a job row keeps (sorted; None when there are none)."""
    return json.dumps(sorted(tags)) if tags else None


def affinity_rows(job_id: Any, job: NewJob) -> list[tuple[Any, ...]]:
    """The ``AFFINITY_COLUMNS`` rows of ``job`` (none without affinity)."""
    a = job.affinity
    required = [(job_id, t, 1) for t in sorted(a.require)]
    return required + [(job_id, t, 0) for t in sorted(a.exclude)]


def affinity_allows(node_tags: Sequence[Any]) -> ColumnElement[bool]:
    """The live rows (of ``scheduler_job_queue``) that a node with ``node_tags`` (values, or
    bound parameters holding them) may run: jobs without affinity, and jobs none of whose
    affinity rows is violated (a required tag the node lacks, an excluded tag it has). The rule
    is :meth:`ratchet.domain.affinity.Affinity.allows`; a job without affinity costs one column
    check."""
    has = AFFINITY.c.tag.in_(list(node_tags)) if node_tags else false()
    violated = select(AFFINITY.c.job_id).where(
        AFFINITY.c.job_id == Q.c.job_id,
        or_(and_(AFFINITY.c.required == 1, ~has), and_(AFFINITY.c.required == 0, has)),
    )
    return or_(Q.c.affinity == 0, ~violated.exists())


def tag_parameters(node_tags: frozenset[str]) -> dict[str, str]:
    """The values of the bound parameters of :func:`tag_binds` for ``node_tags``."""
    return {f"n_tag{i}": tag for i, tag in enumerate(sorted(node_tags))}


def tag_binds(count: int) -> list[Any]:
    """``count`` bound parameters for node tags (``n_tag0``...), one per tag: a statement built
    once per number of tags needs no expanding parameter (re-rendered at every execution)."""
    return [bindparam(f"n_tag{i}", type_=AFFINITY.c.tag.type) for i in range(count)]


def _tags(text: str | None) -> frozenset[str]:
    return frozenset(json.loads(text)) if text else frozenset()


class AffinityStoreMixin:
    """Adds :class:`~ratchet.ports.AffinityStore` to :class:`~ratchet.sql.store.SqlStore`."""

    if TYPE_CHECKING:

        def _run(
            self, work: Callable[[Connection], T], *, write: bool = True, autocommit: bool = False
        ) -> T: ...

    def stranded_jobs(self, limit: int = 100) -> list[StrandedJob]:
        """Live jobs waiting for a node whose affinity no ALIVE node's tags satisfy.

        The live nodes are few: their tags are read, and the jobs with affinity are checked
        against them here (:func:`~ratchet.domain.affinity.runnable_anywhere`), in pages of the
        oldest first, until ``limit`` are found."""

        def work(conn: Connection) -> list[StrandedJob]:
            nodes = [
                _tags(t)
                for t in conn.execute(
                    select(NODE.c.tags).where(NODE.c.state == NodeState.ALIVE.value)
                ).scalars()
            ]
            found: list[StrandedJob] = []
            stmt = (
                select(
                    Q.c.job_id,
                    Q.c.status,
                    Q.c.scheduled_time,
                    J.c.target,
                    J.c.require_tags,
                    J.c.exclude_tags,
                )
                .join(J, J.c.job_id == Q.c.job_id)
                .where(Q.c.affinity != 0, Q.c.status.in_(WAITING_FOR_A_NODE))
                .order_by(Q.c.scheduled_time, Q.c.job_id)
            )
            for r in conn.execute(stmt):
                affinity = Affinity(_tags(r.require_tags), _tags(r.exclude_tags))
                if not runnable_anywhere(affinity, nodes):
                    found.append(
                        StrandedJob(r.job_id, r.status, r.target, affinity, r.scheduled_time)
                    )
                    if len(found) >= limit:
                        break
            return found

        if limit <= 0:
            return []
        return self._run(work, write=False)
