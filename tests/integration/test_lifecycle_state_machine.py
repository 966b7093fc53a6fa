"""A Hypothesis state machine drives the real scheduler and SQLite store through the job lifecycle.

What it models. Jobs are submitted through the public API (succeeding or failing targets,
priorities, delays, retry budgets); two real but *unstarted* :class:`~ratchet.engine.worker.Worker`
objects, ``n1`` and ``n2``, claim them through the store and run claimed attempts with
``Worker.execute`` / ``Worker.record`` (gates, circuit breaker, retry decision and the fenced
outcome write all run for real, on the test's thread). Operators cancel, pause, resume, retry
dead-lettered jobs and replace live ones; a node hands its claims back (drain); the clock moves
forward and jumps back; ``n2`` disappears (silent past the orphan grace) and its jobs are
recovered; a node whose claim was ended by someone else writes as a zombie with its stale epoch.

Checked after every step: only legal transitions happen; no job is lost and none appears that
was not submitted; terminal statuses absorb (except an operator's retry of a FAILED job);
attempts never exceed ``max_retries + 1``; a RUNNING job is owned by the node the model says;
a stale epoch's write is refused and changes nothing; every timestamp the engine stored comes
from the FakeClock; no thread was started.

How nondeterminism is excluded (each run of a choice sequence must behave identically, or
Hypothesis reports ``Flaky`` / inconsistent data generation on replay):

- **Time** only comes from one :class:`~ratchet.testing.FakeClock` per example, given to the app
  (the store, the breakers, the watchdog and the retry decisions read it). It starts months away
  from the wall clock, so the timestamp invariant catches any wall-clock read that reaches data.
- **No threads.** The workers are never started: no poller, writer, heartbeat, liveness or
  watchdog thread and no periodic task (watcher, orphan scan, signal scan, recurring
  materializer) runs; the watcher task is off in the config. Attempts run synchronously on the
  test's thread. An invariant checks that no thread appears.
- **No random ids in strategies.** Job ids (UUIDv7: wall-clock milliseconds and random bits)
  are never sorted or sampled by value: rules draw *indexes* into lists kept in submission /
  claim order, so a replay picks the same job whatever ids it got.
- **Nothing leaks between examples.** Every example gets a fresh copy of a migrated template
  database, a fresh app, clock and workers, and closes them (and deletes the files) at teardown.

Why it was marked ``slow`` (flaky, 300 s timeouts). Not a nondeterministic engine: two runs of
the same examples in one process give identical per-step store states. Three things combined:

1. A model bug, failing deterministically: after a backwards clock jump, ``n2``'s last heartbeat
   could be later than its claims, so moving the clock "grace + 1 s past the latest claim" did
   not make ``n2`` silent and nothing was recovered. ``claimant_disappears`` now waits for the
   heartbeat too.
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
from hypothesis import Phase, settings
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
from ratchet.engine.worker import Worker
from ratchet.testing import FakeClock

GRACE = timedelta(seconds=60)
NODES = ("n1", "n2")
#: Unstarted workers; the watcher task is off so nothing periodic could run even if one started.
CONFIG = WorkerConfig(orphan_grace=GRACE, watcher_enabled=False)
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
            )
            self.nodes = {name: Worker(self.app, CONFIG, node_id=name) for name in NODES}
            for name in NODES:
                self.app.store.register_node(name, now=self.clock.now())
            self.order: list[uuid.UUID] = []
            """Every job, in submission order (strategies draw indexes into it)."""
            self.max_retries: dict[uuid.UUID, int] = {}
            self.last_status: dict[uuid.UUID, JobStatus] = {}
            self.claimed: dict[uuid.UUID, tuple[str, ClaimedJob]] = {}
            """Live claims, in claim order: job -> (node, claim)."""
            self.stale: list[tuple[str, ClaimedJob]] = []
            self.operator_retried: set[uuid.UUID] = set()

        def teardown(self) -> None:
            app = getattr(self, "app", None)
            if app is None:
                return
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

        def forget_claim(self, job_id: uuid.UUID) -> None:
            entry = self.claimed.pop(job_id, None)
            if entry is not None:
                self.stale.append(entry)
                self.nodes[entry[0]].slots.release(entry[1])

        def heartbeat_of(self, node: str) -> datetime:
            rows = {n.node_id: n for n in self.app.store.list_nodes()}
            beat = rows[node].heartbeat_at
            assert self.earliest <= beat <= self.latest, f"heartbeat {beat} is not fake time"
            return beat

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
        def take(self, node: str, limit: int) -> list[ClaimedJob]:
            """``node`` claims up to ``limit`` due jobs (they stay claimed in the model)."""
            worker = self.nodes[node]
            claimed = worker.store.claim(
                node, limit, now=self.clock.now(), boost_interval=self.app.config.boost_interval
            )
            for job in claimed:
                old = self.claimed.get(job.job_id)
                assert old is None, f"{job.job_id} claimed twice without being released"
                self.claimed[job.job_id] = (node, job)
                worker.slots.claimed([job])
            return claimed

        @rule(node=st.sampled_from(NODES), limit=st.integers(1, 4), run=st.sampled_from([0, 1, 4]))
        def claim(self, node: str, limit: int, run: int) -> None:
            """Claim up to ``limit`` due jobs and run the first ``run`` of them at once (the rest
            stay claimed for later steps: runs, cancels, drains, disappearance)."""
            claimed = self.take(node, limit)
            if claimed and run:
                self.observe()  # check PENDING -> RUNNING before the runs move the jobs on
            for job in claimed[:run]:
                self.run_attempt(job.job_id)

        @precondition(lambda self: self.claimed)
        @rule(data=st.data())
        def run_claimed(self, data: st.DataObject) -> None:
            self.run_attempt(self.pick(data, list(self.claimed), "claim #"))

        def run_attempt(self, job_id: uuid.UUID) -> None:
            """The owner runs its claimed attempt and records the outcome."""
            node, job = self.claimed[job_id]
            worker = self.nodes[node]
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
            if self.claimed.get(job.job_id) == (node, job):
                return  # not stale: the same claim is live again (cannot happen: epochs grow)
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
        @rule(node=st.sampled_from(NODES))
        def drain_hands_back(self, node: str) -> None:
            mine = [jid for jid, (n, _) in self.claimed.items() if n == node]
            released = self.app.store.release_jobs(node, mine, now=self.clock.now())
            assert released == len(mine)
            for jid in mine:
                self.forget_claim(jid)
                assert self.app.get_job(jid).status is JobStatus.PENDING

        @rule(limit=st.integers(0, 2))
        def claimant_disappears(self, limit: int) -> None:
            """``n2`` claims up to ``limit`` more jobs, then falls silent past the grace; its
            claims (now and from earlier steps) are recovered, ``n1``'s are not."""
            if self.take("n2", limit):
                self.observe()
            lost = [jid for jid, (n, _) in self.claimed.items() if n == "n2"]
            latest = max((self.claimed[jid][1].claimed_at for jid in lost), default=START)
            # After a backwards jump, n2's last heartbeat can be later than its claims: it is
            # silent only once the grace has passed since both.
            silent_from = max(self.clock.now(), latest, self.heartbeat_of("n2"))
            self.set_clock(silent_from + GRACE + timedelta(seconds=1))
            self.app.store.heartbeat("n1", now=self.clock.now())
            recovered = self.app.store.recover_orphans(now=self.clock.now(), grace=GRACE)
            assert recovered == len(lost)
            for jid in lost:
                self.forget_claim(jid)
                assert self.app.get_job(jid).status is JobStatus.PENDING
            self.app.store.register_node("n2", now=self.clock.now())
            # n1's claims may be older than the grace too, but n1 heartbeats: they stay.
            for jid, (n, _) in self.claimed.items():
                assert n == "n1" and self.app.get_job(jid).status is JobStatus.RUNNING

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
                self.forget_claim(job_id)  # a running job's owner is now a zombie

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
            self.max_retries[handle.id] = 0
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
