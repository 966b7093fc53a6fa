"""A Hypothesis state machine over the real store (SQLite and PostgreSQL) and the engine's
liveness code: several nodes, a FakeClock, crashes, pauses, restarts, drains and zombie writes.

Nodes are real (unstarted) :class:`~ratchet.engine.worker.Worker` objects: acquisition,
heartbeats, watcher passes, incarnation restarts, progress channels, drains and outcome writes
all go through the engine and the store; only the jobs' execution is simulated (a *handle* per
attempt a node believes it runs). A crash drops a node's handles (the process is gone); a pause
keeps them, and they become zombies if the node was declared dead meanwhile.

Checked (the invariants of docs/clustering.md): every watcher pass against the pure rules of
:mod:`ratchet.domain.watcher` (no premature deadline, exactly the due transitions, idempotent
when repeated at the same instant), takeovers only when eligible and before new work, fencing
(a write is accepted exactly when its owner, epoch and status match, and a refused one changes
nothing), a single effective owner, epochs that only grow, legal transitions only, terminal
statuses that absorb, revival only by the owner, back-pressure, the takeover cap, checkpoint
continuity, cancel wins, and at teardown: the cluster run to quiescence leaves every job terminal.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import liveness_jobs as lj
import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import func, inspect, select

from ratchet import JobStatus, Ratchet
from ratchet.config import WorkerConfig
from ratchet.domain.errors import FencedOut
from ratchet.domain.lifecycle import TERMINAL_STATUSES, is_allowed
from ratchet.domain.model import ClaimedJob, Outcome, OutcomeKind
from ratchet.domain.watcher import (
    LIVE_NODE_STATES,
    JobLiveness,
    WatcherAction,
    classify,
    orphaned_timed_out_at,
    takeover_eligible,
)
from ratchet.engine import liveness as engine_liveness
from ratchet.engine.worker import Worker
from ratchet.sql import schema
from ratchet.testing import FakeClock

NODES = ("n0", "n1", "n2")
SLOTS = 2
PREFETCH = 1
CONFIG = WorkerConfig(
    concurrency=SLOTS,
    batch_size=SLOTS,
    prefetch=PREFETCH,
    heartbeat_interval=timedelta(seconds=10),
    orphan_grace=timedelta(seconds=30),  # Dn
    queued_stall=timedelta(seconds=30),  # D_q
    running_stall=timedelta(seconds=60),  # D1
    timed_out_grace=timedelta(seconds=60),  # D2
    takeover_window=timedelta(seconds=120),  # D3
    max_takeovers=2,
    watcher_enabled=False,
)
SETTINGS = CONFIG.watcher_settings()
STALL = timedelta(seconds=45)
LIVE = {s.value for s in LIVE_NODE_STATES}
OWNED = (JobStatus.RUNNING, JobStatus.TIMED_OUT)
J, Q, EXE, NODE = schema.job, schema.job_queue, schema.job_execution, schema.node
_ids = itertools.count()


@dataclass
class Handle:
    """One attempt a node believes it runs."""

    job: ClaimedJob
    node_id: str
    channel: Any
    step: int
    zombie: bool = False


@dataclass
class SimNode:
    name: str
    worker: Worker | None = None
    paused: bool = False
    handles: dict[tuple[uuid.UUID, int], Handle] = field(default_factory=dict)

    @property
    def up(self) -> bool:
        return self.worker is not None

    @property
    def active(self) -> bool:
        return self.worker is not None and not self.paused


@dataclass(frozen=True)
class Row:
    """A job as the invariants see it (one query for all jobs)."""

    status: JobStatus
    epoch: int
    picked_by: str | None
    picked_at: Any
    last_progress_at: Any
    timed_out_at: Any
    takeovers: int
    attempts: int
    stall_ms: int | None
    checkpoint_step: int | None
    checkpoint_epoch: int | None

    def liveness(self, job_id: uuid.UUID) -> JobLiveness:
        return JobLiveness(
            job_id=job_id,
            status=self.status,
            epoch=self.epoch,
            picked_by=self.picked_by,
            picked_at=self.picked_at,
            last_progress_at=self.last_progress_at,
            timed_out_at=self.timed_out_at,
            takeovers=self.takeovers,
            attempts=self.attempts,
            stall_timeout=None if self.stall_ms is None else timedelta(milliseconds=self.stall_ms),
        )


def _key(h: Handle) -> str:
    return f"{h.job.job_id}-{h.job.epoch}-{h.node_id}"


def reset_tables(app: Ratchet) -> None:
    """Empty every table except the migration version (between examples)."""
    store: Any = app.store
    with store.engine.begin() as conn:
        names = set(inspect(conn).get_table_names())
        for table in reversed(schema.metadata.sorted_tables):
            if table.name in names:
                conn.execute(table.delete())


def make_machine(app: Ratchet, clock: FakeClock) -> type[RuleBasedStateMachine]:
    store: Any = app.store

    class WatcherMachine(RuleBasedStateMachine):
        # ------------------------------------------------------------------ setup
        @initialize(
            work=st.lists(st.tuples(st.integers(0, 2), st.booleans()), min_size=2, max_size=6)
        )
        def setup(self, work: list[tuple[int, bool]]) -> None:
            reset_tables(app)
            lj.reset()
            clock.set(FakeClock().now())
            self.nodes = {name: SimNode(name) for name in NODES}
            self.jobs: dict[uuid.UUID, int] = {}  # job -> max_retries
            self.prev: dict[uuid.UUID, Row] = {}
            self.revived: set[tuple[uuid.UUID, int]] = set()
            self.checkpoints: dict[uuid.UUID, tuple[int, int]] = {}  # job -> (step, epoch)
            self.canceled: set[uuid.UUID] = set()
            self.incarnations: list[str] = []
            self.prev_valid = False
            self.fresh: dict[uuid.UUID, Row] | None = None
            for name in NODES:
                self._boot(name)
            for retries, stall in work:  # every run starts with jobs to do
                self._submit(retries, stall, 0, 1)

        def teardown(self) -> None:
            if not hasattr(self, "nodes"):
                return
            try:
                self._run_to_quiescence()
            finally:
                with engine_liveness._LOCAL_LOCK:
                    engine_liveness._LOCAL.difference_update(self.incarnations)

        # ------------------------------------------------------------------ helpers
        def _boot(self, name: str) -> None:
            node_id = f"{name}-{next(_ids)}"
            worker = Worker(app, CONFIG, node_id=node_id)
            assert worker.liveness is not None
            worker.liveness.node_name = name  # one name per simulated machine
            self.nodes[name].worker = worker
            self.nodes[name].paused = False
            self.nodes[name].handles = {}
            self.incarnations.append(node_id)
            self.state()
            worker.liveness.register()  # declares its crashed incarnations DEAD at once
            self.after("register")

        def snapshot(self) -> dict[uuid.UUID, Row]:
            last_epoch = (
                select(func.max(EXE.c.epoch)).where(EXE.c.job_id == J.c.job_id).scalar_subquery()
            )
            END = schema.job_end
            stmt = select(
                J.c.job_id,
                END.c.terminal_status,
                END.c.attempts.label("j_attempts"),
                J.c.stall_timeout_ms,
                J.c.checkpoint_step,
                J.c.checkpoint_epoch,
                Q.c.status,
                Q.c.epoch,
                Q.c.picked_by,
                Q.c.picked_at,
                Q.c.last_progress_at,
                Q.c.timed_out_at,
                Q.c.takeovers,
                Q.c.attempts,
                last_epoch.label("last_epoch"),
            ).select_from(schema.job_with_state)
            rows: dict[uuid.UUID, Row] = {}
            with store.read_engine.connect() as conn:
                for r in conn.execute(stmt):
                    live = r.status is not None
                    rows[r.job_id] = Row(
                        status=JobStatus(r.status if live else r.terminal_status),
                        epoch=r.epoch if live else (r.last_epoch or 0),
                        picked_by=r.picked_by,
                        picked_at=r.picked_at,
                        last_progress_at=r.last_progress_at,
                        timed_out_at=r.timed_out_at,
                        takeovers=r.takeovers if live else 0,
                        attempts=r.attempts if live else r.j_attempts,
                        stall_ms=r.stall_timeout_ms,
                        checkpoint_step=r.checkpoint_step,
                        checkpoint_epoch=r.checkpoint_epoch,
                    )
            return rows

        def node_states(self) -> dict[str, Any]:
            with store.read_engine.connect() as conn:
                return {r.node_id: r for r in conn.execute(select(NODE))}

        def handles(self) -> Iterator[tuple[SimNode, Handle]]:
            for node in self.nodes.values():
                for h in node.handles.values():
                    yield node, h

        def state(self) -> dict[uuid.UUID, Row]:
            """The jobs now (every write is followed by a snapshot, see :meth:`after`)."""
            if not self.prev_valid:
                self.after("state")
            return self.prev

        def after(self, why: str) -> dict[uuid.UUID, Row]:
            """Snapshot after a write, check every change since the previous snapshot, and make
            it the state the next write starts from (the invariant reuses it)."""
            new = self.snapshot()
            if self.prev_valid:
                self.moved(self.prev, new, why)
            self.prev, self.prev_valid, self.fresh = new, True, new
            self.revived.clear()
            return new

        def moved(self, before: dict[uuid.UUID, Row], now: dict[uuid.UUID, Row], why: str) -> None:
            """Legal transitions only, terminals absorb, epochs grow, revival only by the owner,
            checkpoints never go back within an epoch."""
            for job_id, row in now.items():
                old = before.get(job_id)
                if old is None:
                    continue
                if old.status is not row.status:
                    assert is_allowed(old.status, row.status), (why, old.status, row.status)
                    assert old.status not in TERMINAL_STATUSES, (why, old.status, row.status)
                if row.status not in TERMINAL_STATUSES:  # a terminal row keeps no epoch
                    assert row.epoch >= old.epoch, (why, "epochs only grow")
                if (
                    old.status is JobStatus.TIMED_OUT
                    and row.status is JobStatus.RUNNING
                    and old.epoch == row.epoch
                ):
                    assert (job_id, row.epoch) in self.revived, (why, "revived by a non-owner")
                if old.checkpoint_step is not None:
                    assert row.checkpoint_epoch >= old.checkpoint_epoch
                    if row.checkpoint_epoch == old.checkpoint_epoch:
                        assert row.checkpoint_step >= old.checkpoint_step

        def drop(self, node: SimNode, handle: Handle) -> None:
            node.handles.pop((handle.job.job_id, handle.job.epoch), None)
            assert node.worker is not None
            node.worker.slots.release(handle.job)

        # ------------------------------------------------------------------ submissions
        @rule(
            n=st.integers(1, 3),
            retries=st.integers(0, 2),
            stall=st.booleans(),
            delay=st.sampled_from([0, 0, 0, 40]),
        )
        def submit(self, n: int, retries: int, stall: bool, delay: int) -> None:
            self._submit(retries, stall, delay, n)

        def _submit(self, retries: int, stall: bool, delay: int, n: int) -> None:
            for i in range(n):
                builder = app.schedule(timedelta(seconds=delay), lj.quick, i).with_max_retries(
                    retries
                )
                if stall:
                    builder = builder.with_stall_timeout(STALL)
                self.jobs[builder.submit().id] = retries
            self.after("submit")

        # ------------------------------------------------------------------ time and liveness
        @rule(
            seconds=st.sampled_from(
                [1, 5, 14, 15, 29, 30, 44, 45, 59, 60, 61, 119, 120, 121, 180, 181, 240]
            ),
            beat=st.booleans(),
        )
        def advance(self, seconds: int, beat: bool) -> None:
            """Time passes; unless the database is stalled (``beat`` False) the live nodes
            heartbeat every 10 s meanwhile, like their heartbeat threads would."""
            left = seconds
            while left > 0:
                step = min(left, 10)
                clock.advance(step)
                left -= step
                if beat:
                    for node in self.nodes.values():
                        if node.active:
                            self._beat(node)

        @precondition(lambda self: any(n.active for n in self.nodes.values()))
        @rule(checkpoint=st.booleans(), watch=st.booleans())
        def work(self, checkpoint: bool, watch: bool) -> None:
            """Every live node runs a watcher pass (if ``watch``), takes work, and reports
            progress on what it runs."""
            for node in list(self.nodes.values()):
                if not node.active:
                    continue
                if watch:
                    self._watch(node, twice=False)
                self._acquire(node)
                for h in sorted(node.handles.values(), key=_key):
                    if node.active:
                        self._progress(node, h, checkpoint)

        @precondition(lambda self: any(n.active for n in self.nodes.values()))
        @rule(data=st.data())
        def heartbeat(self, data: st.DataObject) -> None:
            node = data.draw(st.sampled_from([n for n in self.nodes.values() if n.active]))
            self._beat(node)

        def _beat(self, node: SimNode) -> None:
            worker = node.worker
            assert worker is not None and worker.liveness is not None
            old = worker.node_id
            alive = worker.liveness.beat()  # writes no job
            if not alive and worker.liveness.state.value == "ALIVE":
                assert worker.node_id != old, "a node found DEAD continues as a new incarnation"
                event("node restarted its incarnation")
                self.incarnations.append(worker.node_id)
                for h in node.handles.values():
                    h.zombie = True  # its runs are fenced out from now on

        @precondition(lambda self: any(n.active for n in self.nodes.values()))
        @rule(data=st.data(), twice=st.booleans())
        def watcher_pass(self, data: st.DataObject, twice: bool) -> None:
            node = data.draw(st.sampled_from([n for n in self.nodes.values() if n.active]))
            self._watch(node, twice)

        def _watch(self, node: SimNode, twice: bool) -> None:
            worker = node.worker
            assert worker is not None and worker.liveness is not None
            now = clock.now()
            before = self.state()
            nodes_before = self.node_states()
            judging = worker.liveness.judging()
            report = worker.liveness.watch_once()
            after = self.after("write")
            # Nodes: exactly the live ones silent for Dn die.
            expected_dead = {
                n
                for n, r in nodes_before.items()
                if judging and r.state in LIVE and r.heartbeat_at <= now - SETTINGS.dead_after
            }
            assert set(report.dead_nodes) == expected_dead
            alive = {n for n, r in nodes_before.items() if r.state in LIVE} - expected_dead
            # Jobs: exactly what the pure rules say, no more and no earlier.
            counts = dict.fromkeys(WatcherAction, 0)
            for job_id, old in before.items():
                new = after[job_id]
                if old.status in TERMINAL_STATUSES:
                    assert new == old
                    continue
                action = classify(
                    old.liveness(job_id), now, SETTINGS, owner_alive=old.picked_by in alive
                )
                if action is WatcherAction.STALL and not judging:
                    action = WatcherAction.NONE  # its own silence: it judges nobody's
                counts[action] += 1
                if action is WatcherAction.NONE:
                    assert (new.status, new.epoch, new.picked_by, new.timed_out_at) == (
                        old.status,
                        old.epoch,
                        old.picked_by,
                        old.timed_out_at,
                    ), ("premature or spurious watcher move", old, new)
                elif action is WatcherAction.REVOKE:
                    assert (new.status, new.picked_by, new.epoch) == (
                        JobStatus.PENDING,
                        None,
                        old.epoch + 1,
                    ), "T4: the revoke fences the reservation out (epoch + 1)"
                elif action is WatcherAction.STALL:
                    assert (new.status, new.timed_out_at, new.epoch) == (
                        JobStatus.TIMED_OUT,
                        now,
                        old.epoch,
                    )
                elif action is WatcherAction.ORPHAN:
                    assert (new.status, new.timed_out_at, new.epoch) == (
                        JobStatus.TIMED_OUT,
                        orphaned_timed_out_at(now, SETTINGS),
                        old.epoch,
                    )
                else:  # EXPIRE through the retry policy
                    retry = old.attempts + 1 <= self.jobs[job_id]
                    assert new.status is (JobStatus.PENDING if retry else JobStatus.FAILED)
                    assert new.attempts == old.attempts + 1
                    if retry:
                        assert new.epoch == old.epoch + 1, "T9: the forced end bumps the epoch"
            for action, n in counts.items():
                if n and action is not WatcherAction.NONE:
                    event(f"watcher: {action.value}")
            if report.dead_nodes:
                event("watcher: node declared dead")
            assert report.revoked == counts[WatcherAction.REVOKE]
            assert report.stalled == counts[WatcherAction.STALL]
            assert report.orphaned == counts[WatcherAction.ORPHAN]
            assert len(report.expired) == counts[WatcherAction.EXPIRE]
            if twice:  # racing watchers at the same instant: the second pass changes nothing
                again = worker.liveness.watch_once()
                assert not again.changed and again.dead_nodes == ()
                assert self.snapshot() == after

        # ------------------------------------------------------------------ acquiring work
        @precondition(lambda self: any(n.active for n in self.nodes.values()))
        @rule(data=st.data())
        def acquire(self, data: st.DataObject) -> None:
            node = data.draw(st.sampled_from([n for n in self.nodes.values() if n.active]))
            self._acquire(node)

        def _acquire(self, node: SimNode) -> None:
            worker = node.worker
            assert worker is not None and worker.liveness is not None
            now = clock.now()
            before = self.state()
            states = self.node_states()
            me = states.get(worker.node_id)
            free = worker.free_slots()
            local = worker.slots.local_job_ids()
            eligible = {
                job_id
                for job_id, row in before.items()
                if job_id not in local
                and takeover_eligible(
                    row.liveness(job_id),
                    now,
                    SETTINGS,
                    owner_alive=row.picked_by in states and states[row.picked_by].state in LIVE,
                    taker=worker.node_id,
                )
            }
            held = sum(
                1 for r in before.values() if r.picked_by == worker.node_id and r.status in OWNED
            )
            jobs = worker.poll_once()
            after = self.after("write")
            taken = [j for j in jobs if j.takeovers > before[j.job_id].takeovers]
            fresh = [j for j in jobs if j not in taken]
            if taken:
                event("takeover")
            for job in taken:
                assert job.job_id in eligible, "takeover of a job that was not eligible"
                assert job.epoch == before[job.job_id].epoch + 1
                assert job.takeovers <= SETTINGS.max_takeovers
            for job in fresh:
                old = before[job.job_id]
                if old.status is JobStatus.PENDING:  # a claim grants a new epoch
                    assert job.epoch == old.epoch + 1, "a claim bumps the epoch"
                else:  # starting its own reservation: the epoch the reservation granted
                    assert (old.status, old.picked_by, job.epoch) == (
                        JobStatus.QUEUED,
                        worker.node_id,
                        old.epoch,
                    )
            if me is None or me.state != "ALIVE":
                assert jobs == []
            room = min(free, SLOTS - held) if me is not None else 0
            if fresh:  # new work only once every eligible takeover that fits was made
                assert len(taken) == min(room, len(eligible)), "new work before takeovers"
            for job in jobs:
                new = after[job.job_id]
                assert (new.status, new.picked_by, new.epoch) == (
                    JobStatus.RUNNING,
                    worker.node_id,
                    job.epoch,
                )
                channel = worker.liveness.channel(job)
                checkpoint = channel.last_checkpoint()
                expected = self.checkpoints.get(job.job_id)
                got = None if checkpoint is None else (checkpoint.step, checkpoint.epoch)
                assert got == expected, "a run resumes from the last accepted checkpoint"
                node.handles[(job.job_id, job.epoch)] = Handle(
                    job, worker.node_id, channel, checkpoint.step if checkpoint else 0
                )

        # ------------------------------------------------------------------ the runs' writes
        def _expect_accepted(self, h: Handle, row: Row, *, progress: bool) -> bool:
            if row.picked_by != h.node_id or row.epoch != h.job.epoch or row.status not in OWNED:
                return False
            if progress:
                state = self.node_states().get(h.node_id)
                return state is not None and state.state != "DEAD"
            return True

        @precondition(lambda self: any(n.active and n.handles for n in self.nodes.values()))
        @rule(data=st.data(), checkpoint=st.booleans())
        def progress(self, data: st.DataObject, checkpoint: bool) -> None:
            node = data.draw(
                st.sampled_from([n for n in self.nodes.values() if n.active and n.handles])
            )
            h = data.draw(st.sampled_from(sorted(node.handles.values(), key=_key)))
            self._progress(node, h, checkpoint)

        def _progress(self, node: SimNode, h: Handle, checkpoint: bool) -> None:
            before = self.state()
            row = before[h.job.job_id]
            expected = self._expect_accepted(h, row, progress=True)
            try:
                if checkpoint:
                    h.channel.checkpoint(h.step + 1, {"step": h.step + 1, "epoch": h.job.epoch})
                else:
                    h.channel.touch()
                accepted = True
            except FencedOut:
                accepted = False
            if accepted and row.status is JobStatus.TIMED_OUT:
                event("owner revived a TIMED_OUT job")
                self.revived.add((h.job.job_id, h.job.epoch))  # the owner's own progress
            after = self.after("write")
            assert accepted == expected, (row, h.node_id, h.job.epoch)
            if accepted:
                new = after[h.job.job_id]
                assert (new.status, new.epoch, new.timed_out_at, new.last_progress_at) == (
                    JobStatus.RUNNING,
                    h.job.epoch,
                    None,
                    clock.now(),
                )
                if checkpoint:
                    h.step += 1
                    self.checkpoints[h.job.job_id] = (h.step, h.job.epoch)
            else:
                event("progress fenced out")
                assert after == before, "a refused write changed something"
                self.drop(node, h)  # fenced out: the run stops, its slot is free

        @precondition(lambda self: any(n.active and n.handles for n in self.nodes.values()))
        @rule(data=st.data(), succeed=st.booleans())
        def finish(self, data: st.DataObject, succeed: bool) -> None:
            node = data.draw(
                st.sampled_from([n for n in self.nodes.values() if n.active and n.handles])
            )
            h = data.draw(st.sampled_from(sorted(node.handles.values(), key=_key)))
            worker = node.worker
            assert worker is not None
            before = self.state()
            row = before[h.job.job_id]
            now = clock.now()
            retry = h.job.attempt <= h.job.max_retries
            kind = (
                OutcomeKind.SUCCEEDED
                if succeed
                else (OutcomeKind.RETRY if retry else OutcomeKind.DEAD)
            )
            result = Outcome(
                h.job.job_id,
                h.job.epoch,
                h.job.attempt,
                kind,
                now,
                now,
                result="1" if succeed else None,
                error=None if succeed else "boom",
                retry_at=now if kind is OutcomeKind.RETRY else None,
            )
            # The worker writes under its current incarnation: a zombie of an older one is
            # refused even if its job was not taken over yet.
            writer_ok = worker.node_id == h.node_id
            expected = writer_ok and self._expect_accepted(h, row, progress=False)
            fenced = worker.record([result])
            after = self.after("write")
            assert (fenced == []) == expected
            if expected:
                new = after[h.job.job_id]
                target = {
                    OutcomeKind.SUCCEEDED: JobStatus.SUCCEEDED,
                    OutcomeKind.RETRY: JobStatus.PENDING,
                    OutcomeKind.DEAD: JobStatus.FAILED,
                }[kind]
                assert new.status is target
            else:
                assert after == before, "a refused outcome changed something"
            self.drop(node, h)

        @precondition(lambda self: any(n.active and n.handles for n in self.nodes.values()))
        @rule(data=st.data())
        def zombie_write(self, data: st.DataObject) -> None:
            zombies = [
                (n, h)
                for n, h in self.handles()
                if n.active and (h.zombie or h.node_id != n.worker.node_id)  # type: ignore[union-attr]
            ]
            if not zombies:
                return
            node, h = data.draw(st.sampled_from(zombies))
            before = self.state()
            with pytest.raises(FencedOut):
                h.channel.checkpoint(h.step + 1, {"zombie": True})
            assert self.after("write") == before, "a zombie's write changed something"
            self.drop(node, h)

        # ------------------------------------------------------------------ disruptions
        @rule(
            data=st.data(),
            kind=st.sampled_from(["resume", "restart", "pause", "crash", "drain", "cancel"]),
        )
        def disrupt(self, data: st.DataObject, kind: str) -> None:
            """One rule for the rare events, so that work and time get most of the steps."""
            getattr(self, f"_{kind}")(data)

        def _cancel(self, data: st.DataObject) -> None:
            if not self.jobs:
                return
            job_id = data.draw(st.sampled_from(sorted(self.jobs, key=str)))
            before = self.state()
            ok = store.cancel_job(job_id, now=clock.now()).value
            assert ok == (before[job_id].status not in TERMINAL_STATUSES)
            if ok:
                self.canceled.add(job_id)
                assert self.after("write")[job_id].status is JobStatus.CANCELED

        # ------------------------------------------------------------------ failures
        def _crash(self, data: st.DataObject) -> None:
            if not any(n.up for n in self.nodes.values()):
                return
            node = data.draw(st.sampled_from([n for n in self.nodes.values() if n.up]))
            assert node.worker is not None
            with engine_liveness._LOCAL_LOCK:  # the process is gone
                engine_liveness._LOCAL.discard(node.worker.node_id)
            node.worker = None
            node.handles = {}
            node.paused = False

        def _restart(self, data: st.DataObject) -> None:
            if all(n.up for n in self.nodes.values()):
                return
            node = data.draw(st.sampled_from([n for n in self.nodes.values() if not n.up]))
            self._boot(node.name)

        def _pause(self, data: st.DataObject) -> None:
            if not any(n.active for n in self.nodes.values()):
                return
            node = data.draw(st.sampled_from([n for n in self.nodes.values() if n.active]))
            node.paused = True

        def _resume(self, data: st.DataObject) -> None:
            if not any(n.up and n.paused for n in self.nodes.values()):
                return
            node = data.draw(st.sampled_from([n for n in self.nodes.values() if n.paused]))
            node.paused = False
            self._beat(node)  # the first thing a resumed node does

        def _drain(self, data: st.DataObject) -> None:
            if not any(n.active for n in self.nodes.values()):
                return
            node = data.draw(st.sampled_from([n for n in self.nodes.values() if n.active]))
            worker = node.worker
            assert worker is not None and worker.liveness is not None
            before = self.state()
            worker.liveness.begin_drain()
            worker.liveness.hand_back()
            store.deregister_node(worker.node_id)
            after = self.after("write")
            for job_id, old in before.items():
                if old.picked_by == worker.node_id and old.status is JobStatus.QUEUED:
                    assert (after[job_id].status, after[job_id].picked_by, after[job_id].epoch) == (
                        JobStatus.PENDING,
                        None,
                        old.epoch + 1,
                    )
                if old.picked_by == worker.node_id and old.status in OWNED:
                    new = after[job_id]
                    assert new.status is JobStatus.TIMED_OUT
                    assert new.timed_out_at <= orphaned_timed_out_at(clock.now(), SETTINGS)
            with engine_liveness._LOCAL_LOCK:
                engine_liveness._LOCAL.discard(worker.node_id)
            node.worker = None
            node.handles = {}

        # ------------------------------------------------------------------ invariants
        @invariant()
        def holds(self) -> None:
            if not hasattr(self, "nodes"):
                return
            now = self.fresh if self.fresh is not None else self.after("step")
            self.fresh = None
            for job_id, row in now.items():
                # Field consistency.
                if row.status is JobStatus.RUNNING:
                    assert row.picked_by is not None and row.timed_out_at is None
                if row.status is JobStatus.TIMED_OUT:
                    assert row.picked_by is not None and row.timed_out_at is not None
                if row.status is JobStatus.PENDING:
                    assert row.picked_by is None
                if row.status is JobStatus.QUEUED:
                    assert row.picked_by is not None
                assert row.takeovers <= SETTINGS.max_takeovers
                assert row.attempts <= self.jobs[job_id] + 1
                if job_id in self.canceled:
                    assert row.status is JobStatus.CANCELED, "cancel wins"
                # A single effective owner: exactly the handle of (owner, epoch) can write.
                owners = [
                    h
                    for _, h in self.handles()
                    if h.job.job_id == job_id
                    and h.job.epoch == row.epoch
                    and h.node_id == row.picked_by
                ]
                assert len(owners) <= 1
                assert all(
                    h.job.epoch <= row.epoch for _, h in self.handles() if h.job.job_id == job_id
                )
            # Back-pressure.
            for node in self.nodes.values():
                if node.worker is None:
                    continue
                mine = [r for r in now.values() if r.picked_by == node.worker.node_id]
                assert sum(1 for r in mine if r.status in OWNED) <= SLOTS
                assert sum(1 for r in mine if r.status is JobStatus.QUEUED) <= PREFETCH
                assert len(node.handles) <= SLOTS

        # ------------------------------------------------------------------ teardown
        def _run_to_quiescence(self) -> None:
            """Heal everything, keep the nodes alive and working, and advance past every
            deadline until nothing changes: no job may be left outside a terminal status."""
            self.prev_valid = False
            for node in self.nodes.values():
                if not node.up:
                    self._boot(node.name)
                if node.paused:
                    node.paused = False
            span = (
                SETTINGS.queued_stall
                + SETTINGS.running_stall
                + SETTINGS.timed_out_grace
                + SETTINGS.takeover_window
                + SETTINGS.dead_after
            )
            for _ in range(len(self.jobs) + 10):  # a round finishes at least one job
                if all(r.status in TERMINAL_STATUSES for r in self.snapshot().values()):
                    break
                clock.advance(span)
                for node in self.nodes.values():
                    self._beat(node)
                for node in self.nodes.values():
                    assert node.worker is not None and node.worker.liveness is not None
                    node.worker.liveness.watch_once()
                    node.worker.poll_once()
                    now = clock.now()
                    for job in node.worker.slots.occupying_jobs():  # every run finishes
                        done = Outcome(
                            job.job_id,
                            job.epoch,
                            job.attempt,
                            OutcomeKind.SUCCEEDED,
                            now,
                            now,
                            result="1",
                        )
                        node.worker.record([done])
                        node.worker.slots.release(job)
                    node.handles = {}
            stuck = {
                str(job_id): row.status
                for job_id, row in self.snapshot().items()
                if row.status not in TERMINAL_STATUSES
            }
            assert stuck == {}, (
                f"jobs stuck outside a terminal status: {stuck}",
                self.snapshot(),
                {k: (v.state, v.heartbeat_at) for k, v in self.node_states().items()},
                {n.name: (n.worker.node_id if n.worker else None) for n in self.nodes.values()},
            )
            for node in self.nodes.values():
                if node.worker is not None and node.worker.liveness is not None:
                    node.worker.liveness.stop()

    return WatcherMachine


BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres15", marks=pytest.mark.postgres),
]


@pytest.fixture(params=BACKENDS)
def backend_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    if request.param == "sqlite":
        return sqlite_url
    return str(request.getfixturevalue("postgres_store_url"))


def test_watcher_state_machine(backend_url: str) -> None:
    clock = FakeClock()
    app = Ratchet(backend_url, allowed_modules=["liveness_jobs"], clock=clock)
    try:
        machine = make_machine(app, clock)
        run_state_machine_as_test(machine, settings=settings(settings(), stateful_step_count=40))
    finally:
        app.close()
