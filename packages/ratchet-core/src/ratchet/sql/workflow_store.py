"""Batches, chains, workflow branches and signals for the SQL store.

Representation (see docs/workflows.md):

* Every job of a flow is inserted at submit, in one transaction. A chain step or workflow branch
  is WAITING with ``scheduler_job_queue.waiting_for`` naming the job it follows, so the claim
  (PENDING rows only) never sees it. A batch parent is WAITING with no ``waiting_for``; a job
  waiting for a signal is WAITING with a ``signal_key``.
* When a job ends, the transaction that writes its terminal status (the outcome hook for
  attempts, the terminal hook for cancellations, the signal-timeout scan) also does everything
  that follows from it: release or cancel its dependents (depth-first, through the terminal
  hook), add it to its batch's counters with an atomic ``UPDATE ... SET n = n + k`` and, in the
  one transaction that finds every child ended, mark the batch ``completion_processed`` and
  finish its parent. A rolled-back write rolls all of it back; nothing is counted twice.
* What must happen after commit (events, ``on_success`` / ``on_failure`` callbacks, progress
  hooks, wakeups) is collected as :class:`~ratchet.domain.workflow.FlowEffect` values in a list
  that the public call creates for its transaction and passes down explicitly (to the outcome
  and terminal hooks too); the call returns them (``OutcomeWrite``, ``FlowWrite``, the watcher's
  report). A retried transaction starts with a new list, so nothing of a rolled-back attempt
  is returned.
* Branch predicates and the enum classes of the results they read are resolved by the
  :class:`~ratchet.domain.workflow.FlowResolver` the caller passes to that call (the engine's,
  under its class policy); without one, every reference is refused.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.engine import Connection, Row
from sqlalchemy.exc import DBAPIError

from ratchet.domain.errors import InvalidJobOptions
from ratchet.domain.flows import BatchSpec, BranchSpec, FlowJob, waiting
from ratchet.domain.lifecycle import JobStatus, check_transition
from ratchet.domain.model import FlowWrite, NewJob, Outcome, OutcomeKind
from ratchet.domain.options import BackoffPolicy
from ratchet.domain.retry import RetryPolicy, decide_retry
from ratchet.domain.takeover import start_by
from ratchet.domain.workflow import (
    BatchContext,
    EffectKind,
    FlowEffect,
    FlowResolver,
    JobResult,
    JobType,
    SignalTimeoutError,
    StoredCondition,
    WorkflowCondition,
    select_branches,
)
from ratchet.ports import InsertResult, iter_chunks
from ratchet.sql import schema
from ratchet.sql.affinity import AFFINITY_COLUMNS, affinity_rows
from ratchet.sql.caller_tx import caller_connection
from ratchet.sql.claimed import has_flow_effects

if TYPE_CHECKING:
    from ratchet.sql.dialect import SqlDialect
    from ratchet.sql.store import OutcomeHook, TerminalHook

log = logging.getLogger("ratchet.workflows")

T = TypeVar("T")

Q = schema.job_queue
J = schema.job
END = schema.job_end
B = schema.batch
WC = schema.workflow_condition
IDEM = schema.idempotency_key
TAGS = schema.job_tag

CHUNK = 500
WAITING = JobStatus.WAITING.value


__all__ = [  # the flow values live in ratchet.domain; importable from here as before
    "REFUSE_ALL",
    "BatchSpec",
    "BranchSpec",
    "EffectKind",
    "FlowEffect",
    "FlowJob",
    "WorkflowStoreMixin",
    "waiting",
]

#: The resolver of a write that was given none: every stored reference is refused.
REFUSE_ALL = FlowResolver()


@dataclass(frozen=True)
class _Ended:
    job_id: uuid.UUID
    status: JobStatus
    result: str | None = None
    error: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    attempt: int = 0
    epoch: int = 0


#: What follows a job's end, for the jobs of one outcome batch. Built once (an expanding IN).
#: Outcomes of jobs claimed as plain ones (``flow_effects`` False) are not even looked up.
_INFO = select(
    J.c.job_id,
    J.c.job_type,
    J.c.batch_id,
    J.c.chain_id,
    J.c.has_dependents,
    J.c.on_success,
    J.c.on_failure,
    J.c.params,
    J.c.tags,
    J.c.batch_counted,
).where(
    J.c.job_id.in_(bindparam("ids", expanding=True)),
    has_flow_effects(J),
)


# ---------------------------------------------------------------------------------------------
# the mixin
# ---------------------------------------------------------------------------------------------
class WorkflowStoreMixin:
    """Batches, chains, workflows and signals, mixed into ``SqlStore``."""

    if TYPE_CHECKING:
        dialect: SqlDialect
        outcome_hooks: list[OutcomeHook]
        terminal_hooks: list[TerminalHook]

        def _run(self, work: Callable[[Connection], T], *, write: bool = True) -> T: ...

        def require_schema(self) -> None: ...

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

        @staticmethod
        def _job_row(j: NewJob) -> dict[str, Any]: ...

        def _raise_duplicate(self, exc: DBAPIError, jobs: Sequence[NewJob]) -> None: ...

    def _install_workflow_hooks(self) -> None:
        """Register the outcome and terminal hooks (called once from ``SqlStore.__init__``)."""
        self.outcome_hooks.append(self._flow_outcomes)
        self.terminal_hooks.append(self._flow_terminated)

    # ------------------------------------------------------------------ submission
    def insert_flow(
        self,
        jobs: Sequence[FlowJob],
        *,
        now: datetime,
        branches: Sequence[BranchSpec] = (),
        batch: BatchSpec | None = None,
        connection: Any = None,
    ) -> InsertResult:
        """Insert a flow (head first) in one transaction: its jobs, branch conditions and batch.

        Only the head's idempotency key is checked: if another job holds it (for a head keyed
        by its own id: if the head is stored already), nothing is inserted and that job's id is
        returned (``inserted`` False); the other jobs get fresh keys. A job keyed by its own id
        gets no key row.

        :raises DuplicateBusinessKeyError: a live job holds the business key of a job of the
            flow; nothing is inserted.
        :raises DuplicateIdempotencyKeyError: another job holds the idempotency key of a later
            job of the flow, or took the head's key after the check (a racing submitter);
            nothing is inserted.
        """
        if not jobs:
            raise InvalidJobOptions("a flow needs at least one job")

        def work(conn: Connection) -> InsertResult:
            head = jobs[0].job
            if head.keyed_by_id:  # its own row holds its key
                holding = select(J.c.job_id).where(J.c.job_id == head.job_id)
            else:
                holding = select(IDEM.c.job_id).where(
                    IDEM.c.idempotency_key == head.idempotency_key
                )
            holder = conn.execute(holding).scalar()
            if holder is not None:
                return InsertResult(holder, False)
            if batch is not None:
                conn.execute(
                    insert(B).values(
                        batch_id=batch.batch_id,
                        name=batch.name,
                        total_items=batch.total,
                        completed_items=0,
                        failed_items=0,
                        sealed=batch.sealed,
                        completion_processed=False,
                        progress_hook=batch.progress_hook,
                        created_at=now,
                    )
                )
            self._insert_flow_jobs(conn, jobs, now)
            if branches:
                conn.execute(
                    insert(WC),
                    [
                        {
                            "parent_job_id": b.parent,
                            "definition_order": b.definition_order,
                            "child_job_id": b.child,
                            "condition_type": b.condition.type.value,
                            "condition_expression": b.condition.to_json(),
                            "condition_priority": b.condition.priority,
                            "first_match": b.first_match,
                            "description": b.description,
                            "created_at": now,
                        }
                        for b in branches
                    ],
                )
            return InsertResult(head.job_id, True)

        try:
            if connection is not None:
                self.require_schema()
                conn = caller_connection(connection)
                return work(conn)
            return self._run(work)
        except DBAPIError as exc:
            self._raise_duplicate(exc, [fj.job for fj in jobs])
            raise

    def _insert_flow_jobs(self, conn: Connection, jobs: Sequence[FlowJob], now: datetime) -> None:
        for fj in jobs:
            check_transition(None, fj.job.status)
            hidden = fj.waiting_for is not None or fj.signal_key is not None
            if hidden and fj.job.status is not JobStatus.WAITING:
                raise InvalidJobOptions("a hidden step or signal wait must be WAITING")
        for chunk in iter_chunks(list(jobs), CHUNK):
            keys = [
                {
                    "idempotency_key": fj.job.idempotency_key,
                    "job_id": fj.job.job_id,
                    "created_at": now,
                }
                for fj in chunk
                if not fj.job.keyed_by_id  # held by the job's own row
            ]
            if keys:
                conn.execute(insert(IDEM), keys)
            conn.execute(insert(J), [self._flow_job_row(fj) for fj in chunk])
            conn.execute(
                insert(Q),
                [
                    {
                        "job_id": fj.job.job_id,
                        "status": fj.job.status.value,
                        "priority": int(fj.job.priority),
                        "scheduled_time": fj.job.scheduled_time,
                        "attempts": 0,
                        "epoch": 0,
                        "business_key": fj.job.business_key,
                        "waiting_for": fj.waiting_for,
                        "signal_key": fj.signal_key,
                        "signal_deadline": (
                            now + fj.signal_wait if fj.signal_wait is not None else None
                        ),
                        "signal_payload": None,
                        "affinity": 0 if fj.job.affinity.empty else 1,
                        "start_by": start_by(fj.job.scheduled_time, fj.job.schedule_to_start),
                    }
                    for fj in chunk
                ],
            )
            tag_rows = [{"job_id": fj.job.job_id, "tag": t} for fj in chunk for t in fj.job.tags]
            if tag_rows:
                conn.execute(insert(TAGS), tag_rows)
            aff_rows = [
                dict(zip(AFFINITY_COLUMNS, row, strict=True))
                for fj in chunk
                for row in affinity_rows(fj.job.job_id, fj.job)
            ]
            if aff_rows:
                conn.execute(insert(schema.job_affinity), aff_rows)

    def _flow_job_row(self, fj: FlowJob) -> dict[str, Any]:
        row = self._job_row(fj.job)
        row.update(
            job_type=None if fj.job_type is JobType.SINGLE else fj.job_type.value,
            batch_id=fj.batch_id,
            chain_id=fj.chain_id,
            depends_on=fj.depends_on,
            has_dependents=fj.has_dependents or None,
            on_success=fj.on_success,
            on_failure=fj.on_failure,
            signal_key=fj.signal_key,
            signal_wait_ms=(
                None if fj.signal_wait is None else int(fj.signal_wait / timedelta(milliseconds=1))
            ),
        )
        return row

    # ------------------------------------------------------------------ streaming batches
    def add_batch_children(
        self, batch_id: uuid.UUID, children: Sequence[FlowJob], *, now: datetime
    ) -> int:
        """Insert one chunk of a streaming batch and add it to the total, in one transaction.

        :returns: the batch's total after the chunk.
        :raises InvalidJobOptions: the batch does not exist, is sealed, or was canceled.
        :raises DuplicateBusinessKeyError: a live job holds a child's business key.
        :raises DuplicateIdempotencyKeyError: another job holds a child's idempotency key.
        """

        def work(conn: Connection) -> int:
            row = conn.execute(
                self.dialect.lock_rows(
                    select(B.c.sealed, B.c.completion_processed, B.c.total_items).where(
                        B.c.batch_id == batch_id
                    )
                )
            ).first()
            if row is None or row.sealed or row.completion_processed:
                raise InvalidJobOptions(f"batch {batch_id} is not open for more children")
            self._insert_flow_jobs(conn, children, now)
            conn.execute(
                update(B)
                .where(B.c.batch_id == batch_id)
                .values(total_items=B.c.total_items + len(children))
            )
            return int(row.total_items) + len(children)

        try:
            return self._run(work)
        except DBAPIError as exc:
            self._raise_duplicate(exc, [fj.job for fj in children])
            raise

    def seal_batch(
        self, batch_id: uuid.UUID, *, now: datetime, resolve: FlowResolver
    ) -> FlowWrite[BatchContext | None]:
        """No more children will come; completes the batch now if every child already ended
        (its branch conditions resolved through ``resolve``)."""

        def work(conn: Connection) -> FlowWrite[BatchContext | None]:
            effects: list[FlowEffect] = []
            conn.execute(update(B).where(B.c.batch_id == batch_id).values(sealed=True))
            ctx = self._lock_batch(conn, batch_id)
            if ctx is not None:
                self._maybe_complete(conn, ctx, now, batch_id, effects, resolve)
            return FlowWrite(ctx, tuple(effects))

        return self._run(work)

    def get_batch(self, batch_id: uuid.UUID) -> BatchContext | None:
        """The batch's counters now (None if there is no such batch)."""

        def work(conn: Connection) -> BatchContext | None:
            row = conn.execute(select(B).where(B.c.batch_id == batch_id)).first()
            return None if row is None else _batch_ctx(row)

        return self._run(work, write=False)

    def batch_completion_processed(self, batch_id: uuid.UUID) -> bool:
        """Whether the batch's completion was processed (or the batch canceled)."""
        return bool(
            self._run(
                lambda conn: conn.execute(
                    select(B.c.completion_processed).where(B.c.batch_id == batch_id)
                ).scalar(),
                write=False,
            )
        )

    def _lock_batch(self, conn: Connection, batch_id: uuid.UUID) -> BatchContext | None:
        row = conn.execute(
            self.dialect.lock_rows(select(B).where(B.c.batch_id == batch_id))
        ).first()
        return None if row is None else _batch_ctx(row)

    # ------------------------------------------------------------------ signals
    def deliver_signal(self, job_id: uuid.UUID, payload: str, *, now: datetime) -> int:
        """WAITING -> PENDING for one job waiting for a signal; 0 if it is not (any more)."""
        check_transition(JobStatus.WAITING, JobStatus.PENDING)
        return self._run(
            lambda conn: (
                conn.execute(self._signal_update(payload, now).where(Q.c.job_id == job_id)).rowcount
            )
        )

    def deliver_signal_by_key(self, key: str, payload: str, *, now: datetime) -> int:
        """WAITING -> PENDING for every job waiting on ``key``, in one statement."""
        check_transition(JobStatus.WAITING, JobStatus.PENDING)
        return self._run(
            lambda conn: (
                conn.execute(
                    self._signal_update(payload, now).where(Q.c.signal_key == key)
                ).rowcount
            )
        )

    def _signal_update(self, payload: str, now: datetime) -> Any:
        return (
            update(Q)
            .where(
                Q.c.status == WAITING,
                Q.c.signal_key.is_not(None),
                Q.c.waiting_for.is_(None),
            )
            .values(
                status=JobStatus.PENDING.value,
                scheduled_time=now,
                signal_payload=payload,
                signal_deadline=None,
            )
        )

    def read_signal(self, job_id: uuid.UUID) -> str | None:
        """The stored signal of a live job (None: none delivered)."""
        text: str | None = self._run(
            lambda conn: conn.execute(
                select(Q.c.signal_payload).where(Q.c.job_id == job_id)
            ).scalar(),
            write=False,
        )
        return text

    def expire_signal_waits(
        self,
        *,
        now: datetime,
        limit: int,
        resolve: FlowResolver,
        policy: RetryPolicy | None = None,
    ) -> FlowWrite[int]:
        """Fail up to ``limit`` signal waits whose timeout passed, through the retry decision.

        With a retry left the job waits again (a new deadline: the backoff delay plus its wait
        window, attempts + 1); otherwise it fails with :class:`SignalTimeoutError` (the DLQ) and
        its dependents follow as for any failure. Rows another node is scanning are skipped.
        """
        if limit <= 0:
            return FlowWrite(0)

        def work(conn: Connection) -> FlowWrite[int]:
            stmt = (
                select(Q.c.job_id, Q.c.attempts)
                .where(Q.c.status == WAITING, Q.c.signal_deadline <= now)
                .order_by(Q.c.signal_deadline)
                .limit(limit)
            )
            rows = list(conn.execute(self.dialect.lock_for_claim(stmt)).all())
            if not rows:
                return FlowWrite(0)
            defs = {
                r.job_id: r
                for r in conn.execute(
                    select(
                        J.c.job_id,
                        J.c.max_retries,
                        J.c.backoff_policy,
                        J.c.backoff_ms,
                        J.c.signal_wait_ms,
                        J.c.signal_key,
                    ).where(J.c.job_id.in_([r.job_id for r in rows]))
                )
            }
            dead: list[_Ended] = []
            effects: list[FlowEffect] = []
            for r in rows:
                d = defs[r.job_id]
                attempt = r.attempts + 1
                exc = SignalTimeoutError(f"no signal {d.signal_key!r} within {d.signal_wait_ms} ms")
                error = f"{SignalTimeoutError.__module__}.SignalTimeoutError: {exc}"
                decision = decide_retry(
                    attempt=attempt,
                    max_retries=d.max_retries,
                    exc=exc,
                    now=now,
                    backoff=BackoffPolicy(d.backoff_policy),
                    backoff_base=timedelta(milliseconds=d.backoff_ms),
                    policy=policy,
                )
                effects.append(
                    FlowEffect(
                        EffectKind.SIGNAL_TIMED_OUT,
                        r.job_id,
                        r.job_id,
                        data={"attempt": attempt, "retry": decision.retry, "error": error},
                    )
                )
                if decision.retry and decision.retry_at is not None:
                    conn.execute(
                        update(Q)
                        .where(Q.c.job_id == r.job_id, Q.c.status == WAITING)
                        .values(
                            attempts=attempt,
                            last_error=error,
                            signal_deadline=decision.retry_at
                            + timedelta(milliseconds=d.signal_wait_ms or 0),
                        )
                    )
                else:
                    check_transition(JobStatus.WAITING, JobStatus.FAILED)
                    conn.execute(delete(Q).where(Q.c.job_id == r.job_id))
                    conn.execute(
                        insert(END).values(
                            job_id=r.job_id,
                            terminal_status=JobStatus.FAILED.value,
                            terminal_error=error,
                            terminated_at=now,
                            attempts=attempt,
                        )
                    )
                    dead.append(_Ended(r.job_id, JobStatus.FAILED, error=error, finished_at=now))
            if dead:
                self._jobs_ended(conn, dead, now, effects, resolve)
            return FlowWrite(len(rows), tuple(effects))

        return self._run(work)

    # ------------------------------------------------------------------ hooks
    def _flow_outcomes(
        self,
        conn: Connection,
        outcomes: list[Outcome],
        now: datetime,
        effects: list[FlowEffect],
        resolve: FlowResolver,
    ) -> None:
        ended = [
            _Ended(
                o.job_id,
                JobStatus.SUCCEEDED if o.kind is OutcomeKind.SUCCEEDED else JobStatus.FAILED,
                o.result,
                o.error,
                o.started_at,
                o.finished_at,
                o.attempt,
                o.epoch,
            )
            for o in outcomes
            if o.flow_effects and o.kind in (OutcomeKind.SUCCEEDED, OutcomeKind.DEAD)
        ]
        if ended:
            self._jobs_ended(conn, ended, now, effects, resolve)

    def _flow_terminated(
        self,
        conn: Connection,
        ids: list[uuid.UUID],
        status: JobStatus,
        now: datetime,
        effects: list[FlowEffect],
        resolve: FlowResolver,
    ) -> None:
        ended = [_Ended(i, status, finished_at=now) for i in ids]
        self._jobs_ended(conn, ended, now, effects, resolve)

    # ------------------------------------------------------------------ what follows an end
    def _jobs_ended(
        self,
        conn: Connection,
        ended: Sequence[_Ended],
        now: datetime,
        effects: list[FlowEffect],
        resolve: FlowResolver,
        source: Mapping[uuid.UUID, uuid.UUID] | None = None,
    ) -> None:
        """Everything that follows from jobs reaching a terminal status, in their transaction:
        what must happen after commit is appended to ``effects``."""
        infos: dict[uuid.UUID, Row[Any]] = {}
        for chunk in iter_chunks([e.job_id for e in ended], CHUNK):
            rows = conn.execute(_INFO, {"ids": chunk})
            infos.update({r.job_id: r for r in rows})
        if not infos:
            return
        src = dict(source or {})
        parents: list[_Ended] = []
        batch_delta: dict[uuid.UUID, list[int]] = defaultdict(lambda: [0, 0])
        batch_source: dict[uuid.UUID, uuid.UUID] = {}
        counted: list[uuid.UUID] = []
        for e in ended:
            info = infos.get(e.job_id)
            if info is None:
                continue
            origin = src.get(e.job_id, e.job_id)
            ok = e.status is JobStatus.SUCCEEDED
            if ok and info.on_success:
                effects.append(
                    FlowEffect(
                        EffectKind.ON_SUCCESS,
                        e.job_id,
                        origin,
                        info.on_success,
                        _callback_data(e, info),
                    )
                )
            elif e.status is JobStatus.FAILED and info.on_failure:
                effects.append(
                    FlowEffect(
                        EffectKind.ON_FAILURE,
                        e.job_id,
                        origin,
                        info.on_failure,
                        _callback_data(e, info),
                    )
                )
            if (
                info.job_type == JobType.BATCH_CHILD.value
                and info.batch_id is not None
                and not info.batch_counted  # a retried child is counted once, at its first end
            ):
                batch_delta[info.batch_id][0 if ok else 1] += 1
                batch_source.setdefault(info.batch_id, origin)
                counted.append(e.job_id)
            if info.job_type == JobType.BATCH_PARENT.value and e.status is JobStatus.CANCELED:
                self._cancel_batch_children(conn, e.job_id, now, effects, resolve)
            if info.chain_id is not None:
                if e.status is JobStatus.FAILED:
                    effects.append(
                        FlowEffect(
                            EffectKind.CHAIN_FAILED,
                            info.chain_id,
                            origin,
                            data={"step": str(e.job_id), "error": e.error},
                        )
                    )
                elif ok and not info.has_dependents:
                    effects.append(FlowEffect(EffectKind.CHAIN_COMPLETED, info.chain_id, origin))
            if info.has_dependents:
                parents.append(e)
                src.setdefault(e.job_id, origin)
        if parents:
            self._follow_parents(conn, parents, now, src, effects, resolve)
        for chunk in iter_chunks(counted, CHUNK):
            conn.execute(update(J).where(J.c.job_id.in_(chunk)).values(batch_counted=True))
        for batch_id in sorted(batch_delta):  # a fixed order: no lock-order deadlocks
            done, failed = batch_delta[batch_id]
            first = batch_source[batch_id]
            self._count_children(conn, batch_id, done, failed, now, first, effects, resolve)

    def _follow_parents(
        self,
        conn: Connection,
        parents: Sequence[_Ended],
        now: datetime,
        source: Mapping[uuid.UUID, uuid.UUID],
        effects: list[FlowEffect],
        resolve: FlowResolver,
    ) -> None:
        ids = [p.job_id for p in parents]
        waiting: dict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
        for chunk in iter_chunks(ids, CHUNK):
            stmt = select(Q.c.job_id, Q.c.waiting_for).where(
                Q.c.waiting_for.in_(chunk), Q.c.status == WAITING
            )
            for r in conn.execute(self.dialect.lock_rows(stmt)):
                waiting[r.waiting_for].append(r.job_id)
        conditions: dict[uuid.UUID, list[StoredCondition]] = defaultdict(list)
        for chunk in iter_chunks(ids, CHUNK):
            for r in conn.execute(select(WC).where(WC.c.parent_job_id.in_(chunk))):
                conditions[r.parent_job_id].append(
                    StoredCondition(
                        r.child_job_id,
                        WorkflowCondition.from_row(
                            r.condition_type, r.condition_expression, r.condition_priority
                        ),
                        r.definition_order,
                        bool(r.first_match),
                        r.description,
                    )
                )
        release: list[uuid.UUID] = []
        cancel: list[uuid.UUID] = []
        for parent in parents:
            origin = source.get(parent.job_id, parent.job_id)
            live = set(waiting.get(parent.job_id, ()))
            branches = [c for c in conditions.get(parent.job_id, ()) if c.child_job_id in live]
            branch_ids = {c.child_job_id for c in conditions.get(parent.job_id, ())}
            steps = [j for j in waiting.get(parent.job_id, ()) if j not in branch_ids]
            (release if parent.status is JobStatus.SUCCEEDED else cancel).extend(steps)
            if not branches:
                continue
            if parent.status is JobStatus.CANCELED:
                cancel.extend(c.child_job_id for c in branches)
                continue
            batch = None
            if any(c.condition.type.is_batch for c in branches):
                batch = self._lock_batch(conn, parent.job_id)
            result = JobResult(
                parent.job_id,
                parent.status is JobStatus.SUCCEEDED,
                _safe_decode(parent.result, resolve),
                parent.error,
                parent.started_at,
                parent.finished_at,
            )

            def failed(
                stored: StoredCondition,
                exc: Exception,
                parent_id: uuid.UUID = parent.job_id,
                origin: uuid.UUID = origin,
            ) -> None:
                log.warning(
                    "workflow condition %s of job %s raised %s: %s; the branch does not fire",
                    stored.condition.type.value,
                    parent_id,
                    type(exc).__name__,
                    exc,
                )
                effects.append(
                    FlowEffect(
                        EffectKind.CONDITION_FAILED,
                        parent_id,
                        origin,
                        data={
                            "branch": str(stored.child_job_id),
                            "condition": stored.condition.type.value,
                            "error": f"{type(exc).__name__}: {exc}",
                        },
                    )
                )

            fire, skip = select_branches(branches, result, batch, resolve.predicate, failed)
            release.extend(c.child_job_id for c in fire)
            cancel.extend(c.child_job_id for c in skip)
            for c in fire:
                effects.append(
                    FlowEffect(
                        EffectKind.BRANCH_TRIGGERED,
                        c.child_job_id,
                        origin,
                        data={
                            "parent": str(parent.job_id),
                            "condition": c.condition.type.value,
                            "description": c.description,
                        },
                    )
                )
        if release:
            check_transition(JobStatus.WAITING, JobStatus.PENDING)
            for chunk in iter_chunks(release, CHUNK):
                conn.execute(
                    update(Q)
                    .where(Q.c.job_id.in_(chunk), Q.c.status == WAITING)
                    .values(status=JobStatus.PENDING.value, waiting_for=None, scheduled_time=now)
                )
            first = source.get(parents[0].job_id, parents[0].job_id)
            effects.append(
                FlowEffect(EffectKind.RELEASED, None, first, data={"count": len(release)})
            )
        if cancel:
            check_transition(JobStatus.WAITING, JobStatus.CANCELED)
            # Through the terminal hooks again: the cascade goes depth-first down the flow.
            self._terminate(conn, cancel, JobStatus.CANCELED, now, effects=effects, resolve=resolve)

    def _cancel_batch_children(
        self,
        conn: Connection,
        batch_id: uuid.UUID,
        now: datetime,
        effects: list[FlowEffect],
        resolve: FlowResolver,
    ) -> None:
        """The parent was canceled: the batch never completes and its live children go."""
        conn.execute(update(B).where(B.c.batch_id == batch_id).values(completion_processed=True))
        ids = list(
            conn.execute(
                self.dialect.lock_rows(
                    select(Q.c.job_id)
                    .join(J, J.c.job_id == Q.c.job_id)
                    .where(J.c.batch_id == batch_id, J.c.job_type == JobType.BATCH_CHILD.value)
                )
            ).scalars()
        )
        if ids:
            self._terminate(conn, ids, JobStatus.CANCELED, now, effects=effects, resolve=resolve)

    def _count_children(
        self,
        conn: Connection,
        batch_id: uuid.UUID,
        done: int,
        failed: int,
        now: datetime,
        origin: uuid.UUID,
        effects: list[FlowEffect],
        resolve: FlowResolver,
    ) -> None:
        # An atomic increment: concurrent writers queue on the batch row, none is lost.
        conn.execute(
            update(B)
            .where(B.c.batch_id == batch_id)
            .values(
                completed_items=B.c.completed_items + done,
                failed_items=B.c.failed_items + failed,
            )
        )
        row = conn.execute(select(B).where(B.c.batch_id == batch_id)).first()
        if row is None:
            return
        ctx = _batch_ctx(row)
        if row.progress_hook:
            effects.append(
                FlowEffect(
                    EffectKind.BATCH_PROGRESS, batch_id, origin, row.progress_hook, batch=ctx
                )
            )
        if not row.completion_processed:
            self._maybe_complete(conn, ctx, now, origin, effects, resolve)

    def _maybe_complete(
        self,
        conn: Connection,
        ctx: BatchContext,
        now: datetime,
        source: uuid.UUID,
        effects: list[FlowEffect],
        resolve: FlowResolver,
    ) -> None:
        if not ctx.is_complete:
            return
        won = conn.execute(
            update(B)
            .where(B.c.batch_id == ctx.batch_id, B.c.completion_processed.is_(False))
            .values(completion_processed=True, completed_at=now)
        ).rowcount
        if won != 1:
            return
        parent = ctx.batch_id
        row = conn.execute(
            self.dialect.lock_rows(select(Q.c.status).where(Q.c.job_id == parent))
        ).first()
        if row is None or row.status != WAITING:
            return  # canceled meanwhile: nothing follows
        # The parent does no work: it passes PENDING and RUNNING inside this transaction.
        check_transition(JobStatus.WAITING, JobStatus.PENDING)
        check_transition(JobStatus.PENDING, JobStatus.RUNNING)
        check_transition(JobStatus.RUNNING, JobStatus.SUCCEEDED)
        result = json.dumps(ctx.to_dict())
        conn.execute(delete(Q).where(Q.c.job_id == parent))
        conn.execute(
            insert(END).values(
                job_id=parent,
                terminal_status=JobStatus.SUCCEEDED.value,
                result=result,
                terminated_at=now,
                attempts=0,
            )
        )
        effects.append(FlowEffect(EffectKind.BATCH_COMPLETED, parent, source, batch=ctx))
        self._jobs_ended(
            conn,
            [_Ended(parent, JobStatus.SUCCEEDED, result, None, None, now)],
            now,
            effects,
            resolve,
            {parent: source},
        )


def _batch_ctx(row: Row[Any]) -> BatchContext:
    return BatchContext(
        row.batch_id,
        row.name,
        int(row.total_items),
        int(row.completed_items),
        int(row.failed_items),
        bool(row.sealed),
    )


def _safe_decode(text: str | None, resolve: FlowResolver) -> Any:
    from ratchet.serialization import decode_result

    try:
        return decode_result(resolve.reveal(text), resolve.enum)
    except Exception:
        return text


def _callback_data(e: _Ended, info: Row[Any]) -> dict[str, Any]:
    return {
        "attempt": e.attempt,
        "epoch": e.epoch,
        "error": e.error,
        "params": json.loads(info.params) if info.params else {},
        "tags": tuple(json.loads(info.tags)) if info.tags else (),
        "started_at": e.started_at,
        "finished_at": e.finished_at,
    }
