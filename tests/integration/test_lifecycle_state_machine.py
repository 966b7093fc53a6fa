"""A Hypothesis state machine drives the real scheduler and SQLite store.

Operations: submit (succeeding or failing jobs, priorities, delays, retries), claim by two nodes,
run a claimed job, cancel, pause, resume, operator retry, replace, clock jumps, a claimant that
disappears (recovered after the orphan grace) and zombie writes from stale epochs.

After every step: only legal transitions happened, no job was lost, terminal statuses absorb
(except the operator's retry of a FAILED job), attempts never exceed max_retries + 1, and a
stale epoch's write changed nothing.
"""

from __future__ import annotations

import itertools
import shutil
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import sample_jobs
from hypothesis import settings
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
from ratchet.domain.lifecycle import is_allowed
from ratchet.domain.model import ClaimedJob, OutcomeKind
from ratchet.engine.worker import Worker
from ratchet.testing import FakeClock

GRACE = timedelta(seconds=60)
_counter = itertools.count()


def make_machine(template: Path, workdir: Path) -> type[RuleBasedStateMachine]:
    class LifecycleMachine(RuleBasedStateMachine):
        @initialize()
        def setup(self) -> None:
            db = workdir / f"sm-{next(_counter)}.db"
            shutil.copy(template, db)
            self.clock = FakeClock()
            self.app = Ratchet(
                f"sqlite:///{db}",
                allowed_modules=["sample_jobs"],
                clock=self.clock,
                auto_migrate=False,
            )
            self.nodes = {
                name: Worker(self.app, self.app.worker().config, node_id=name)
                for name in ("n1", "n2")
            }
            for name in self.nodes:
                self.app.store.register_node(name, now=self.clock.now())
            self.max_retries: dict[uuid.UUID, int] = {}
            self.last_status: dict[uuid.UUID, JobStatus] = {}
            self.claimed: dict[uuid.UUID, tuple[str, ClaimedJob]] = {}
            self.stale: list[tuple[str, ClaimedJob]] = []
            self.operator_retried: set[uuid.UUID] = set()

        def teardown(self) -> None:
            self.app.close()

        # -------------------------------------------------------------- helpers
        def jobs(self) -> list[uuid.UUID]:
            return sorted(self.last_status, key=str)

        def forget_claim(self, job_id: uuid.UUID) -> None:
            entry = self.claimed.pop(job_id, None)
            if entry is not None:
                self.stale.append(entry)
                self.nodes[entry[0]]._inflight.pop(job_id, None)

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
            self.max_retries[handle.id] = retries
            self.last_status[handle.id] = JobStatus.PENDING

        # -------------------------------------------------------------- workers
        @rule(node=st.sampled_from(["n1", "n2"]), limit=st.integers(1, 4))
        def claim(self, node: str, limit: int) -> None:
            worker = self.nodes[node]
            for job in worker.store.claim(
                node, limit, now=self.clock.now(), boost_interval=self.app.config.boost_interval
            ):
                old = self.claimed.get(job.job_id)
                assert old is None, f"{job.job_id} claimed twice without being released"
                self.claimed[job.job_id] = (node, job)
                worker._inflight[job.job_id] = job

        @precondition(lambda self: self.claimed)
        @rule(data=st.data())
        def run_claimed(self, data: st.DataObject) -> None:
            job_id = data.draw(st.sampled_from(sorted(self.claimed, key=str)))
            node, job = self.claimed[job_id]
            worker = self.nodes[node]
            outcome = worker.execute(job)
            self.forget_claim(job_id)
            if outcome is not None:
                fenced = worker.record([outcome])
                status = self.app.get_job(job_id).status
                if fenced:
                    assert (
                        status is not JobStatus.RUNNING
                        or self.app.get_job(job_id).picked_by != node
                    )
                else:
                    expected = {
                        OutcomeKind.SUCCEEDED: JobStatus.SUCCEEDED,
                        OutcomeKind.DEAD: JobStatus.FAILED,
                        OutcomeKind.RETRY: JobStatus.PENDING,
                        OutcomeKind.RESCHEDULE: JobStatus.PENDING,
                    }[outcome.kind]
                    assert status is expected

        @precondition(lambda self: self.stale)
        @rule(data=st.data(), kind=st.sampled_from(list(OutcomeKind)))
        def zombie_write(self, data: st.DataObject, kind: OutcomeKind) -> None:
            node, job = data.draw(st.sampled_from(self.stale))
            before = self.app.get_job(job.job_id)
            current = self.claimed.get(job.job_id)
            if current is not None and current == (node, job):
                return
            now = self.clock.now()
            from ratchet.domain.model import Outcome

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
            fenced = self.app.store.record_outcomes(node, [zombie], now=now)
            assert fenced == [job.job_id], "a stale epoch's write was accepted"
            after = self.app.get_job(job.job_id)
            assert (after.status, after.epoch, after.attempts, after.result, after.picked_by) == (
                before.status,
                before.epoch,
                before.attempts,
                before.result,
                before.picked_by,
            )

        @precondition(lambda self: self.claimed)
        @rule(node=st.sampled_from(["n1", "n2"]))
        def drain_hands_back(self, node: str) -> None:
            mine = [jid for jid, (n, _) in self.claimed.items() if n == node]
            released = self.app.store.release_jobs(node, mine, now=self.clock.now())
            assert released == len(mine)
            for jid in mine:
                self.forget_claim(jid)
                assert self.app.get_job(jid).status is JobStatus.PENDING

        @precondition(lambda self: any(n == "n2" for n, _ in self.claimed.values()))
        @rule()
        def claimant_disappears(self) -> None:
            lost = [jid for jid, (n, _) in self.claimed.items() if n == "n2"]
            latest = max(self.claimed[jid][1].claimed_at for jid in lost)
            # The clock may have jumped back: n2's last heartbeat can be later than its claims.
            beat = max(n.heartbeat_at for n in self.app.store.list_nodes() if n.node_id == "n2")
            self.clock.set(max(self.clock.now(), latest, beat) + GRACE + timedelta(seconds=1))
            self.app.store.heartbeat("n1", now=self.clock.now())
            recovered = self.app.store.recover_orphans(now=self.clock.now(), grace=GRACE)
            assert recovered >= len(lost)
            for jid in lost:
                self.forget_claim(jid)
                assert self.app.get_job(jid).status is JobStatus.PENDING
            self.app.store.register_node("n2", now=self.clock.now())
            # n1's claims may be older than the grace too, but n1 heartbeats: they stay.
            for jid, (n, _) in self.claimed.items():
                assert n == "n1" and self.app.get_job(jid).status is JobStatus.RUNNING

        # -------------------------------------------------------------- operators
        @precondition(lambda self: self.last_status)
        @rule(data=st.data())
        def cancel(self, data: st.DataObject) -> None:
            job_id = data.draw(st.sampled_from(self.jobs()))
            before = self.app.get_job(job_id).status
            ok = self.app.cancel_job(job_id)
            assert ok == before.is_live
            if ok:
                assert self.app.get_job(job_id).status is JobStatus.CANCELED
                self.forget_claim(job_id)  # a running job's owner is now a zombie

        @precondition(lambda self: self.last_status)
        @rule(data=st.data())
        def pause(self, data: st.DataObject) -> None:
            job_id = data.draw(st.sampled_from(self.jobs()))
            before = self.app.get_job(job_id).status
            ok = self.app.pause_job(job_id)
            assert ok == (before in (JobStatus.PENDING, JobStatus.PAUSED))

        @precondition(lambda self: self.last_status)
        @rule(data=st.data())
        def resume(self, data: st.DataObject) -> None:
            job_id = data.draw(st.sampled_from(self.jobs()))
            before = self.app.get_job(job_id).status
            assert self.app.resume_job(job_id) == (before is JobStatus.PAUSED)

        @precondition(lambda self: self.last_status)
        @rule(data=st.data())
        def operator_retry(self, data: st.DataObject) -> None:
            job_id = data.draw(st.sampled_from(self.jobs()))
            before = self.app.get_job(job_id).status
            ok = self.app.retry_job(job_id)
            assert ok == (before is JobStatus.FAILED)
            if ok:
                self.operator_retried.add(job_id)

        @precondition(lambda self: self.last_status)
        @rule(data=st.data())
        def replace(self, data: st.DataObject) -> None:
            job_id = data.draw(st.sampled_from(self.jobs()))
            before = self.app.get_job(job_id).status
            if before.is_terminal:
                with pytest.raises(Exception, match="no longer live"):
                    self.app.replace(job_id, timedelta(0), sample_jobs.record, "r")
                return
            handle = self.app.replace(job_id, timedelta(0), sample_jobs.record, "r")
            assert self.app.get_job(job_id).superseded_by == handle.id
            self.forget_claim(job_id)
            self.max_retries[handle.id] = 0
            self.last_status[handle.id] = JobStatus.PENDING

        # -------------------------------------------------------------- time
        @rule(seconds=st.sampled_from([1, 30, 61, 3600]))
        def advance_clock(self, seconds: int) -> None:
            self.clock.advance(seconds)

        @rule(seconds=st.sampled_from([1, 30]))
        def clock_jumps_back(self, seconds: int) -> None:
            self.clock.set(self.clock.now() - timedelta(seconds=seconds))

        # -------------------------------------------------------------- invariants
        @invariant()
        def lifecycle_holds(self) -> None:
            if not hasattr(self, "app"):
                return
            for job_id in self.jobs():
                rec = self.app.get_job(job_id)
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

    return LifecycleMachine


@pytest.mark.slow  # see the note: it became flaky after the timeout/workflow integration
def test_lifecycle_state_machine(tmp_path: Path) -> None:
    """Known problem (to fix next): since the watchdog and flow hooks joined the worker, Hypothesis
    reports inconsistent data generation on replay and some runs hit the 300 s timeout; it runs on
    demand (``--run-slow``) until the source of nondeterminism is found."""
    template = tmp_path / "template.db"
    Ratchet(f"sqlite:///{template}", allow_empty_class_policy=True).close()
    machine = make_machine(template, tmp_path)
    run_state_machine_as_test(machine, settings=settings(settings(), stateful_step_count=40))
