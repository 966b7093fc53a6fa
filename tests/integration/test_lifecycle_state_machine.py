"""A Hypothesis state machine drives the real scheduler and SQLite store through the job lifecycle.

What it models. Jobs are submitted through the public API (succeeding or failing targets,
priorities, delays, retry budgets); two nodes, ``n1`` and ``n2``, each a real but *unstarted*
:class:`~ratchet.engine.worker.Worker` (one per node incarnation), acquire them through the
engine's liveness (``acquire_work``: takeovers first, then claims) and run acquired attempts with
``Worker.execute`` / ``Worker.record`` (gates, circuit breaker, retry decision and the fenced
outcome write all run for real, on the test's thread). Operators cancel, pause, resume, retry
dead-lettered jobs and replace live ones; a node drains (DRAINING, ``hand_back``: its RUNNING jobs
become TIMED_OUT and eligible for takeover at once; its row is removed) and comes back as a new
incarnation; the clock moves forward and jumps back; ``n2`` disappears: silent past the
deadline while ``n1`` heart-beats, ``n1``'s watcher pass declares it dead, its RUNNING jobs become
TIMED_OUT, ``n1`` takes over what its slots allow and ``n2`` comes back as a new incarnation;
watcher passes fail the TIMED_OUT jobs nobody took over within the window through the retry
policy (T9); a node whose attempt was ended or taken over by someone else writes as a zombie
with its stale epoch.

Checked after every step: only legal transitions happen; no job is lost and none appears that
was not submitted; terminal statuses absorb (except an operator's retry of a FAILED job);
attempts never exceed ``max_retries + 1``; a live job's epoch never decreases, a claim grants a
newer one and a takeover the next one; a RUNNING job is owned by the incarnation the model says
and a TIMED_OUT one by the incarnation that handed it back or died; a takeover happens only when
eligible and before any new claim; a watcher pass fails exactly the TIMED_OUT jobs the pure rules
say are due; a stale epoch's write is refused and changes nothing; every timestamp the engine
stored comes from the FakeClock; no thread was started.

How nondeterminism is excluded (each run of a choice sequence must behave identically, or
Hypothesis reports ``Flaky`` / inconsistent data generation on replay):

- **Time** only comes from one :class:`~ratchet.testing.FakeClock` per example, given to the app
  (the store, the breakers, the watchdog and the retry decisions read it). It starts months away
  from the wall clock, so the timestamp invariant catches any wall-clock read that reaches data.
- **No threads.** The workers are never started: no poller, writer, heartbeat, liveness or
  watchdog thread and no periodic task (watcher, signal scan, recurring materializer) runs; the
  watcher task is off in the config. Registrations, heartbeats, watcher passes and attempts run
  synchronously on the test's thread, when a rule says so. An invariant checks that no thread
  appears.
- **No random ids in strategies.** Job ids (UUIDv7: wall-clock milliseconds and random bits)
  are never sorted or sampled by value: rules draw *indexes* into lists kept in submission /
  claim order, so a replay picks the same job whatever ids it got. Node incarnations get
  numbered ids (``n2``, ``n2.1``, ...), not the engine's random ones.
- **Nothing leaks between examples.** Every example gets a fresh copy of a migrated template
  database, a fresh app, clock and workers, and closes them (and deletes the files) at teardown.

Why it was marked ``slow`` (flaky, 300 s timeouts). Not a nondeterministic engine: two runs of
the same examples in one process give identical per-step store states. Three things combined:

1. A model bug, failing deterministically: after a backwards clock jump, ``n2``'s last heartbeat
   could be later than its claims, so moving the clock "grace + 1 s past the latest claim" did
   not make ``n2`` silent and nothing was recovered. ``claimant_disappears`` now measures the
   silence from the nodes' last heartbeats too.
2. Once a failure is found, Hypothesis's explain phase runs every shrink attempt under a line
   tracer (``sys.settrace`` before Python 3.12) through SQLAlchemy and SQLite: shrinking used
   its whole 300 s budget (the heartbeat bug put back: 311 s with the explain phase, under 2 s
   without it). The explain phase is off here (``PHASES``).
3. That budget equalled the pytest timeout. pytest-timeout raises ``Failed`` inside whatever
   runs, here a shrink attempt; Hypothesis catches ``Failed`` as a test failure, replays that
   choice sequence, finds it behaves differently, and reports ``FlakyStrategyDefinition:
   Inconsistent data generation``. This test's timeout is above the shrink budget.
"""

from __future__ import annotations

import itertools
import shutil
import threading
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sample_jobs
from hypothesis import Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from ratchet import JobPriority, JobStatus, Ratchet
from ratchet.config import WorkerConfig
from ratchet.domain.errors import JobNotFound
from ratchet.domain.lifecycle import is_allowed
from ratchet.domain.model import ClaimedJob, JobFilter, JobRecord, Outcome, OutcomeKind
from ratchet.domain.options import MAX_BACKOFF
from ratchet.domain.watcher import (
    LIVE_NODE_STATES,
    WatcherAction,
    WatcherReport,
    classify,
    orphaned_timed_out_at,
    takeover_eligible,
)
from ratchet.engine import liveness as engine_liveness
from ratchet.engine.worker import Worker
from ratchet.ports import WatcherStore
from ratchet.testing import FakeClock

GRACE = timedelta(seconds=60)
NODES = ("n1", "n2")
#: Unstarted workers; the watcher task is off so nothing periodic could run even if one started.
#: A short takeover window and one takeover per job, so that watcher passes also fail jobs (T9)
#: within a few steps: any poll takes the waiting ones over first.
CONFIG = WorkerConfig(
    orphan_grace=GRACE,
    takeover_window=timedelta(seconds=60),
    max_takeovers=1,
    watcher_enabled=False,
)
SETTINGS = CONFIG.watcher_settings()
LIVE = {state.value for state in LIVE_NODE_STATES}
#: Far from the wall clock: a wall-clock timestamp in the store cannot pass for a fake one.
START = datetime.fromisoformat("2030-01-01T00:00:00+00:00")
#: The furthest ahead of the clock a stored scheduled time may be (delays, backoff, breaker wait).
AHEAD = MAX_BACKOFF + timedelta(hours=1)
_databases = itertools.count()


def make_machine(template: Path, workdir: Path) -> type[RuleBasedStateMachine]:
    class LifecycleMachine(RuleBasedStateMachine):
        @initialize()
        def setup(self) -> None:
            self.threads_before = {t.ident for t in threading.enumerate()}
            self.db = workdir / f"sm-{next(_databases)}.db"
            shutil.copy(template, self.db)
            self.clock = FakeClock(START)
            self.earliest = self.latest = START
            self.app = Ratchet(
                f"sqlite:///{self.db}",
                allowed_modules=["sample_jobs"],
                clock=self.clock,
                auto_migrate=False,
                store_options={"background_checkpoints": False},
            )
            ws = self.app.store.capability(WatcherStore)
            assert ws is not None
            self.ws: WatcherStore = ws
            self.workers: dict[str, Worker] = {}
            """Each node's current incarnation."""
            self.by_id: dict[str, Worker] = {}
            """Every incarnation by its node id."""
            self.restarts = dict.fromkeys(NODES, 0)
            for name in NODES:
                self.boot(name)
            self.order: list[uuid.UUID] = []
            """Every job, in submission order (strategies draw indexes into it)."""
            self.max_retries: dict[uuid.UUID, int] = {}
            self.last_status: dict[uuid.UUID, JobStatus] = {}
            self.epochs: dict[uuid.UUID, int] = {}
            """The last epoch observed of each live job."""
            self.claimed: dict[uuid.UUID, tuple[str, ClaimedJob]] = {}
            """Attempts running, in acquisition order: job -> (incarnation, attempt)."""
            self.handed: dict[uuid.UUID, tuple[str, ClaimedJob]] = {}
            """TIMED_OUT jobs waiting for a taker: job -> (the incarnation that handed the attempt
            back or died, that attempt). Nobody runs them; their owner may still write."""
            self.stale: list[tuple[str, ClaimedJob]] = []
            self.operator_retried: set[uuid.UUID] = set()

        def teardown(self) -> None:
            app = getattr(self, "app", None)
            if app is None:
                return
            with engine_liveness._LOCAL_LOCK:
                engine_liveness._LOCAL.difference_update(self.by_id)
            app.close()
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.db}{suffix}").unlink(missing_ok=True)

        # -------------------------------------------------------------- helpers
        def set_clock(self, when: datetime) -> None:
            self.clock.set(when)
            self.earliest = min(self.earliest, when)
            self.latest = max(self.latest, when)

        def pick(self, data: st.DataObject, items: list[uuid.UUID], label: str) -> uuid.UUID:
            """One of ``items`` by its position (ids are random; positions replay the same)."""
            return items[data.draw(st.integers(0, len(items) - 1), label=label)]

        def boot(self, name: str) -> None:
            """Start a new incarnation of node ``name`` and register it (what ``start`` does,
            without the heartbeat thread). The previous one's process is gone."""
            previous = self.workers.get(name)
            if previous is not None:
                with engine_liveness._LOCAL_LOCK:
                    engine_liveness._LOCAL.discard(previous.node_id)
            restarts = self.restarts[name]
            self.restarts[name] += 1
            node_id = f"{name}.{restarts}" if restarts else name
            worker = Worker(self.app, CONFIG, node_id=node_id)
            worker.liveness.node_name = name  # one name per simulated machine
            assert worker.liveness.register() == [], "no earlier incarnation was left alive"
            self.workers[name] = worker
            self.by_id[node_id] = worker

        def forget_claim(self, job_id: uuid.UUID) -> None:
            """The job's attempt (running or handed back) is no longer its owner's: stale."""
            entry = self.claimed.pop(job_id, None)
            if entry is not None:
                self.by_id[entry[0]].slots.release(entry[1])
            else:
                entry = self.handed.pop(job_id, None)
            if entry is not None:
                self.stale.append(entry)

        def hand_over(self, job_id: uuid.UUID) -> None:
            """The attempt was handed back or its node died: TIMED_OUT, eligible for takeover
            at once, and its slot is free."""
            node, job = entry = self.claimed.pop(job_id)
            self.by_id[node].slots.release(job)
            self.handed[job_id] = entry
            [view] = self.ws.job_liveness([job_id])
            assert (view.status, view.picked_by, view.epoch) == (
                JobStatus.TIMED_OUT,
                node,
                job.epoch,
            )
            assert view.timed_out_at == orphaned_timed_out_at(self.clock.now(), SETTINGS)

        def heartbeat_of(self, node: str) -> datetime:
            rows = {n.node_id: n for n in self.app.store.list_nodes()}
            beat = rows[node].heartbeat_at
            assert self.earliest <= beat <= self.latest, f"heartbeat {beat} is not fake time"
            return beat

        def live_nodes(self) -> set[str]:
            return {n.node_id for n in self.app.store.list_nodes() if n.state in LIVE}

        # -------------------------------------------------------------- submissions
        @rule(
            failing=st.booleans(),
            priority=st.sampled_from(list(JobPriority)),
            delay=st.sampled_from([0, 0, 5, 120]),
            retries=st.integers(0, 3),
        )
        def submit(self, failing: bool, priority: JobPriority, delay: int, retries: int) -> None:
            fn = sample_jobs.fail_always if failing else sample_jobs.record
            handle = (
                self.app.schedule(timedelta(seconds=delay), fn, "x")
                .with_priority(priority)
                .with_max_retries(retries)
                .submit()
            )
            assert handle.id not in self.last_status
            self.order.append(handle.id)
            self.max_retries[handle.id] = retries
            self.last_status[handle.id] = JobStatus.PENDING

        # -------------------------------------------------------------- workers
        def take(self, name: str, limit: int) -> list[ClaimedJob]:
            """Node ``name`` polls for up to ``limit`` jobs (never more than its free slots):
            takeovers of eligible TIMED_OUT jobs first, then new claims. They stay acquired in
            the model."""
            worker = self.workers[name]
            node = worker.node_id
            want = min(limit, worker.free_slots())
            now = self.clock.now()
            live = self.live_nodes()
            waiting = self.ws.job_liveness(list(self.handed)) if self.handed else []
            eligible = {
                v.job_id
                for v in waiting
                if takeover_eligible(v, now, SETTINGS, owner_alive=v.picked_by in live, taker=node)
            }
            acquired = worker.liveness.acquire(want) if want > 0 else []
            worker.slots.claimed(acquired)
            taken = [job for job in acquired if job.job_id in self.handed]
            fresh = [job for job in acquired if job.job_id not in self.handed]
            views = {v.job_id: v for v in waiting}
            if taken:
                event("takeover")
            for job in taken:
                assert job.job_id in eligible, "takeover of a job that was not eligible"
                view = views[job.job_id]
                assert view.epoch == self.handed[job.job_id][1].epoch
                assert (job.epoch, job.takeovers) == (view.epoch + 1, view.takeovers + 1)
                self.forget_claim(job.job_id)  # the attempt handed back is a zombie now
            if fresh:
                assert len(taken) == min(want, len(eligible)), "a new claim before a takeover"
            for job in fresh:
                assert job.epoch > self.epochs.get(job.job_id, 0), "a claim grants a new epoch"
            for job in acquired:
                assert job.job_id not in self.claimed, f"{job.job_id} acquired twice"
                self.claimed[job.job_id] = (node, job)
            return acquired

        @rule(node=st.sampled_from(NODES), limit=st.integers(1, 4), run=st.sampled_from([0, 1, 4]))
        def claim(self, node: str, limit: int, run: int) -> None:
            """Acquire up to ``limit`` jobs and run the first ``run`` of them at once (the rest
            stay acquired for later steps: runs, cancels, drains, disappearance)."""
            claimed = self.take(node, limit)
            if claimed and run:
                self.observe()  # check the acquisitions before the runs move the jobs on
            for job in claimed[:run]:
                self.run_attempt(job.job_id)

        @precondition(lambda self: self.claimed)
        @rule(data=st.data())
        def run_claimed(self, data: st.DataObject) -> None:
            self.run_attempt(self.pick(data, list(self.claimed), "claim #"))

        def run_attempt(self, job_id: uuid.UUID) -> None:
            """The owner runs its attempt and records the outcome."""
            node, job = self.claimed[job_id]
            worker = self.by_id[node]
            outcome = worker.execute(job)
            assert outcome is not None, "the owner's attempt produced no outcome"
            self.forget_claim(job_id)
            fenced = worker.record([outcome])
            assert fenced == [], "the current owner's write was refused"
            expected = {
                OutcomeKind.SUCCEEDED: JobStatus.SUCCEEDED,
                OutcomeKind.DEAD: JobStatus.FAILED,
                OutcomeKind.RETRY: JobStatus.PENDING,
                OutcomeKind.RESCHEDULE: JobStatus.PENDING,
            }[outcome.kind]
            assert self.app.get_job(job_id).status is expected

        @precondition(lambda self: self.stale)
        @rule(data=st.data(), kind=st.sampled_from(list(OutcomeKind)))
        def zombie_write(self, data: st.DataObject, kind: OutcomeKind) -> None:
            node, job = self.stale[data.draw(st.integers(0, len(self.stale) - 1), label="stale #")]
            if (node, job) in (self.claimed.get(job.job_id), self.handed.get(job.job_id)):
                return  # not stale: the same attempt is live again (cannot happen: epochs grow)
            before = self.app.get_job(job.job_id)
            now = self.clock.now()
            zombie = Outcome(
                job.job_id,
                job.epoch,
                job.attempt,
                kind,
                now,
                now,
                result='"zombie"',
                error="zombie",
                retry_at=now,
            )
            written = self.app.store.record_outcomes(node, [zombie], now=now)
            assert written.fenced == (job.job_id,), "a stale epoch's write was accepted"
            after = self.app.get_job(job.job_id)
            assert (after.status, after.epoch, after.attempts, after.result, after.picked_by) == (
                before.status,
                before.epoch,
                before.attempts,
                before.result,
                before.picked_by,
            )

        @precondition(lambda self: self.claimed)
        @rule(name=st.sampled_from(NODES))
        def drain_hands_back(self, name: str) -> None:
            """The node drains as ``Worker.stop`` does (without threads to stop): DRAINING, every
            job it owns handed back, its row removed; then it comes back as a new incarnation."""
            worker = self.workers[name]
            node = worker.node_id
            mine = [jid for jid, (n, _) in self.claimed.items() if n == node]
            worker.liveness.begin_drain()
            assert worker.liveness.hand_back() == (0, len(mine))
            if mine:
                event("drain handed jobs back")
            worker.liveness.stop()
            self.app.store.deregister_node(node)
            for jid in mine:
                self.hand_over(jid)
            self.boot(name)

        @rule(limit=st.integers(0, 2), take_over=st.booleans())
        def claimant_disappears(self, limit: int, take_over: bool) -> None:
            """``n2`` acquires up to ``limit`` more jobs, then falls silent past the deadline while
            ``n1`` heart-beats; ``n1``'s watcher pass declares ``n2`` dead, which makes its
            running attempts (now and from earlier steps) TIMED_OUT; ``n1`` takes over what its
            free slots allow at once (``take_over``; else they wait for a later poll, or for a
            watcher to fail them), and ``n2`` comes back as a new incarnation."""
            if self.take("n2", limit):
                self.observe()
            doomed = self.workers["n2"].node_id
            survivor = self.workers["n1"]
            lost = [jid for jid, (n, _) in self.claimed.items() if n == doomed]
            # After a backwards jump the last heartbeats can be later than now: the silence (and
            # n1's run of heartbeats that lets it judge silence) starts after both.
            silent_from = max(
                self.clock.now(), self.heartbeat_of(doomed), self.heartbeat_of(survivor.node_id)
            )
            self.set_clock(silent_from)
            while True:  # n1's heartbeat thread
                assert survivor.liveness.beat()
                if self.clock.now() >= silent_from + SETTINGS.dead_after:
                    break
                self.set_clock(
                    min(
                        silent_from + SETTINGS.dead_after,
                        self.clock.now() + CONFIG.heartbeat_interval,
                    )
                )
            assert survivor.liveness.judging(), "n1 beat without a gap for the whole deadline"
            report = self.watch(survivor)
            assert report.dead_nodes == (doomed,)
            assert report.orphaned == len(lost)
            # n1's claims may be as old as n2's, but n1 heart-beats: they stay.
            for jid, (n, _) in self.claimed.items():
                assert n == survivor.node_id and self.app.get_job(jid).status is JobStatus.RUNNING
            if lost and take_over:
                self.observe()
                self.take("n1", len(lost))

        @rule(name=st.sampled_from(NODES), seconds=st.sampled_from([0, 1, 30, 61]))
        def watcher_pass(self, name: str, seconds: int) -> None:
            """``seconds`` later, a node's watcher pass (its periodic task): TIMED_OUT jobs nobody
            took over within the takeover window, or at the takeover cap, fail through the retry
            policy."""
            self.set_clock(self.clock.now() + timedelta(seconds=seconds))
            self.watch(self.workers[name])

        def watch(self, worker: Worker) -> WatcherReport:
            """One watcher pass of ``worker``, checked against the pure rules for the jobs
            waiting for a taker; nodes it declares dead lose their attempts (TIMED_OUT, eligible
            at once) and come back as new incarnations."""
            now = self.clock.now()
            waiting = self.ws.job_liveness(list(self.handed)) if self.handed else []
            due = {
                v.job_id
                for v in waiting
                if classify(v, now, SETTINGS, owner_alive=False) is WatcherAction.EXPIRE
            }
            report = worker.liveness.watch_once()
            assert (report.stalled, report.revoked) == (0, 0), "no job reports progress or waits"
            expired = {o.job_id for o in report.expired}
            assert expired == due, "a watcher pass failed other jobs than the due ones"
            if expired:
                event("watcher: TIMED_OUT job failed through the retry policy")
            if report.orphaned:
                event("watcher: node declared dead with running jobs")
            for job_id in expired:
                self.forget_claim(job_id)
                assert self.app.get_job(job_id).status in (JobStatus.PENDING, JobStatus.FAILED)
            orphaned = [jid for jid, (n, _) in self.claimed.items() if n in report.dead_nodes]
            assert report.orphaned == len(orphaned)
            for job_id in orphaned:
                self.hand_over(job_id)
            for name, current in list(self.workers.items()):
                if current.node_id in report.dead_nodes:
                    self.boot(name)
            return report

        # -------------------------------------------------------------- operators
        @precondition(lambda self: self.order)
        @rule(data=st.data())
        def cancel(self, data: st.DataObject) -> None:
            job_id = self.pick(data, self.order, "job #")
            before = self.app.get_job(job_id).status
            ok = self.app.cancel_job(job_id)
            assert ok == before.is_live
            if ok:
                assert self.app.get_job(job_id).status is JobStatus.CANCELED
                self.forget_claim(job_id)  # its owner (running or handed back) is now a zombie

        @precondition(lambda self: self.order)
        @rule(data=st.data())
        def pause(self, data: st.DataObject) -> None:
            job_id = self.pick(data, self.order, "job #")
            before = self.app.get_job(job_id).status
            ok = self.app.pause_job(job_id)
            assert ok == (before in (JobStatus.PENDING, JobStatus.PAUSED))

        @precondition(lambda self: self.order)
        @rule(data=st.data())
        def resume(self, data: st.DataObject) -> None:
            job_id = self.pick(data, self.order, "job #")
            before = self.app.get_job(job_id).status
            assert self.app.resume_job(job_id) == (before is JobStatus.PAUSED)

        @precondition(lambda self: self.order)
        @rule(data=st.data())
        def operator_retry(self, data: st.DataObject) -> None:
            job_id = self.pick(data, self.order, "job #")
            before = self.app.get_job(job_id).status
            ok = self.app.retry_job(job_id)
            assert ok == (before is JobStatus.FAILED)
            if ok:
                self.operator_retried.add(job_id)

        @precondition(lambda self: self.order)
        @rule(data=st.data())
        def replace(self, data: st.DataObject) -> None:
            job_id = self.pick(data, self.order, "job #")
            before = self.app.get_job(job_id).status
            if before.is_terminal:
                with pytest.raises(JobNotFound, match="no longer live"):
                    self.app.replace(job_id, timedelta(0), sample_jobs.record, "r")
                return
            handle = self.app.replace(job_id, timedelta(0), sample_jobs.record, "r")
            assert self.app.get_job(job_id).superseded_by == handle.id
            self.forget_claim(job_id)
            assert handle.id not in self.last_status
            self.order.append(handle.id)
            self.max_retries[handle.id] = self.max_retries[job_id]  # it keeps the old options
            self.last_status[handle.id] = JobStatus.PENDING

        # -------------------------------------------------------------- time
        @rule(seconds=st.sampled_from([1, 30, 61, 3600, -1, -30]))
        def move_clock(self, seconds: int) -> None:
            """Forward, or a backwards jump (one rule: two would take a third of the steps)."""
            self.set_clock(self.clock.now() + timedelta(seconds=seconds))

        # -------------------------------------------------------------- invariants
        @invariant()
        def lifecycle_holds(self) -> None:
            if hasattr(self, "app"):
                self.observe()

        def observe(self) -> None:
            """Compare every job with its last observed status (one query), then remember it."""
            limit = len(self.order) + 10
            records = {r.job_id: r for r in self.app.list_jobs(JobFilter(), limit=limit)}
            assert set(records) <= set(self.order), "a job appeared that nobody submitted"
            for job_id in self.order:
                rec = records.get(job_id)
                assert rec is not None, f"job {job_id} was lost"
                prev, cur = self.last_status[job_id], rec.status
                if prev is not cur:
                    assert is_allowed(prev, cur), f"illegal transition {prev} -> {cur}"
                    if prev.is_terminal:
                        assert prev is JobStatus.FAILED and job_id in self.operator_retried, (
                            f"terminal {prev} changed to {cur}"
                        )
                        self.operator_retried.discard(job_id)
                assert rec.attempts <= self.max_retries[job_id] + 1
                if cur is JobStatus.RUNNING:
                    assert job_id in self.claimed and self.claimed[job_id][0] == rec.picked_by
                if cur is JobStatus.TIMED_OUT:
                    assert job_id in self.handed and self.handed[job_id][0] == rec.picked_by
                if cur.is_live:
                    assert rec.epoch >= self.epochs.get(job_id, 0), "an epoch went back"
                    self.epochs[job_id] = rec.epoch
                self.last_status[job_id] = cur
                self.check_fake_time(rec)

        def check_fake_time(self, rec: JobRecord) -> None:
            """Every timestamp the engine stored was read from the FakeClock."""
            lo, hi = self.earliest, self.latest
            assert lo <= rec.created_at <= hi, f"created_at {rec.created_at} is not fake time"
            assert rec.scheduled_time is None or lo <= rec.scheduled_time <= hi + AHEAD, (
                f"scheduled_time {rec.scheduled_time} is not fake time"
            )
            for stamp in (rec.picked_at, rec.terminated_at):
                assert stamp is None or lo <= stamp <= hi, f"{stamp} is not fake time"

        @invariant()
        def no_thread_started(self) -> None:
            if not hasattr(self, "threads_before"):
                return
            new = [t.name for t in threading.enumerate() if t.ident not in self.threads_before]
            assert not new, f"threads started during the example: {new}"

    return LifecycleMachine


#: Without the explain phase: once a failure is found it would run every shrink attempt under a
#: line tracer (``sys.settrace`` before Python 3.12), through SQLAlchemy and SQLite calls, making
#: each example several times slower.
PHASES = [phase for phase in settings().phases if phase is not Phase.explain]


# Above Hypothesis's 300 s shrink budget: if pytest-timeout fired first, its Failed would be
# raised inside a shrink attempt, and Hypothesis would report that as a second, flaky failure.
@pytest.mark.timeout(600)
def test_lifecycle_state_machine(tmp_path: Path) -> None:
    template = tmp_path / "template.db"
    Ratchet(f"sqlite:///{template}", allow_empty_class_policy=True).close()
    machine = make_machine(template, tmp_path)
    configured = settings(settings(), stateful_step_count=40, phases=PHASES)
    run_state_machine_as_test(machine, settings=configured)
