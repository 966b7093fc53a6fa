"""Store capability: node incarnations, the stalled-job watcher, takeovers, progress, checkpoints.

The watcher's transitions (ratchet.domain.watcher) as conditional writes (docs/clustering.md, "Liveness, takeover and
recovery"). Candidates are found by plain reads (no locks: a locking scan on MySQL/MariaDB
locks every row it passes and deadlocks with claims and completions); then only those rows are
locked by primary key (``SKIP LOCKED`` on PostgreSQL and MySQL, the write lock on SQLite), the
guard is checked again on their fresh values, and each transition is one conditional update
guarded by status and epoch, so two watchers racing at the same moment have the effect of one.
The rules themselves live in :mod:`ratchet.domain.watcher`; SQL only narrows the candidates and
the domain decides.

- A node is *alive* while its row is ALIVE or DRAINING; a job whose owner has no such row (DEAD,
  deregistered or never registered) is an orphan.
- "Has reported progress" is ``last_progress_at IS NOT NULL``; only progress writes set it.
- Epochs grow on every grant of ownership (claim, reserve, takeover), on a revoked reservation
  (T4) and on a stalled job re-queued for retry (T9). Every write by an executing
  node is fenced by job id + epoch + owner + status; progress writes also need the owner's node
  row not to be DEAD.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace as dc_replace
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import (
    BigInteger,
    and_,
    bindparam,
    case,
    delete,
    false,
    func,
    insert,
    literal,
    or_,
    select,
    true,
    type_coerce,
    update,
)
from sqlalchemy.engine import Connection, Engine, Row

from ratchet.domain.errors import FencedOut
from ratchet.domain.lifecycle import JobStatus, check_transition
from ratchet.domain.model import ClaimedJob, NodeRecord, Outcome, OutcomeKind, OutcomeWrite
from ratchet.domain.priority import claim_order_key
from ratchet.domain.takeover import JobStartDeadlineMissed, TakeoverPolicy
from ratchet.domain.watcher import (
    LIVE_NODE_STATES,
    AcquiredWork,
    Checkpoint,
    JobLiveness,
    NodeInfo,
    NodeState,
    StalledJob,
    WatcherAction,
    WatcherReport,
    WatcherSettings,
    check_checkpoint,
    classify,
    orphaned_timed_out_at,
    takeover_eligible,
)
from ratchet.domain.workflow import FlowEffect, FlowResolver
from ratchet.ports import iter_chunks
from ratchet.sql import schema
from ratchet.sql.affinity import affinity_allows, tag_list
from ratchet.sql.attempt_history import drop_open_attempts, end_attempts
from ratchet.sql.claimed import DEFINITIONS, claimed_job
from ratchet.sql.types import to_micros
from ratchet.sql.workflow_store import REFUSE_ALL

if TYPE_CHECKING:
    from ratchet.sql.dialect import SqlDialect
    from ratchet.sql.hotpaths import GatedClaim, HotPaths

T = TypeVar("T")

Q = schema.job_queue
J = schema.job
EXE = schema.job_execution
NODE = schema.node
PERMIT = schema.resource_permit

CHUNK = 500
#: Most jobs one watcher pass changes (the next pass continues).
WATCH_LIMIT = 1000
#: Statuses in which the owner's writes apply (fenced by owner + epoch).
OWNED = (JobStatus.RUNNING.value, JobStatus.TIMED_OUT.value)
#: The queue columns the watcher and the takers lock and re-check (no subqueries: a locking
#: read on MySQL/MariaDB would lock the rows of every table it reads).
QUEUE_COLS = (
    Q.c.job_id,
    Q.c.status,
    Q.c.epoch,
    Q.c.picked_by,
    Q.c.picked_at,
    Q.c.last_progress_at,
    Q.c.timed_out_at,
    Q.c.takeovers,
    Q.c.attempts,
    Q.c.priority,
    Q.c.scheduled_time,
    Q.c.start_by,
)
LIVE = tuple(s.value for s in LIVE_NODE_STATES)
#: Outcome of an attempt whose job was taken over (or handed back and taken over).
ABANDONED = "ABANDONED"

Supports = Callable[[str, "str | None"], bool]
"""Whether a node can run a job, given its target and its executor option (None: the default)."""

Decide = Callable[[StalledJob], Outcome]
"""Turns a TIMED_OUT job nobody took over into its outcome (RETRY or DEAD), inside the watcher's
transaction: the engine's retry policy decides."""


class _Reserved:
    """The identity of a reservation (what starting it needs)."""

    __slots__ = ("epoch", "job_id")

    def __init__(self, job_id: uuid.UUID, epoch: int) -> None:
        self.job_id = job_id
        self.epoch = epoch


def _started(job: Any, now: datetime) -> Any:
    return dc_replace(job, claimed_at=now) if isinstance(job, ClaimedJob) else job


@functools.cache
def poll_probe() -> Any:
    """The statement of :meth:`WatcherStoreMixin._probe_statement`, built once (its values are
    bound parameters; constructing it costs more than running it)."""
    node = bindparam("p_node", type_=NODE.c.node_id.type)
    eligible = (
        select(Q.c.job_id)
        .where(
            Q.c.status == JobStatus.TIMED_OUT.value,
            Q.c.picked_by != node,
            Q.c.takeovers < bindparam("p_takeovers", type_=Q.c.takeovers.type),
            Q.c.timed_out_at > bindparam("p_window", type_=BigInteger()),
            or_(
                Q.c.timed_out_at <= bindparam("p_grace", type_=BigInteger()),
                Q.c.picked_by.not_in(_live_nodes()),
            ),
        )
        .limit(1)
    )
    state = select(NODE.c.state).where(NODE.c.node_id == node).scalar_subquery()
    return select(state.label("state"), eligible.exists().label("eligible"))


def _node_state(value: str | None) -> NodeState | None:
    """A node row's state (None: the node has no row)."""
    return None if value is None else NodeState(value)


def _may_obtain_work(state: NodeState | None, without_row: bool) -> bool:
    """Only an ALIVE node obtains work, and a node without a row where that is allowed."""
    return state is NodeState.ALIVE or (state is None and without_row)


def _live_nodes() -> Any:
    # Each state its own bound constant (not one expanding list): a statement that holds it
    # can be rendered once and sent as driver SQL.
    return select(NODE.c.node_id).where(NODE.c.state.in_([literal(state) for state in LIVE]))


def _us(value: datetime) -> int:
    return to_micros(value)


class WatcherStoreMixin:
    """Adds :class:`~ratchet.ports.WatcherStore` to :class:`~ratchet.sql.store.SqlStore`."""

    if TYPE_CHECKING:
        dialect: SqlDialect
        hot_paths: HotPaths
        engine: Engine

        def _run(
            self, work: Callable[[Connection], T], *, write: bool = True, autocommit: bool = False
        ) -> T: ...

        def _run_dbapi(self, work: Callable[[Any], T]) -> T: ...

        def _record(
            self,
            conn: Connection,
            node_id: str,
            outcomes: Sequence[Outcome],
            now: datetime,
            resolve: FlowResolver,
        ) -> OutcomeWrite: ...

        def _candidates(self, now: datetime, limit: int, node_tags: Sequence[Any] = ()) -> Any: ...

        def _claim(
            self,
            conn: Connection,
            node_id: str,
            limit: int,
            now: datetime,
            boost: timedelta,
            node_tags: frozenset[str] = frozenset(),
        ) -> list[ClaimedJob]: ...

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

    # ------------------------------------------------------------------ node incarnations
    def register_incarnation(self, node: NodeInfo, *, now: datetime) -> list[NodeRecord]:
        """Register ``node`` ALIVE; return the other live incarnations with its name and host
        (candidates for "my previous incarnation": the engine checks their pids)."""

        def work(conn: Connection) -> list[NodeRecord]:
            values = {
                "heartbeat_at": now,
                "started_at": now,
                "state": NodeState.ALIVE.value,
                "node_name": node.node_name,
                "host": node.host,
                "pid": node.pid,
                "slots": node.slots,
                "prefetch": node.prefetch,
                "tags": tag_list(node.tags),
            }
            changed = conn.execute(
                update(NODE).where(NODE.c.node_id == node.node_id).values(**values)
            ).rowcount
            if not changed:
                conn.execute(insert(NODE).values(node_id=node.node_id, **values))
            rows = conn.execute(
                select(NODE).where(
                    NODE.c.node_name == node.node_name,
                    NODE.c.host == node.host,
                    NODE.c.node_id != node.node_id,
                    NODE.c.state.in_(LIVE),
                )
            ).all()
            return [_node_record(r) for r in rows]

        return self._run(work)

    def beat(
        self, node_id: str, *, now: datetime, breakers: Mapping[str, str] | None = None
    ) -> bool:
        """Refresh the heartbeat of a live incarnation (and the breakers it publishes, when
        given); False if it is DEAD or gone."""
        values: dict[str, Any] = {"heartbeat_at": now}
        if breakers is not None:
            values["breakers"] = json.dumps(dict(breakers), sort_keys=True) if breakers else None

        def work(conn: Connection) -> bool:
            return bool(
                conn.execute(
                    update(NODE)
                    .where(NODE.c.node_id == node_id, NODE.c.state.in_(LIVE))
                    .values(**values)
                ).rowcount
            )

        return self._run(work)

    def set_draining(self, node_id: str, *, now: datetime) -> bool:
        """ALIVE -> DRAINING (no more claims or takeovers); False unless it was ALIVE."""

        def work(conn: Connection) -> bool:
            return bool(
                conn.execute(
                    update(NODE)
                    .where(NODE.c.node_id == node_id, NODE.c.state == NodeState.ALIVE.value)
                    .values(state=NodeState.DRAINING.value, heartbeat_at=now)
                ).rowcount
            )

        return self._run(work)

    def declare_dead(
        self, node_ids: Collection[str], *, now: datetime, silent_for: timedelta | None = None
    ) -> list[str]:
        """Mark live incarnations DEAD, each by one compare-and-set; return those this call
        marked. With ``silent_for``, only those whose heartbeat is at least that old."""
        if not node_ids:
            return []
        return self._run(lambda conn: self._declare_dead(conn, node_ids, now, silent_for))

    def _declare_dead(
        self,
        conn: Connection,
        node_ids: Collection[str],
        now: datetime,
        silent_for: timedelta | None,
    ) -> list[str]:
        marked: list[str] = []
        for node_id in sorted(node_ids):
            stmt = update(NODE).where(NODE.c.node_id == node_id, NODE.c.state.in_(LIVE))
            if silent_for is not None:
                stmt = stmt.where(NODE.c.heartbeat_at <= now - silent_for)
            if conn.execute(stmt.values(state=NodeState.DEAD.value)).rowcount:
                marked.append(node_id)
        if marked:
            # Their permits go with them; a zombie that comes back finds its attempts fenced
            # and releases nothing that is not its own.
            conn.execute(delete(PERMIT).where(PERMIT.c.node_id.in_(marked)))
        return marked

    @staticmethod
    def _reclaim_stray_permits(conn: Connection, cutoff: datetime) -> int:
        """Delete permits acquired at or before ``cutoff`` by nodes without a live row: nodes
        that deregistered (a drain) or never registered while an attempt of theirs still held
        one. Such a node is never declared dead, so :meth:`_declare_dead` cannot reclaim them.
        The live nodes are read without locks and the permits deleted by primary key (a
        ``NOT IN`` subquery inside a ``DELETE`` would lock the node rows on MySQL/MariaDB)."""
        live = set(conn.execute(_live_nodes()).scalars())
        rows = conn.execute(
            select(PERMIT.c.job_id, PERMIT.c.epoch, PERMIT.c.node_id).where(
                PERMIT.c.acquired_at <= cutoff
            )
        ).all()
        stray = [r for r in rows if r.node_id not in live]
        for r in stray:
            conn.execute(
                delete(PERMIT).where(
                    PERMIT.c.job_id == r.job_id,
                    PERMIT.c.epoch == r.epoch,
                    PERMIT.c.node_id == r.node_id,
                )
            )
        return len(stray)

    # ------------------------------------------------------------------ the watcher
    def watch(
        self,
        *,
        now: datetime,
        settings: WatcherSettings,
        decide: Decide,
        judge_silence: bool = True,
        resolve: FlowResolver | None = None,
    ) -> WatcherReport:
        """One watcher pass: silent nodes -> DEAD (their permits go with them, as do permits
        older than ``dead_after`` of nodes without a live row), then every due job transition
        (T4, T6, T9, T13) in one transaction. Idempotent: a second pass at the same ``now``
        changes nothing.

        ``judge_silence`` False skips the two judgements of silence (nodes dead, RUNNING jobs
        stalled): the caller could not write itself lately, so the silence may be the
        database's. The outcomes recorded for expired jobs (T9) are followed in their flows
        through ``resolve``; the report's ``effects`` are what must follow the commit."""
        resolver = resolve or REFUSE_ALL

        silent_nodes = select(NODE.c.node_id).where(
            NODE.c.state.in_(LIVE), NODE.c.heartbeat_at <= now - settings.dead_after
        )
        expired_rows = and_(
            NODE.c.state == NodeState.DEAD.value,
            NODE.c.heartbeat_at < now - settings.dead_node_retention,
        )
        due = self._due(now, settings, judge_silence)
        permits_cutoff = now - settings.dead_after
        stray_permits = select(PERMIT.c.job_id).where(
            PERMIT.c.acquired_at <= permits_cutoff, PERMIT.c.node_id.not_in(_live_nodes())
        )

        def probe(conn: Connection) -> tuple[list[str], bool, bool, bool]:
            return (
                list(conn.execute(silent_nodes).scalars()),
                conn.execute(select(NODE.c.node_id).where(expired_rows).limit(1)).first()
                is not None,
                conn.execute(select(Q.c.job_id).where(due).limit(1)).first() is not None,
                conn.execute(stray_permits.limit(1)).first() is not None,
            )

        def nodes(conn: Connection) -> tuple[list[str], int]:
            silent = list(conn.execute(silent_nodes).scalars()) if judge_silence else []
            marked = self._declare_dead(conn, silent, now, settings.dead_after)
            # Each write only if the probe found work for it: deleting expired rows is a locking
            # range read on MySQL/MariaDB, which may wait for a heartbeat in flight.
            removed = conn.execute(delete(NODE).where(expired_rows)).rowcount if stale else 0
            if strays:
                self._reclaim_stray_permits(conn, permits_cutoff)
            return marked, int(removed or 0)

        # Reads first: the write transactions (the write lock on SQLite) only when needed.
        silent, stale, jobs_due, strays = self._run(probe, write=False)
        if not judge_silence:
            silent = []
        dead: list[str] = []
        removed = 0
        if silent or stale or strays:
            dead, removed = self._run(nodes)
        report = WatcherReport()
        if jobs_due or dead:
            report = self._run(
                lambda conn: self._watch_jobs(
                    conn, due, now, settings, decide, judge_silence, resolver
                )
            )
        return dc_replace(report, dead_nodes=tuple(dead), removed_nodes=removed)

    def _liveness_cols(self) -> list[Any]:
        stall = select(J.c.stall_timeout_ms).where(J.c.job_id == Q.c.job_id).scalar_subquery()
        policy = select(J.c.takeover_policy).where(J.c.job_id == Q.c.job_id).scalar_subquery()
        owner_alive = case((Q.c.picked_by.in_(_live_nodes()), 1), else_=0)
        return [
            *QUEUE_COLS,
            stall.label("stall_ms"),
            policy.label("takeover_policy"),
            owner_alive.label("owner_alive"),
        ]

    @staticmethod
    def _due(now: datetime, settings: WatcherSettings, judge_silence: bool = True) -> Any:
        """Live jobs some watcher transition may apply to now (the domain decides which)."""
        now_us = literal(_us(now), BigInteger)
        lp = type_coerce(Q.c.last_progress_at, BigInteger)
        pa = type_coerce(Q.c.picked_at, BigInteger)
        tmo = type_coerce(Q.c.timed_out_at, BigInteger)
        stall_ms = select(J.c.stall_timeout_ms).where(J.c.job_id == Q.c.job_id).scalar_subquery()
        activity = case((and_(lp.is_not(None), or_(pa.is_(None), lp > pa)), lp), else_=pa)
        limit_ms = func.coalesce(stall_ms, settings.running_stall // timedelta(milliseconds=1))
        orphan = Q.c.picked_by.not_in(_live_nodes())
        policy = select(J.c.takeover_policy).where(J.c.job_id == Q.c.job_id).scalar_subquery()
        grace_us = settings.timed_out_grace // timedelta(microseconds=1)
        window_us = grace_us + settings.takeover_window // timedelta(microseconds=1)
        due = or_(
            and_(
                Q.c.status == JobStatus.QUEUED.value,
                Q.c.picked_by.is_not(None),
                or_(orphan, Q.c.picked_at <= now - settings.queued_stall),
            ),
            and_(
                Q.c.status == JobStatus.RUNNING.value,
                or_(
                    orphan,
                    and_(
                        true() if judge_silence else false(),
                        or_(lp.is_not(None), stall_ms.is_not(None)),
                        activity + limit_ms * 1000 <= now_us,
                    ),
                ),
            ),
            and_(
                Q.c.status == JobStatus.TIMED_OUT.value,
                or_(
                    tmo + window_us <= now_us,
                    and_(
                        or_(
                            Q.c.takeovers >= settings.max_takeovers,
                            policy == TakeoverPolicy.FAIL.value,
                        ),
                        tmo + grace_us <= now_us,
                    ),
                ),
            ),
            # T14: never started, and past its schedule-to-start deadline
            and_(Q.c.start_by <= now, Q.c.status == JobStatus.PENDING.value),
        )
        return due

    def _watch_jobs(
        self,
        conn: Connection,
        due: Any,
        now: datetime,
        settings: WatcherSettings,
        decide: Decide,
        judge_silence: bool,
        resolve: FlowResolver,
    ) -> WatcherReport:
        stmt = select(*self._liveness_cols()).where(due).order_by(Q.c.job_id).limit(WATCH_LIMIT)
        # A plain read finds the candidates (no lock: on MySQL/MariaDB a locking scan would lock
        # every row it passes and deadlock with claims and completions); then only those rows
        # are locked, by primary key, and classified again on their fresh values.
        rows = self._relock(conn, conn.execute(stmt).all())
        revoke: list[Any] = []
        stall: list[Any] = []
        orphaned: list[Any] = []
        expire: list[Any] = []
        missed: list[Any] = []
        for r in rows:
            action = classify(_liveness(r), now, settings, owner_alive=bool(r.owner_alive))
            if action is WatcherAction.MISSED_START:
                missed.append(r)
            if action is WatcherAction.REVOKE:
                revoke.append(r)
            elif action is WatcherAction.STALL and judge_silence:
                stall.append(r)
            elif action is WatcherAction.ORPHAN:
                orphaned.append(r)
            elif action is WatcherAction.EXPIRE:
                expire.append(r)
        if revoke:
            check_transition(JobStatus.QUEUED, JobStatus.PENDING)
            self._guarded(
                conn,
                revoke,
                JobStatus.QUEUED,
                {
                    "status": JobStatus.PENDING.value,
                    "picked_by": None,
                    "picked_at": None,
                    "epoch": Q.c.epoch + 1,  # T4: the revoked reservation is fenced out
                },
            )
        if stall or orphaned:
            check_transition(JobStatus.RUNNING, JobStatus.TIMED_OUT)
        if stall:
            self._guarded(
                conn, stall, JobStatus.RUNNING, {"status": "TIMED_OUT", "timed_out_at": now}
            )
        if orphaned:
            self._guarded(
                conn,
                orphaned,
                JobStatus.RUNNING,
                {"status": "TIMED_OUT", "timed_out_at": orphaned_timed_out_at(now, settings)},
            )
        outcomes: list[Outcome] = []
        effects: list[FlowEffect] = []
        if expire:
            outcomes, effects = self._expire(conn, expire, now, settings, decide, resolve)
        if missed:
            self._missed_start(conn, missed, now, effects, resolve)
        return WatcherReport(
            revoked=len(revoke),
            orphaned=len(orphaned),
            stalled=len(stall),
            expired=tuple(outcomes),
            effects=tuple(effects),
            missed_start=tuple(r.job_id for r in missed),
        )

    def _missed_start(
        self,
        conn: Connection,
        rows: Sequence[Any],
        now: datetime,
        effects: list[FlowEffect],
        resolve: FlowResolver,
    ) -> None:
        """T14: PENDING jobs past their schedule-to-start deadline end FAILED without running
        (locked rows; each error names how late it is)."""
        check_transition(JobStatus.PENDING, JobStatus.FAILED)
        for r in rows:
            late = now - r.start_by
            self._terminate(
                conn,
                [r.job_id],
                JobStatus.FAILED,
                now,
                effects=effects,
                resolve=resolve,
                error=(
                    f"{JobStartDeadlineMissed.__name__}: the job did not start by its "
                    f"schedule-to-start deadline ({r.start_by.isoformat()}; {late} late)"
                ),
            )

    def _relock(self, conn: Connection, candidates: Sequence[Row[Any]]) -> list[Any]:
        """Lock the queue rows of ``candidates`` (read without locks) by primary key, skipping
        rows another transaction holds, and return them with their values as of now (in the
        candidates' order). Rows that left the queue meanwhile are dropped; whether each owner
        is alive is read again (without a lock) after the rows are locked. Each returned row
        has the attributes of :meth:`_liveness_cols`, plus those of the candidates."""
        if not candidates:
            return []
        ids = [c.job_id for c in candidates]
        fresh: dict[uuid.UUID, dict[str, Any]] = {}
        for chunk in iter_chunks(ids, CHUNK):
            stmt = select(*QUEUE_COLS).where(Q.c.job_id.in_(list(chunk)))
            for r in conn.execute(self.dialect.lock_for_claim(stmt)):
                fresh[r.job_id] = dict(r._mapping)
        if not fresh:
            return []
        alive = set(conn.execute(_live_nodes()).scalars())
        rows: list[Any] = []
        for c in candidates:
            values = fresh.get(c.job_id)
            if values is None:
                continue  # gone (ended) or locked by someone else: the next pass sees it
            merged = {**dict(c._mapping), **values}
            merged["owner_alive"] = int(values["picked_by"] in alive)
            rows.append(SimpleNamespace(**merged))
        return rows

    @staticmethod
    def _guarded(
        conn: Connection, rows: Sequence[Any], source: JobStatus, values: dict[str, Any]
    ) -> None:
        """Apply ``values`` to locked rows, still guarded by status and epoch."""
        conn.execute(
            update(Q)
            .where(
                Q.c.job_id == bindparam("b_id"),
                Q.c.status == source.value,
                Q.c.epoch == bindparam("b_epoch"),
            )
            .values(**values),
            [{"b_id": r.job_id, "b_epoch": r.epoch} for r in rows],
        )

    def _expire(
        self,
        conn: Connection,
        rows: Sequence[Any],
        now: datetime,
        settings: WatcherSettings,
        decide: Decide,
        resolve: FlowResolver,
    ) -> tuple[list[Outcome], list[FlowEffect]]:
        """T9: record the outcome the engine decides for each job, as its owner would; return
        the outcomes that applied and what they trigger in flows."""
        definitions = {
            d.job_id: d
            for d in conn.execute(
                select(J.c.job_id, J.c.max_retries, J.c.backoff_policy, J.c.backoff_ms).where(
                    J.c.job_id.in_([r.job_id for r in rows])
                )
            )
        }
        by_owner: dict[str, list[Outcome]] = {}
        for r in rows:
            d = definitions[r.job_id]
            waited = now - r.timed_out_at
            if waited >= settings.timed_out_grace + settings.takeover_window:
                reason = f"no node took it over within {settings.takeover_window} after its grace"
            elif r.takeover_policy == TakeoverPolicy.FAIL.value:
                reason = "its takeover policy is FAIL"
            else:
                reason = f"it stalled again after {r.takeovers} takeover(s), the cap"
            stalled = StalledJob(
                job_id=r.job_id,
                epoch=r.epoch,
                attempt=r.attempts + 1,
                owner=r.picked_by,
                started_at=r.picked_at or now,
                timed_out_at=r.timed_out_at,
                takeovers=r.takeovers,
                max_retries=d.max_retries,
                backoff=d.backoff_policy,
                backoff_ms=d.backoff_ms,
                reason=reason,
            )
            by_owner.setdefault(r.picked_by, []).append(decide(stalled))
        applied: list[Outcome] = []
        effects: list[FlowEffect] = []
        drop_open_attempts(conn, rows)  # the outcome write inserts them ended
        for owner, outcomes in by_owner.items():
            written = self._record(conn, owner, outcomes, now, resolve)
            applied.extend(o for o in outcomes if o.job_id not in written.fenced)
            effects.extend(written.effects)
        retried = [o.job_id for o in applied if o.kind is not OutcomeKind.DEAD]
        if retried:  # T9: the forced end of the stalled attempt bumps the epoch
            conn.execute(
                update(Q)
                .where(Q.c.job_id.in_(retried), Q.c.status == JobStatus.PENDING.value)
                .values(epoch=Q.c.epoch + 1)
            )
        return applied, effects

    # ------------------------------------------------------------------ acquiring work
    def _node_capacity(self, conn: Connection, node_id: str) -> Any:
        """The node's row if it is ALIVE (the only state that may take new work)."""
        row = conn.execute(
            select(NODE.c.state, NODE.c.slots, NODE.c.prefetch).where(NODE.c.node_id == node_id)
        ).first()
        return row if row is not None and row.state == NodeState.ALIVE.value else None

    def _held(self, conn: Connection, node_id: str, statuses: Sequence[str]) -> int:
        return int(
            conn.execute(
                select(func.count())
                .select_from(Q)
                .where(Q.c.picked_by == node_id, Q.c.status.in_(list(statuses)))
            ).scalar_one()
        )

    def takeover(
        self,
        node_id: str,
        limit: int,
        *,
        now: datetime,
        settings: WatcherSettings,
        exclude: Collection[uuid.UUID] = (),
        supports: Supports | None = None,
        node_tags: frozenset[str] = frozenset(),
    ) -> list[ClaimedJob]:
        """T8: take over up to ``limit`` eligible TIMED_OUT jobs of other incarnations.

        Only an ALIVE node, and never beyond its registered slots (its RUNNING + TIMED_OUT jobs
        count). Each job gets epoch + 1, this owner, one more takeover and a new attempt-history
        row; the abandoned attempt's row is closed as ``ABANDONED``. ``exclude``: jobs this
        process still runs locally (a restarted incarnation must not run them twice).
        ``supports(target, executor)``: whether this node can run a job (its class policy allows
        the target and it has the executor); jobs it cannot run are left to other nodes, as are
        jobs whose affinity its ``node_tags`` do not satisfy and jobs whose takeover policy is
        FAIL.

        The candidates are read without locks; only the chosen rows are then locked (by primary
        key, skipping rows others hold) and their eligibility checked again on fresh values.
        """
        if limit <= 0:
            return []

        candidates = self._run(
            lambda conn: self._takeover_candidates(
                conn, node_id, limit, now, settings, exclude, supports, node_tags
            ),
            write=False,
        )
        if not candidates:
            return []
        return self._run(
            lambda conn: self._takeover(conn, node_id, limit, now, settings, candidates)
        )

    def _takeover_candidates(
        self,
        conn: Connection,
        node_id: str,
        limit: int,
        now: datetime,
        settings: WatcherSettings,
        exclude: Collection[uuid.UUID],
        supports: Supports | None,
        node_tags: frozenset[str] = frozenset(),
    ) -> list[Row[Any]]:
        """Eligible jobs this node can run, read without locks (:meth:`_takeover` locks and
        checks them again)."""
        definition = J.alias("definition")  # J itself would correlate the subqueries
        stmt = (
            self._eligible(node_id, now, settings)
            .with_only_columns(*self._liveness_cols(), definition.c.target, definition.c.executor)
            .where(
                definition.c.job_id == Q.c.job_id,
                or_(
                    definition.c.takeover_policy.is_(None),
                    definition.c.takeover_policy != TakeoverPolicy.FAIL.value,
                ),
                affinity_allows(sorted(node_tags)),
            )
        )
        if exclude:
            stmt = stmt.where(Q.c.job_id.not_in(list(exclude)))
        stmt = stmt.order_by(Q.c.priority.desc(), Q.c.timed_out_at, Q.c.job_id)
        rows = conn.execute(stmt.limit(max(4 * limit, 32))).all()
        return [r for r in rows if supports is None or supports(r.target, r.executor)][: 2 * limit]

    def acquire_work(
        self,
        node_id: str,
        want: int,
        *,
        now: datetime,
        settings: WatcherSettings,
        boost_interval: timedelta,
        reserved: Sequence[ClaimedJob] = (),
        exclude: Collection[uuid.UUID] = (),
        supports: Supports | None = None,
        without_row: bool = False,
        node_tags: frozenset[str] = frozenset(),
    ) -> AcquiredWork:
        """One poll in one transaction: the node's state, then up to ``want`` jobs: takeovers
        first (T8, as :meth:`takeover`), then ``reserved`` jobs started (T3), then new claims
        (T1).

        Only an ALIVE node obtains work (``without_row``: also a node that never registered,
        e.g. a worker driven by hand). Only the first ``want - len(taken)`` of ``reserved`` are
        tried: those that did not start were revoked; the rest are untouched, still reserved.
        """
        if want <= 0:
            return AcquiredWork(None)
        probe, params = self._probe_statement(node_id, now, settings)
        claims = self.hot_paths.claim
        gated: GatedClaim | None = None
        if not reserved:
            # The probe and the claim together, on the bare driver where the statement set
            # gives the work for it (else in one statement where it folds the probe into the
            # claim): it claims only what the checks below would let the node claim.
            gate = {**params, "without_row": without_row}
            dialect = self.engine.dialect
            direct = claims.driver_gated_claim(
                node_id, want, now, boost_interval, node_tags, gate, dialect
            )
            if direct is not None:
                gated = self._run_dbapi(direct)
            elif claims.gates_claims:
                gated = self._run(
                    lambda conn: claims.gated_claim(
                        conn, node_id, want, now, boost_interval, node_tags, gate
                    ),
                    autocommit=True,
                )
        if gated is not None:
            state = _node_state(gated.state)
            if not _may_obtain_work(state, without_row):
                return AcquiredWork(state)
            if not (gated.eligible and state is NodeState.ALIVE):
                return AcquiredWork(state, (), (), tuple(gated.claimed))
            # takeovers are possible (nothing was claimed): the general path below

        def work(conn: Connection) -> AcquiredWork:
            row = conn.execute(probe, params).one()
            state = _node_state(row.state)
            if not _may_obtain_work(state, without_row):
                return AcquiredWork(state)
            taken: list[ClaimedJob] = []
            if row.eligible and state is NodeState.ALIVE:
                candidates = self._takeover_candidates(
                    conn, node_id, want, now, settings, exclude, supports, node_tags
                )
                if candidates:
                    taken = self._takeover(conn, node_id, want, now, settings, candidates)
            rest = want - len(taken)
            started = self._start_reserved(conn, node_id, reserved[:rest], now) if rest else []
            rest -= len(started)
            claimed = (
                self._claim(conn, node_id, rest, now, boost_interval, node_tags) if rest > 0 else []
            )
            return AcquiredWork(state, tuple(taken), tuple(started), tuple(claimed))

        return self._run(work)

    @staticmethod
    def _probe_statement(
        node_id: str, now: datetime, settings: WatcherSettings
    ) -> tuple[Any, dict[str, Any]]:
        """The poll's first read (statement, parameters): the node's state and whether a
        takeover is possible."""
        params = {
            "p_node": node_id,
            "p_takeovers": settings.max_takeovers,
            "p_window": to_micros(now - (settings.timed_out_grace + settings.takeover_window)),
            "p_grace": to_micros(now - settings.timed_out_grace),
        }
        return poll_probe(), params

    @staticmethod
    def _eligible(node_id: str, now: datetime, settings: WatcherSettings) -> Any:
        """TIMED_OUT jobs of other incarnations that ``node_id`` may take over now (T8; the
        probe of :func:`_probe` has the same condition with bound parameters)."""
        return select(Q.c.job_id).where(
            Q.c.status == JobStatus.TIMED_OUT.value,
            Q.c.picked_by != node_id,
            Q.c.takeovers < settings.max_takeovers,
            Q.c.timed_out_at > now - (settings.timed_out_grace + settings.takeover_window),
            or_(
                Q.c.timed_out_at <= now - settings.timed_out_grace,
                Q.c.picked_by.not_in(_live_nodes()),
            ),
        )

    def _takeover(
        self,
        conn: Connection,
        node_id: str,
        limit: int,
        now: datetime,
        settings: WatcherSettings,
        candidates: Sequence[Row[Any]],
    ) -> list[ClaimedJob]:
        me = self._node_capacity(conn, node_id)
        if me is None:
            return []
        if me.slots is not None:
            limit = min(limit, me.slots - self._held(conn, node_id, OWNED))
        if limit <= 0:
            return []
        rows = [
            r
            for r in self._relock(conn, candidates)
            if takeover_eligible(
                _liveness(r), now, settings, owner_alive=bool(r.owner_alive), taker=node_id
            )
        ][:limit]
        if not rows:
            return []
        check_transition(JobStatus.TIMED_OUT, JobStatus.RUNNING)
        restart = {r.job_id for r in rows if r.takeover_policy == TakeoverPolicy.RESTART.value}
        conn.execute(
            update(Q)
            .where(
                Q.c.job_id == bindparam("b_id"),
                Q.c.status == JobStatus.TIMED_OUT.value,
                Q.c.epoch == bindparam("b_epoch"),
            )
            .values(
                status=JobStatus.RUNNING.value,
                picked_by=node_id,
                picked_at=now,
                epoch=Q.c.epoch + 1,
                takeovers=Q.c.takeovers + 1,
                timed_out_at=None,
                attempts=bindparam("b_attempts"),
            ),
            [
                {
                    "b_id": r.job_id,
                    "b_epoch": r.epoch,
                    "b_attempts": r.attempts + (r.job_id in restart),
                }
                for r in rows
            ],
        )
        end_attempts(conn, rows, ABANDONED, now)  # as read: attempts and epoch before the update
        if restart:
            # RESTART: the stalled attempt counted as failed, and the new run starts from scratch
            conn.execute(
                update(J)
                .where(J.c.job_id.in_(list(restart)))
                .values(
                    checkpoint_step=None,
                    checkpoint_data=None,
                    checkpoint_epoch=None,
                    checkpoint_at=None,
                )
            )
            for r in rows:
                if r.job_id in restart:
                    r.attempts += 1
        return self._claimed(conn, rows, now, takeover=True)

    def _claimed(
        self, conn: Connection, rows: Sequence[Any], now: datetime, *, takeover: bool
    ) -> list[ClaimedJob]:
        """The jobs of ``rows``; a takeover's rows were read before its epoch + 1."""
        ids = [r.job_id for r in rows]
        definitions = {d.job_id: d for d in conn.execute(DEFINITIONS, {"ids": ids})}
        return [
            claimed_job(
                r,
                definitions[r.job_id],
                now,
                epoch=r.epoch + 1 if takeover else r.epoch,
                takeovers=r.takeovers + 1 if takeover else r.takeovers,
            )
            for r in rows
        ]

    def reserve(
        self,
        node_id: str,
        limit: int,
        *,
        now: datetime,
        boost_interval: timedelta,
        node_tags: frozenset[str] = frozenset(),
    ) -> list[ClaimedJob]:
        """T2: reserve up to ``limit`` due PENDING jobs as QUEUED for ``node_id`` (epoch + 1),
        in claim order, never beyond the node's registered prefetch. Start them with
        :meth:`start_reserved`; the watcher revokes what waits longer than ``queued_stall``."""
        if limit <= 0:
            return []
        probe = select(Q.c.job_id).where(
            Q.c.status == JobStatus.PENDING.value, Q.c.scheduled_time <= now
        )
        if self._run(lambda conn: conn.execute(probe.limit(1)).first(), write=False) is None:
            return []
        return self._run(
            lambda conn: self._reserve(conn, node_id, limit, now, boost_interval, node_tags)
        )

    def _reserve(
        self,
        conn: Connection,
        node_id: str,
        limit: int,
        now: datetime,
        boost: timedelta,
        node_tags: frozenset[str],
    ) -> list[ClaimedJob]:
        me = self._node_capacity(conn, node_id)
        if me is None:
            return []
        if me.prefetch is not None:
            limit = min(limit, me.prefetch - self._held(conn, node_id, [JobStatus.QUEUED.value]))
        if limit <= 0:
            return []
        rows = list(conn.execute(self._candidates(now, limit, sorted(node_tags))).all())
        rows.sort(
            key=lambda r: claim_order_key(r.priority, r.scheduled_time, str(r.job_id), now, boost)
        )
        if self.dialect.skip_locked and rows:
            locked = set(
                conn.execute(
                    self.dialect.lock_for_claim(
                        select(Q.c.job_id).where(
                            Q.c.job_id.in_([r.job_id for r in rows]),
                            Q.c.status == JobStatus.PENDING.value,
                        )
                    )
                ).scalars()
            )
            rows = [r for r in rows if r.job_id in locked]
        chosen = rows[:limit]
        if not chosen:
            return []
        check_transition(JobStatus.PENDING, JobStatus.QUEUED)
        ids = [r.job_id for r in chosen]
        conn.execute(
            update(Q)
            .where(Q.c.job_id.in_(ids), Q.c.status == JobStatus.PENDING.value)
            .values(
                status=JobStatus.QUEUED.value,
                picked_by=node_id,
                picked_at=now,
                epoch=Q.c.epoch + 1,
            )
        )
        full = list(conn.execute(select(*self._liveness_cols()).where(Q.c.job_id.in_(ids))))
        order = {jid: i for i, jid in enumerate(ids)}
        full.sort(key=lambda r: order[r.job_id])
        return self._claimed(conn, full, now, takeover=False)

    def start_reserved(self, node_id: str, job_id: uuid.UUID, epoch: int, *, now: datetime) -> bool:
        """T3: QUEUED -> RUNNING for the node that reserved it (same epoch) and open its
        attempt row; False if the reservation was revoked (queue stall, cancel)."""
        probe = _Reserved(job_id, epoch)
        return bool(self._run(lambda conn: self._start_reserved(conn, node_id, [probe], now)))

    def _start_reserved(
        self, conn: Connection, node_id: str, jobs: Sequence[Any], now: datetime
    ) -> list[Any]:
        """T3 for several reservations at once; returns those that started (the others were
        revoked), each with ``claimed_at`` set to ``now``."""
        if not jobs:
            return []
        check_transition(JobStatus.QUEUED, JobStatus.RUNNING)
        epochs = {job.job_id: job.epoch for job in jobs}
        rows = conn.execute(
            self.dialect.lock_rows(
                select(Q.c.job_id, Q.c.epoch, Q.c.attempts).where(
                    Q.c.job_id.in_(list(epochs)),
                    Q.c.picked_by == node_id,
                    Q.c.status == JobStatus.QUEUED.value,
                )
            )
        ).all()
        held = {r.job_id: r for r in rows if r.epoch == epochs[r.job_id]}
        if not held:
            return []
        conn.execute(
            update(Q)
            .where(Q.c.job_id.in_(list(held)), Q.c.status == JobStatus.QUEUED.value)
            .values(status=JobStatus.RUNNING.value, picked_at=now, start_by=None)
        )
        return [_started(job, now) for job in jobs if job.job_id in held]

    # ------------------------------------------------------------------ progress (fenced)
    def record_progress(
        self,
        node_id: str,
        job_id: uuid.UUID,
        epoch: int,
        *,
        now: datetime,
        step: int | None = None,
        data: Any = None,
    ) -> bool:
        """T5 / T7: the owner reports progress (with a checkpoint when ``step`` is given).

        One conditional update fenced by job id + epoch + owner + status (RUNNING or TIMED_OUT)
        and the owner's node not being DEAD; a TIMED_OUT job is revived (same epoch). Returns
        whether it was revived.

        :raises FencedOut: the node no longer owns the job; nothing was written.
        :raises ValueError: the checkpoint step went backwards in this epoch, or the data is not
            JSON.
        """

        def work(conn: Connection) -> bool:
            guard = and_(
                Q.c.job_id == job_id,
                Q.c.epoch == epoch,
                Q.c.picked_by == node_id,
                Q.c.status.in_(OWNED),
                Q.c.picked_by.in_(
                    select(NODE.c.node_id).where(
                        NODE.c.node_id == node_id, NODE.c.state != NodeState.DEAD.value
                    )
                ),
            )
            before = conn.execute(select(Q.c.status).where(guard)).scalar()
            changed = conn.execute(
                update(Q)
                .where(guard)
                .values(status=JobStatus.RUNNING.value, timed_out_at=None, last_progress_at=now)
            ).rowcount
            if not changed:
                raise FencedOut(job_id, epoch, node_id)
            if step is not None:
                previous = self._checkpoint(conn, job_id)
                text = check_checkpoint(previous, epoch, step, data)
                conn.execute(
                    update(J)
                    .where(J.c.job_id == job_id)
                    .values(
                        checkpoint_step=step,
                        checkpoint_data=text,
                        checkpoint_epoch=epoch,
                        checkpoint_at=now,
                    )
                )
            return before == JobStatus.TIMED_OUT.value

        return self._run(work)

    @staticmethod
    def _checkpoint(conn: Connection, job_id: uuid.UUID) -> Checkpoint | None:
        row = conn.execute(
            select(
                J.c.checkpoint_step, J.c.checkpoint_data, J.c.checkpoint_epoch, J.c.checkpoint_at
            ).where(J.c.job_id == job_id)
        ).first()
        if row is None or row.checkpoint_step is None:
            return None
        return Checkpoint(
            step=row.checkpoint_step,
            data=json.loads(row.checkpoint_data) if row.checkpoint_data is not None else None,
            epoch=row.checkpoint_epoch,
            at=row.checkpoint_at,
        )

    def last_checkpoint(self, job_id: uuid.UUID) -> Checkpoint | None:
        """The last checkpoint any run of the job wrote (None: none yet)."""
        return self._run(lambda conn: self._checkpoint(conn, job_id), write=False)

    # ------------------------------------------------------------------ drain
    def hand_back(
        self,
        node_id: str,
        job_ids: Sequence[uuid.UUID] | None,
        *,
        now: datetime,
        settings: WatcherSettings,
    ) -> tuple[int, int]:
        """Drain: hand this node's jobs back (all of them when ``job_ids`` is None).

        QUEUED -> PENDING (claimable at once); RUNNING / TIMED_OUT -> TIMED_OUT eligible for
        takeover at once (they keep their checkpoint). Returns (queued, running) counts.
        """
        eligible = orphaned_timed_out_at(now, settings)

        def work(conn: Connection) -> tuple[int, int]:
            mine = Q.c.picked_by == node_id
            chunks: list[Any] = (
                [None] if job_ids is None else list(iter_chunks(list(job_ids), CHUNK))
            )
            queued = running = 0
            for chunk in chunks:
                scope = mine if chunk is None else and_(mine, Q.c.job_id.in_(list(chunk)))
                queued += conn.execute(
                    update(Q)
                    .where(scope, Q.c.status == JobStatus.QUEUED.value)
                    .values(
                        status=JobStatus.PENDING.value,
                        picked_by=None,
                        picked_at=None,
                        epoch=Q.c.epoch + 1,
                    )
                ).rowcount
                running += conn.execute(
                    update(Q)
                    .where(scope, Q.c.status == JobStatus.RUNNING.value)
                    .values(status=JobStatus.TIMED_OUT.value, timed_out_at=eligible)
                ).rowcount
                running += conn.execute(
                    update(Q)
                    .where(
                        scope,
                        Q.c.status == JobStatus.TIMED_OUT.value,
                        Q.c.timed_out_at > eligible,
                    )
                    .values(timed_out_at=eligible)
                ).rowcount
            return queued, running

        if job_ids is not None and not job_ids:
            return (0, 0)
        return self._run(work)

    # ------------------------------------------------------------------ reading
    def job_liveness(self, job_ids: Sequence[uuid.UUID] | None = None) -> list[JobLiveness]:
        """The watcher's view of live jobs (all of them, or ``job_ids``), by job id."""

        def work(conn: Connection) -> list[JobLiveness]:
            stmt = select(*self._liveness_cols()).order_by(Q.c.job_id)
            if job_ids is not None:
                stmt = stmt.where(Q.c.job_id.in_(list(job_ids)))
            return [_liveness(r) for r in conn.execute(stmt)]

        if job_ids is not None and not job_ids:
            return []
        return self._run(work, write=False)

    def live_node_ids(self) -> set[str]:
        """Incarnations that are ALIVE or DRAINING."""
        return set(self._run(lambda conn: list(conn.execute(_live_nodes()).scalars()), write=False))


def _liveness(r: Any) -> JobLiveness:
    return JobLiveness(
        job_id=r.job_id,
        status=JobStatus(r.status),
        epoch=r.epoch,
        picked_by=r.picked_by,
        picked_at=r.picked_at,
        last_progress_at=r.last_progress_at,
        timed_out_at=r.timed_out_at,
        takeovers=r.takeovers,
        attempts=r.attempts,
        stall_timeout=None if r.stall_ms is None else timedelta(milliseconds=r.stall_ms),
        takeover_policy=None if r.takeover_policy is None else TakeoverPolicy(r.takeover_policy),
        start_by=r.start_by,
    )


def _node_record(r: Row[Any]) -> NodeRecord:
    return NodeRecord(
        node_id=r.node_id,
        started_at=r.started_at,
        heartbeat_at=r.heartbeat_at,
        state=r.state,
        node_name=r.node_name,
        host=r.host,
        pid=r.pid,
        slots=r.slots,
    )
