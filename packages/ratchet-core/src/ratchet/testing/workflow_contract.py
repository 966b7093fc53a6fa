"""Conformance suite for batches, chains, workflow branches and signals (store level).

Subclass :class:`WorkflowStoreContract` in a test module that provides the ``store`` and
``clock`` fixtures (as for :class:`~ratchet.testing.store_contract.StoreContract`). The
concurrency tests drive the store from several threads, each with its own node id, the way
worker processes do; on PostgreSQL and MySQL the completions then really race on the batch row.

Every store call that can end jobs returns the effects its write produced (``OutcomeWrite``,
``FlowWrite``) and resolves branch predicates only through the resolver it is given: the suite
passes :data:`RESOLVE`, as the engine passes its own under its class policy.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest

from ratchet.domain.flows import BatchSpec, BranchSpec, FlowJob, waiting
from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.model import ClaimedJob, NewJob, Outcome, OutcomeKind
from ratchet.domain.watcher import NodeInfo
from ratchet.domain.workflow import (
    BatchContext,
    ConditionType,
    EffectKind,
    FlowEffect,
    FlowResolver,
    JobResult,
    JobType,
    WorkflowCondition,
)
from ratchet.ports import WatcherStore, WorkflowStore
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import BOOST, new_job, trace_context
from ratchet.testing.watcher_contract import SETTINGS, fail_or_retry

NODE = "node-a"


_HERE = __name__


def result_is_big(result: JobResult) -> bool:
    """A CUSTOM predicate used by the contract."""
    return bool(result.success and result.value > 10)


def value_is_even(value: Any) -> bool:
    """A RESULT_VALUE predicate used by the contract."""
    return isinstance(value, int) and value % 2 == 0


def half_succeeded(batch: BatchContext) -> bool:
    """A BATCH_CUSTOM predicate used by the contract."""
    return batch.success_rate >= 0.5


def resolve_predicate(text: str) -> Callable[..., Any]:
    """The suite's predicate resolver: any importable function (the engine's also asks its
    class policy first)."""
    from ratchet.targets import TargetRef, resolve_attribute

    fn = resolve_attribute(TargetRef.parse(text))
    if not callable(fn):
        raise TypeError(f"{text} is not callable")
    return fn  # type: ignore[no-any-return]


#: What the suite passes to every call that can end jobs.
RESOLVE = FlowResolver(predicate=resolve_predicate)


def _flow_store(store: Any) -> Any:
    """The store (flows and the base port are one object here), or skip as N/A."""
    if store.capability(WorkflowStore) is None:
        pytest.skip("N/A: this store has no batches, chains, workflows or signals")
    return store


class WorkflowStoreContract:
    """Behaviour every store with flows must have. Needs fixtures ``store`` and ``clock``."""

    # ------------------------------------------------------------------ helpers
    def claim(
        self, store: Any, clock: FakeClock, node: str = NODE, limit: int = 100
    ) -> list[ClaimedJob]:
        return list(store.claim(node, limit, now=clock.now(), boost_interval=BOOST))

    def finish(
        self,
        store: Any,
        clock: FakeClock,
        jobs: Sequence[ClaimedJob],
        kind: OutcomeKind | Callable[[ClaimedJob], OutcomeKind] = OutcomeKind.SUCCEEDED,
        node: str = NODE,
        result: str | None = None,
    ) -> list[FlowEffect]:
        now = clock.now()
        outcomes = [
            Outcome(
                j.job_id,
                j.epoch,
                j.attempt,
                kind(j) if callable(kind) else kind,
                now,
                now,
                result=result,
                error=None if kind is OutcomeKind.SUCCEEDED else "RuntimeError: no",
                flow_effects=j.flow_effects,  # as the worker passes it on
            )
            for j in jobs
        ]
        written = store.record_outcomes(node, outcomes, now=now, resolve=RESOLVE)
        assert written.fenced == ()
        return list(written.effects)

    def status(self, store: Any, job_id: uuid.UUID) -> JobStatus:
        rec = store.get_job(job_id)
        assert rec is not None
        return JobStatus(rec.status)

    def batch(
        self,
        store: Any,
        clock: FakeClock,
        n: int,
        *,
        sealed: bool = True,
        branches: int = 0,
        progress_hook: str | None = None,
    ) -> tuple[NewJob, list[NewJob], list[NewJob]]:
        parent = waiting(new_job(clock, target="tests.jobs:parent"))
        children = [new_job(clock, max_retries=0) for _ in range(n)]
        branch_jobs = [waiting(new_job(clock, target="tests.jobs:branch")) for _ in range(branches)]
        jobs = [FlowJob(parent, JobType.BATCH_PARENT, has_dependents=bool(branches))]
        jobs += [FlowJob(c, JobType.BATCH_CHILD, batch_id=parent.job_id) for c in children]
        jobs += [
            FlowJob(b, JobType.WORKFLOW_BRANCH, depends_on=parent.job_id, waiting_for=parent.job_id)
            for b in branch_jobs
        ]
        conditions = [WorkflowCondition.batch_success(), WorkflowCondition.batch_failure()]
        specs = [
            BranchSpec(parent.job_id, b.job_id, conditions[i % 2], i)
            for i, b in enumerate(branch_jobs)
        ]
        result = store.insert_flow(
            jobs,
            now=clock.now(),
            branches=specs,
            batch=BatchSpec(parent.job_id, "contract", n, sealed, progress_hook),
        )
        assert result.inserted
        return parent, children, branch_jobs

    def chain(self, store: Any, clock: FakeClock, n: int, **overrides: Any) -> list[NewJob]:
        head = new_job(clock, **overrides)
        steps = [waiting(new_job(clock, **overrides)) for _ in range(n - 1)]
        jobs = [FlowJob(head, chain_id=head.job_id, has_dependents=n > 1)]
        previous = head.job_id
        for i, s in enumerate(steps):
            jobs.append(
                FlowJob(
                    s,
                    JobType.CHAIN_STEP,
                    chain_id=head.job_id,
                    depends_on=previous,
                    waiting_for=previous,
                    has_dependents=i < len(steps) - 1,
                )
            )
            previous = s.job_id
        store.insert_flow(jobs, now=clock.now())
        return [head, *steps]

    def signal_jobs(
        self, store: Any, clock: FakeClock, key: str, n: int = 1, **overrides: Any
    ) -> list[NewJob]:
        jobs = [waiting(new_job(clock, **overrides)) for _ in range(n)]
        for j in jobs:
            store.insert_flow(
                [FlowJob(j, signal_key=key, signal_wait=timedelta(minutes=5))], now=clock.now()
            )
        return jobs

    def expire(self, store: Any, clock: FakeClock, limit: int) -> Any:
        return store.expire_signal_waits(now=clock.now(), limit=limit, resolve=RESOLVE)

    def race(self, workers: int, target: Callable[[int], Any]) -> list[Any]:
        """Run ``target(i)`` on ``workers`` threads released together; re-raise any error."""
        barrier = threading.Barrier(workers)
        results: list[Any] = [None] * workers
        errors: list[BaseException] = []

        def run(i: int) -> None:
            try:
                barrier.wait(timeout=30)
                results[i] = target(i)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        if errors:
            raise errors[0]
        return results

    # ------------------------------------------------------------------ the claim's flag
    def test_claim_tells_plain_jobs_from_jobs_whose_end_triggers_something(
        self, store: Any, clock: FakeClock
    ) -> None:
        store = _flow_store(store)
        [plain] = [new_job(clock)]
        store.insert_jobs([plain], now=clock.now())
        callback = new_job(clock)
        store.insert_flow([FlowJob(callback, on_success="tests.jobs:noop")], now=clock.now())
        head, _ = self.chain(store, clock, 2)
        _, children, _ = self.batch(store, clock, 2)
        flags = {j.job_id: j.flow_effects for j in self.claim(store, clock)}
        assert flags == {
            plain.job_id: False,
            callback.job_id: True,
            head.job_id: True,
            **{c.job_id: True for c in children},
        }

    # ------------------------------------------------------------------ batches
    def run_batch_concurrently(self, store: Any, clock: FakeClock, n: int, workers: int) -> None:
        store = _flow_store(store)
        parent, children, branches = self.batch(store, clock, n, branches=2)
        rng = random.Random(n)
        failing = {c.job_id for c in children if rng.random() < 0.1}
        child_ids = {c.job_id for c in children}

        def work(i: int) -> tuple[Counter[str], list[FlowEffect]]:
            node = f"node-{i}"
            done: Counter[str] = Counter()
            effects: list[FlowEffect] = []
            while True:
                jobs = self.claim(store, clock, node=node, limit=50)
                if not jobs:
                    return done, effects
                effects += self.finish(
                    store,
                    clock,
                    jobs,
                    lambda j: OutcomeKind.DEAD if j.job_id in failing else OutcomeKind.SUCCEEDED,
                    node=node,
                )
                done["jobs"] += sum(1 for j in jobs if j.job_id in child_ids)

        results = self.race(workers, work)
        assert sum(r[0]["jobs"] for r in results) == n, "every child ran exactly once"
        ctx = store.get_batch(parent.job_id)
        assert (ctx.total, ctx.completed, ctx.failed) == (n, n - len(failing), len(failing))
        completions = [e for r in results for e in r[1] if e.kind is EffectKind.BATCH_COMPLETED]
        assert len(completions) == 1, "completion processed exactly once"
        completed = completions[0].batch
        assert completed is not None and completed.processed == n
        assert store.batch_completion_processed(parent.job_id)
        assert self.status(store, parent.job_id) is JobStatus.SUCCEEDED
        on_success, on_failure = (self.status(store, b.job_id) for b in branches)
        assert failing, "the random failures hit some children"
        assert on_success is JobStatus.CANCELED
        assert on_failure in (JobStatus.PENDING, JobStatus.SUCCEEDED), "released once"

    def test_batch_counts_are_exact_under_concurrent_completions(
        self, store: Any, clock: FakeClock
    ) -> None:
        self.run_batch_concurrently(store, clock, 600, workers=4)

    def test_ten_thousand_children_three_workers(self, store: Any, clock: FakeClock) -> None:
        self.run_batch_concurrently(store, clock, 10_000, workers=3)

    def test_completion_is_processed_once_when_sealing_races_the_last_child(
        self, store: Any, clock: FakeClock
    ) -> None:
        store = _flow_store(store)
        parent, _children, _ = self.batch(store, clock, 20, sealed=False)
        jobs = self.claim(store, clock)
        effects = self.finish(store, clock, jobs)
        assert not [e for e in effects if e.kind is EffectKind.BATCH_COMPLETED], "not sealed"
        assert self.status(store, parent.job_id) is JobStatus.WAITING

        def seal(i: int) -> list[FlowEffect]:
            return list(store.seal_batch(parent.job_id, now=clock.now(), resolve=RESOLVE).effects)

        results = self.race(4, seal)
        completed = [e for r in results for e in r if e.kind is EffectKind.BATCH_COMPLETED]
        assert len(completed) == 1
        assert self.status(store, parent.job_id) is JobStatus.SUCCEEDED

    def test_streaming_chunks_add_to_the_total_until_sealed(
        self, store: Any, clock: FakeClock
    ) -> None:
        store = _flow_store(store)
        parent, _first, _ = self.batch(store, clock, 2, sealed=False)
        more = [
            FlowJob(new_job(clock), JobType.BATCH_CHILD, batch_id=parent.job_id) for _ in range(3)
        ]
        assert store.add_batch_children(parent.job_id, more, now=clock.now()) == 5
        self.finish(store, clock, self.claim(store, clock))
        ctx = store.get_batch(parent.job_id)
        assert (ctx.total, ctx.completed, ctx.sealed, ctx.is_complete) == (5, 5, False, False)
        sealed = store.seal_batch(parent.job_id, now=clock.now(), resolve=RESOLVE)
        assert sealed.value == store.get_batch(parent.job_id)
        assert [e.kind for e in sealed.effects] == [EffectKind.BATCH_COMPLETED]
        assert store.get_batch(parent.job_id).is_complete
        assert self.status(store, parent.job_id) is JobStatus.SUCCEEDED
        with pytest.raises(ValueError, match="not open"):
            store.add_batch_children(parent.job_id, more[:1], now=clock.now())

    def test_every_job_of_a_flow_is_claimed_with_its_trace_context(
        self, store: Any, clock: FakeClock
    ) -> None:
        store = _flow_store(store)
        context = trace_context("flow")
        self.chain(store, clock, 2, trace_context=context)
        [head] = self.claim(store, clock)
        assert head.trace_context == context
        self.finish(store, clock, [head])
        [step] = self.claim(store, clock)
        assert step.trace_context == context, "a released step keeps the context of its flow"
        self.finish(store, clock, [step])
        parent, _first, _ = self.batch(store, clock, 1, sealed=False)
        self.finish(store, clock, self.claim(store, clock))
        chunk = trace_context("chunk")
        later = FlowJob(
            new_job(clock, trace_context=chunk), JobType.BATCH_CHILD, batch_id=parent.job_id
        )
        store.add_batch_children(parent.job_id, [later], now=clock.now())
        [child] = self.claim(store, clock)
        assert (child.job_id, child.trace_context) == (later.job.job_id, chunk)

    def test_an_operator_retry_of_a_failed_child_is_not_counted_twice(
        self, store: Any, clock: FakeClock
    ) -> None:
        store = _flow_store(store)
        parent, _children, _ = self.batch(store, clock, 3)
        [first, *rest] = self.claim(store, clock)
        self.finish(store, clock, [first], OutcomeKind.DEAD)
        assert store.retry_job(first.job_id, now=clock.now())
        [again] = self.claim(store, clock, limit=1)
        assert again.job_id == first.job_id or again.job_id in {j.job_id for j in rest}
        self.finish(store, clock, [again, *[j for j in rest if j.job_id != again.job_id]])
        leftover = self.claim(store, clock)
        self.finish(store, clock, leftover)
        ctx = store.get_batch(parent.job_id)
        assert (ctx.total, ctx.completed, ctx.failed) == (3, 2, 1), "each child's first end"
        assert self.status(store, first.job_id) is JobStatus.SUCCEEDED
        assert self.status(store, parent.job_id) is JobStatus.SUCCEEDED

    def test_canceling_a_batch_cancels_live_children(self, store: Any, clock: FakeClock) -> None:
        store = _flow_store(store)
        parent, children, branches = self.batch(store, clock, 6, branches=2)
        running = self.claim(store, clock, limit=2)
        canceled = store.cancel_job(parent.job_id, now=clock.now(), resolve=RESOLVE)
        assert canceled.value
        assert canceled.effects == (), "a canceled batch never completes: nothing follows"
        assert {self.status(store, c.job_id) for c in children} == {JobStatus.CANCELED}
        assert {self.status(store, b.job_id) for b in branches} == {JobStatus.CANCELED}
        written = store.record_outcomes(
            NODE,
            [
                Outcome(
                    j.job_id, j.epoch, j.attempt, OutcomeKind.SUCCEEDED, clock.now(), clock.now()
                )
                for j in running
            ],
            now=clock.now(),
            resolve=RESOLVE,
        )
        assert written.fenced == tuple(j.job_id for j in running), (
            "the running children's results are fenced out"
        )
        assert written.effects == ()
        assert self.status(store, parent.job_id) is JobStatus.CANCELED

    def test_a_cancel_returns_what_the_end_it_caused_triggers(
        self, store: Any, clock: FakeClock
    ) -> None:
        """Canceling the last live child completes its batch in the canceling transaction; the
        cancel returns the effects (progress, completion, the branch it fired, the release)."""
        store = _flow_store(store)
        parent, children, branches = self.batch(
            store, clock, 3, branches=2, progress_hook="tests.jobs:progress"
        )
        [first, second, last] = children
        jobs = {j.job_id: j for j in self.claim(store, clock)}
        self.finish(store, clock, [jobs[first.job_id], jobs[second.job_id]])
        canceled = store.cancel_job(last.job_id, now=clock.now(), resolve=RESOLVE)
        assert canceled.value
        kinds = [e.kind for e in canceled.effects]
        assert kinds.count(EffectKind.BATCH_PROGRESS) == 1
        assert kinds.count(EffectKind.BATCH_COMPLETED) == 1
        [completed] = [e.batch for e in canceled.effects if e.kind is EffectKind.BATCH_COMPLETED]
        assert completed is not None and (completed.completed, completed.failed) == (2, 1)
        [fired] = [e for e in canceled.effects if e.kind is EffectKind.BRANCH_TRIGGERED]
        assert fired.job_id == branches[1].job_id, "a canceled child counts as failed"
        assert EffectKind.RELEASED in kinds
        assert {e.source for e in canceled.effects} == {last.job_id}
        assert self.status(store, parent.job_id) is JobStatus.SUCCEEDED
        assert self.released(store, branches) == [1]

    # ------------------------------------------------------------------ chains
    def test_chain_steps_are_released_one_by_one(self, store: Any, clock: FakeClock) -> None:
        store = _flow_store(store)
        steps = self.chain(store, clock, 3)
        for expected in steps:
            [job] = self.claim(store, clock)
            assert job.job_id == expected.job_id, "only the next step is claimable"
            effects = self.finish(store, clock, [job])
        assert {self.status(store, s.job_id) for s in steps} == {JobStatus.SUCCEEDED}
        assert [e.kind for e in effects if e.kind is EffectKind.CHAIN_COMPLETED] == [
            EffectKind.CHAIN_COMPLETED
        ]

    def test_a_failed_step_cancels_every_later_step(self, store: Any, clock: FakeClock) -> None:
        store = _flow_store(store)
        steps = self.chain(store, clock, 5)
        self.finish(store, clock, self.claim(store, clock))
        [second] = self.claim(store, clock)
        effects = self.finish(store, clock, [second], OutcomeKind.DEAD)
        assert [self.status(store, s.job_id) for s in steps] == [
            JobStatus.SUCCEEDED,
            JobStatus.FAILED,
            JobStatus.CANCELED,
            JobStatus.CANCELED,
            JobStatus.CANCELED,
        ]
        assert [e.job_id for e in effects if e.kind is EffectKind.CHAIN_FAILED] == [steps[0].job_id]
        assert self.claim(store, clock) == []

    def test_canceling_a_running_step_cascades(self, store: Any, clock: FakeClock) -> None:
        store = _flow_store(store)
        steps = self.chain(store, clock, 3)
        [head] = self.claim(store, clock)
        assert store.cancel_job(head.job_id, now=clock.now(), resolve=RESOLVE).value
        assert {self.status(store, s.job_id) for s in steps} == {JobStatus.CANCELED}

    def test_branches_follow_their_condition(self, store: Any, clock: FakeClock) -> None:
        store = _flow_store(store)
        parent = new_job(clock)
        on_ok, on_fail = (waiting(new_job(clock)) for _ in range(2))
        jobs = [FlowJob(parent, has_dependents=True)] + [
            FlowJob(b, JobType.WORKFLOW_BRANCH, depends_on=parent.job_id, waiting_for=parent.job_id)
            for b in (on_ok, on_fail)
        ]
        specs = [
            BranchSpec(parent.job_id, on_ok.job_id, WorkflowCondition.success(), 0),
            BranchSpec(parent.job_id, on_fail.job_id, WorkflowCondition.failure(), 1),
        ]
        store.insert_flow(jobs, now=clock.now(), branches=specs)
        self.finish(store, clock, self.claim(store, clock), OutcomeKind.DEAD)
        assert self.status(store, on_ok.job_id) is JobStatus.CANCELED
        assert self.status(store, on_fail.job_id) is JobStatus.PENDING

    def branches_of(
        self,
        store: Any,
        clock: FakeClock,
        parent: NewJob,
        conditions: Sequence[WorkflowCondition],
        *,
        first_match: bool = False,
        batch: BatchSpec | None = None,
        extra: Sequence[FlowJob] = (),
    ) -> list[NewJob]:
        """Insert ``parent`` with one branch per condition; returns the branch jobs."""
        children = [waiting(new_job(clock, target="tests.jobs:branch")) for _ in conditions]
        head = FlowJob(
            parent,
            JobType.BATCH_PARENT if batch is not None else JobType.SINGLE,
            has_dependents=True,
        )
        jobs = [head, *extra]
        jobs += [
            FlowJob(c, JobType.WORKFLOW_BRANCH, depends_on=parent.job_id, waiting_for=parent.job_id)
            for c in children
        ]
        specs = [
            BranchSpec(parent.job_id, c.job_id, cond, i, first_match, f"branch {i}")
            for i, (c, cond) in enumerate(zip(children, conditions, strict=True))
        ]
        store.insert_flow(jobs, now=clock.now(), branches=specs, batch=batch)
        return children

    def released(self, store: Any, jobs: Sequence[NewJob]) -> list[int]:
        """Indexes of the branch jobs that were released (PENDING)."""
        return [i for i, j in enumerate(jobs) if self.status(store, j.job_id) is JobStatus.PENDING]

    def job_conditions(self, priority_of_first: int = 0) -> list[WorkflowCondition]:
        return [
            WorkflowCondition.success(priority=priority_of_first),  # 0
            WorkflowCondition.failure(),  # 1
            WorkflowCondition(ConditionType.CUSTOM, f"{_HERE}:result_is_big"),  # 2
            WorkflowCondition(ConditionType.RESULT_VALUE, f"{_HERE}:value_is_even"),  # 3
            WorkflowCondition(ConditionType.CUSTOM, "no.such.module:predicate"),  # 4
        ]

    def test_each_job_condition_type_fans_out(self, store: Any, clock: FakeClock) -> None:
        store = _flow_store(store)
        ok, bad = new_job(clock), new_job(clock)
        ok_branches = self.branches_of(store, clock, ok, self.job_conditions())
        bad_branches = self.branches_of(store, clock, bad, self.job_conditions())
        jobs = {j.job_id: j for j in self.claim(store, clock)}
        self.finish(store, clock, [jobs[ok.job_id]], result="12")
        effects = self.finish(store, clock, [jobs[bad.job_id]], OutcomeKind.DEAD)
        assert self.released(store, ok_branches) == [0, 2, 3]
        assert self.released(store, bad_branches) == [1]
        assert {self.status(store, b.job_id) for b in ok_branches[1::3]} == {JobStatus.CANCELED}
        failed = [e for e in effects if e.kind is EffectKind.CONDITION_FAILED]
        assert len(failed) == 1, "the predicate that does not import is reported, not fired"

    def test_without_a_resolver_no_predicate_is_resolved(
        self, store: Any, clock: FakeClock
    ) -> None:
        """The store resolves predicates only through the resolver it is given: a write given
        none refuses every predicate (reported, not fired) and still applies the other
        conditions."""
        store = _flow_store(store)
        parent = new_job(clock)
        branches = self.branches_of(store, clock, parent, self.job_conditions()[:4])
        [job] = self.claim(store, clock)
        outcome = Outcome(
            job.job_id,
            job.epoch,
            job.attempt,
            OutcomeKind.SUCCEEDED,
            clock.now(),
            clock.now(),
            result="12",
        )
        written = store.record_outcomes(NODE, [outcome], now=clock.now())
        assert written.fenced == ()
        assert self.released(store, branches) == [0], "only SUCCESS fired"
        failed = [e for e in written.effects if e.kind is EffectKind.CONDITION_FAILED]
        assert [e.data["branch"] for e in failed] == [
            str(branches[2].job_id),
            str(branches[3].job_id),
        ]
        assert all("ClassPolicyViolation" in e.data["error"] for e in failed)

    def test_first_match_fires_only_the_first_by_priority(
        self, store: Any, clock: FakeClock
    ) -> None:
        store = _flow_store(store)
        parent = new_job(clock)
        # SUCCESS is demoted to priority 5: CUSTOM (definition 2) is the first match
        branches = self.branches_of(
            store, clock, parent, self.job_conditions(priority_of_first=5), first_match=True
        )
        effects = self.finish(store, clock, self.claim(store, clock), result="12")
        assert self.released(store, branches) == [2]
        triggered = [e for e in effects if e.kind is EffectKind.BRANCH_TRIGGERED]
        assert [e.data["description"] for e in triggered] == ["branch 2"]

    def test_each_batch_condition_type(self, store: Any, clock: FakeClock) -> None:
        store = _flow_store(store)
        parent = waiting(new_job(clock))
        children = [new_job(clock, max_retries=0) for _ in range(4)]
        conditions = [
            WorkflowCondition.batch_success(),  # 0
            WorkflowCondition.batch_failure(),  # 1
            WorkflowCondition.success_rate(0.5),  # 2
            WorkflowCondition.success_rate(0.51),  # 3
            WorkflowCondition.failure_count(2),  # 4: reached
            WorkflowCondition.failure_count(3),  # 5
            WorkflowCondition(ConditionType.BATCH_CUSTOM, f"{_HERE}:half_succeeded"),  # 6
        ]
        branches = self.branches_of(
            store,
            clock,
            parent,
            conditions,
            batch=BatchSpec(parent.job_id, "conditions", 4),
            extra=[FlowJob(c, JobType.BATCH_CHILD, batch_id=parent.job_id) for c in children],
        )
        failing = {children[0].job_id, children[1].job_id}
        effects = self.finish(
            store,
            clock,
            self.claim(store, clock),
            lambda j: OutcomeKind.DEAD if j.job_id in failing else OutcomeKind.SUCCEEDED,
        )
        assert self.released(store, branches) == [1, 2, 4, 6]
        [done] = [e.batch for e in effects if e.kind is EffectKind.BATCH_COMPLETED]
        assert done is not None and (done.completed, done.failed) == (2, 2)

    def test_a_chain_survives_its_worker_dying(self, store: Any, clock: FakeClock) -> None:
        store = _flow_store(store)
        ws = store.capability(WatcherStore)
        if ws is None:
            pytest.skip("N/A: the store has no WatcherStore capability")
        steps = self.chain(store, clock, 3)
        for node in ("doomed", "survivor"):
            ws.register_incarnation(NodeInfo(node, node, "host-1", 100, 4), now=clock.now())
        self.finish(store, clock, self.claim(store, clock, node="doomed"), node="doomed")
        [second] = self.claim(store, clock, node="doomed")  # then the node dies mid-step
        clock.advance(SETTINGS.dead_after)
        assert ws.beat("survivor", now=clock.now())
        now = clock.now()
        report = ws.watch(now=now, settings=SETTINGS, decide=lambda s: fail_or_retry(s, now))
        assert (report.dead_nodes, report.orphaned) == (("doomed",), 1)
        [again] = ws.takeover("survivor", 4, now=clock.now(), settings=SETTINGS)
        assert again.job_id == second.job_id and again.epoch == second.epoch + 1
        late = Outcome(
            second.job_id,
            second.epoch,
            second.attempt,
            OutcomeKind.SUCCEEDED,
            clock.now(),
            clock.now(),
        )
        written = store.record_outcomes("doomed", [late], now=clock.now(), resolve=RESOLVE)
        assert written.fenced == (second.job_id,)
        assert written.effects == (), "a fenced outcome releases nothing"
        assert self.status(store, steps[2].job_id) is JobStatus.WAITING
        self.finish(store, clock, [again], node="survivor")
        [third] = self.claim(store, clock, node="survivor")
        effects = self.finish(store, clock, [third], node="survivor")
        assert {self.status(store, s.job_id) for s in steps} == {JobStatus.SUCCEEDED}
        assert [e.kind for e in effects if e.kind is EffectKind.CHAIN_COMPLETED] == [
            EffectKind.CHAIN_COMPLETED
        ]

    def test_the_watcher_returns_what_a_stalled_step_it_fails_triggers(
        self, store: Any, clock: FakeClock
    ) -> None:
        """A chain step whose node died and that nobody took over is failed by the watcher
        (T9): the later steps are canceled in that transaction and the report carries the
        effects, as an outcome write would return them."""
        from ratchet.domain.watcher import NodeInfo
        from ratchet.testing.watcher_contract import SETTINGS, fail_or_retry

        store = _flow_store(store)
        watcher = store.capability(WatcherStore)
        if watcher is None:
            pytest.skip("N/A: the store has no WatcherStore capability")
        steps = self.chain(store, clock, 3, max_retries=0)
        watcher.register_incarnation(NodeInfo(NODE, NODE, "host-1", 100, 4), now=clock.now())
        [head] = self.claim(store, clock)

        def watch() -> Any:
            now = clock.now()
            return watcher.watch(
                now=now, settings=SETTINGS, decide=lambda s: fail_or_retry(s, now), resolve=RESOLVE
            )

        clock.advance(SETTINGS.dead_after)
        assert watch().orphaned == 1, "its node is silent: TIMED_OUT, eligible for takeover"
        clock.advance(SETTINGS.takeover_window)
        report = watch()
        assert [(o.job_id, o.kind) for o in report.expired] == [(head.job_id, OutcomeKind.DEAD)]
        assert [e.kind for e in report.effects] == [EffectKind.CHAIN_FAILED]
        assert report.effects[0].source == head.job_id
        assert [self.status(store, s.job_id) for s in steps] == [
            JobStatus.FAILED,
            JobStatus.CANCELED,
            JobStatus.CANCELED,
        ]

    # ------------------------------------------------------------------ signals
    def test_signal_by_id_is_atomic_and_idempotent(self, store: Any, clock: FakeClock) -> None:
        store = _flow_store(store)
        [job] = self.signal_jobs(store, clock, "approve")
        assert self.claim(store, clock) == [], "a waiting job is invisible"
        results = self.race(
            6, lambda i: store.deliver_signal(job.job_id, f'"{i}"', now=clock.now())
        )
        assert sorted(results) == [0, 0, 0, 0, 0, 1]
        winner = f'"{results.index(1)}"'
        assert store.read_signal(job.job_id) == winner
        [claimed] = self.claim(store, clock)
        assert claimed.job_id == job.job_id
        assert store.deliver_signal(job.job_id, '"late"', now=clock.now()) == 0

    def test_signal_by_key_releases_each_waiting_job_once(
        self, store: Any, clock: FakeClock
    ) -> None:
        store = _flow_store(store)
        jobs = self.signal_jobs(store, clock, "order-1", 25)
        others = self.signal_jobs(store, clock, "order-10", 2)
        results = self.race(
            5, lambda i: store.deliver_signal_by_key("order-1", '"go"', now=clock.now())
        )
        assert sum(results) == 25
        assert {self.status(store, j.job_id) for j in jobs} == {JobStatus.PENDING}
        assert {self.status(store, j.job_id) for j in others} == {JobStatus.WAITING}
        assert store.deliver_signal_by_key("ORDER-10", '"x"', now=clock.now()) == 0, "exact keys"

    def test_a_chain_step_is_never_released_by_a_signal(self, store: Any, clock: FakeClock) -> None:
        store = _flow_store(store)
        parent, _, branches = self.batch(store, clock, 1, branches=1)
        assert store.deliver_signal(parent.job_id, '"x"', now=clock.now()) == 0
        assert store.deliver_signal(branches[0].job_id, '"x"', now=clock.now()) == 0

    def test_signal_timeouts_fail_or_rearm_once_across_scanners(
        self, store: Any, clock: FakeClock
    ) -> None:
        store = _flow_store(store)
        once = self.signal_jobs(store, clock, "t", 30, max_retries=0)
        retried = self.signal_jobs(store, clock, "t", 10, max_retries=1)
        clock.advance(timedelta(minutes=4))
        assert self.expire(store, clock, 100).value == 0
        clock.advance(timedelta(minutes=2))
        counts = self.race(
            4,
            lambda i: self.expire(store, clock, 7).value + self.expire(store, clock, 100).value,
        )
        assert sum(counts) == 40, "every expired wait handled exactly once"
        assert {self.status(store, j.job_id) for j in once} == {JobStatus.FAILED}
        assert "SignalTimeoutError" in (store.get_job(once[0].job_id).last_error or "")
        assert {self.status(store, j.job_id) for j in retried} == {JobStatus.WAITING}
        assert {store.get_job(j.job_id).attempts for j in retried} == {1}
        clock.advance(timedelta(minutes=6))
        assert self.expire(store, clock, 100).value == 10
        assert {self.status(store, j.job_id) for j in retried} == {JobStatus.FAILED}
