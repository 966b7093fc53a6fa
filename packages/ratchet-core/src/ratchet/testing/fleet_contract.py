"""Conformance suite of a heterogeneous fleet: node tag affinity, schedule-to-start, takeover
policies, per execution type limits.

Claims, reservations and takeovers leave jobs whose affinity the node's tags do not satisfy in
the database (compared with :meth:`ratchet.domain.affinity.Affinity.allows`); the stranded-job
query lists what no live node may run; a job that misses its schedule-to-start deadline fails
without running (the watcher's T14); a takeover restarts, resumes or refuses a stalled job as
its policy says; per execution type limits admit exactly as many attempts as their rate and cap
allow, racing admissions included. Subclass :class:`FleetStoreContract` where the ``store`` and ``clock`` fixtures
exist; a store without the capabilities skips as N/A.
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest

from ratchet.domain.affinity import Affinity
from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.model import OutcomeKind
from ratchet.domain.takeover import TakeoverPolicy
from ratchet.domain.type_limits import RATE_WINDOW, TypeDecision, TypeLimit
from ratchet.domain.watcher import NodeInfo, WatcherSettings
from ratchet.ports import AffinityStore, TypeLimitStore, WatcherStore
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import BOOST, NODE, OTHER, new_job, outcome
from ratchet.testing.watcher_contract import SETTINGS, WatcherStoreContract, fail_or_retry

GPU = frozenset({"gpu"})
EU = frozenset({"eu"})
#: One job of each shape, and node tag sets covering every combination of their tags.
AFFINITIES = (
    Affinity(),
    Affinity(GPU),
    Affinity(exclude=EU),
    Affinity(GPU | EU),
    Affinity(GPU, EU),
    Affinity(frozenset({"arm64"})),
)
TAG_SETS: tuple[frozenset[str], ...] = (frozenset(), GPU, EU, GPU | EU, frozenset({"arm64", "eu"}))
US = timedelta(microseconds=1)


class FleetStoreContract:
    """Affinity, T14 and takeover-policy rules every store must keep."""

    ws = WatcherStoreContract.ws

    def node(
        self, ws: WatcherStore, clock: FakeClock, node_id: str, tags: frozenset[str] = frozenset()
    ) -> None:
        info = NodeInfo(node_id, node_id, "host-1", 100, 8, 4, tags=tags)
        ws.register_incarnation(info, now=clock.now())

    def watch(
        self, ws: WatcherStore, clock: FakeClock, settings: WatcherSettings = SETTINGS
    ) -> Any:
        now = clock.now()
        return ws.watch(now=now, settings=settings, decide=lambda s: fail_or_retry(s, now))

    # ------------------------------------------------------------------ affinity
    def test_the_claim_takes_only_jobs_the_node_tags_allow(
        self, store: Any, clock: FakeClock
    ) -> None:
        """Whatever the node's tags, a claim returns exactly the due jobs they allow (up to the
        limit), and the others stay PENDING for a node that may run them."""
        pending: dict[Any, Affinity] = {}
        for round_no, tags in enumerate(itertools.chain(TAG_SETS, reversed(TAG_SETS))):
            jobs = [new_job(clock, affinity=a) for a in AFFINITIES for _ in range(2)]
            store.insert_jobs(jobs, now=clock.now())
            pending.update({j.job_id: j.affinity for j in jobs})
            allowed = {jid for jid, a in pending.items() if a.allows(tags)}
            node = f"node-{round_no}"
            claimed = store.claim(node, 1000, now=clock.now(), boost_interval=BOOST, node_tags=tags)
            assert {c.job_id for c in claimed} == allowed, tags
            for jid in allowed:
                del pending[jid]
            clock.advance(timedelta(seconds=1))
        assert pending, "the last round left jobs its tags do not allow"
        for jid in pending:
            assert store.get_job(jid).status is JobStatus.PENDING

    def test_affinity_is_stored_and_read_back(self, store: Any, clock: FakeClock) -> None:
        job = new_job(clock, affinity=Affinity(GPU | EU, frozenset({"spot"})))
        plain = new_job(clock)
        store.insert_jobs([job, plain], now=clock.now())
        assert store.get_job(job.job_id).affinity == job.affinity
        assert store.get_job(plain.job_id).affinity == Affinity()
        # a partial claim: the limit counts only jobs the node may run
        [claimed] = store.claim(
            NODE, 1, now=clock.now(), boost_interval=BOOST, node_tags=frozenset({"gpu", "eu"})
        )
        assert claimed.job_id in (job.job_id, plain.job_id)

    def test_reservation_and_takeover_respect_affinity(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        self.node(ws, clock, NODE, GPU)
        self.node(ws, clock, OTHER)  # no tags
        self.node(ws, clock, "node-c", GPU)
        gpu_job, any_job = new_job(clock, affinity=Affinity(GPU)), new_job(clock)
        store.insert_jobs([gpu_job, any_job], now=clock.now())
        reserved = ws.reserve(OTHER, 5, now=clock.now(), boost_interval=BOOST)
        assert [r.job_id for r in reserved] == [any_job.job_id], "no reservation of a gpu job"
        [mine] = ws.reserve(NODE, 5, now=clock.now(), boost_interval=BOOST, node_tags=GPU)
        assert mine.job_id == gpu_job.job_id
        assert ws.start_reserved(NODE, mine.job_id, mine.epoch, now=clock.now())
        # NODE dies: its gpu job may be taken over by a gpu node only
        clock.advance(SETTINGS.dead_after)
        for n in (OTHER, "node-c"):
            assert ws.beat(n, now=clock.now())
        assert self.watch(ws, clock).orphaned == 1
        assert ws.takeover(OTHER, 4, now=clock.now(), settings=SETTINGS) == []
        work = ws.acquire_work(OTHER, 4, now=clock.now(), settings=SETTINGS, boost_interval=BOOST)
        assert work.taken == ()
        [taken] = ws.takeover("node-c", 4, now=clock.now(), settings=SETTINGS, node_tags=GPU)
        assert (taken.job_id, taken.epoch) == (gpu_job.job_id, mine.epoch + 1)

    def test_acquire_work_claims_by_node_tags(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        """The poll's claim (one statement where the dialect has it) filters like the claim."""
        self.node(ws, clock, NODE, EU)
        jobs = [new_job(clock, affinity=a) for a in AFFINITIES]
        store.insert_jobs(jobs, now=clock.now())
        work = ws.acquire_work(
            NODE, 10, now=clock.now(), settings=SETTINGS, boost_interval=BOOST, node_tags=EU
        )
        assert {c.job_id for c in work.claimed} == {j.job_id for j in jobs if j.affinity.allows(EU)}

    def test_stranded_jobs_are_those_no_live_node_may_run(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        affinity_store = store.capability(AffinityStore)
        if affinity_store is None:
            pytest.skip("N/A: the store has no AffinityStore capability")
        gpu, not_eu, anywhere = (
            new_job(clock, affinity=Affinity(GPU)),
            new_job(clock, affinity=Affinity(exclude=EU)),
            new_job(clock),
        )
        store.insert_jobs([gpu, not_eu, anywhere], now=clock.now())
        # no node at all: every job with affinity is stranded (a plain job is not listed)
        assert {s.job_id for s in affinity_store.stranded_jobs()} == {gpu.job_id, not_eu.job_id}
        self.node(ws, clock, NODE, EU)  # it may run neither: one needs gpu, one excludes eu
        assert len(affinity_store.stranded_jobs()) == 2
        self.node(ws, clock, "node-c", frozenset({"arm64"}))
        [s] = affinity_store.stranded_jobs()
        assert (s.job_id, s.status, s.affinity) == (gpu.job_id, "PENDING", Affinity(GPU))
        self.node(ws, clock, OTHER, GPU | EU)
        assert affinity_store.stranded_jobs() == []
        # a dead node satisfies nothing
        assert ws.declare_dead([OTHER], now=clock.now()) == [OTHER]
        assert [s.job_id for s in affinity_store.stranded_jobs()] == [gpu.job_id]
        assert affinity_store.stranded_jobs(limit=0) == []

    # ------------------------------------------------------------------ T14
    def test_a_job_not_started_by_its_deadline_fails_without_running(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        deadline = timedelta(seconds=30)
        late = new_job(clock, schedule_to_start=deadline, affinity=Affinity(GPU))
        started = new_job(clock, schedule_to_start=deadline)
        delayed = new_job(
            clock, schedule_to_start=deadline, scheduled_time=clock.now() + timedelta(minutes=1)
        )
        untimed = new_job(clock, affinity=Affinity(GPU))
        store.insert_jobs([late, started, delayed, untimed], now=clock.now())
        [claimed] = store.claim(NODE, 10, now=clock.now(), boost_interval=BOOST)
        assert claimed.job_id == started.job_id
        retry = outcome(claimed, OutcomeKind.RETRY, clock, retry_at=clock.now() + deadline * 3)
        assert store.record_outcomes(NODE, [retry], now=clock.now()).fenced == ()
        clock.advance(deadline - US)
        assert self.watch(ws, clock).missed_start == ()
        clock.advance(US)
        report = self.watch(ws, clock)
        assert report.missed_start == (late.job_id,)
        assert self.watch(ws, clock).missed_start == (), "once"
        record = store.get_job(late.job_id)
        assert record.status is JobStatus.FAILED
        assert record.last_error is not None and "JobStartDeadlineMissed" in record.last_error
        assert store.attempts(late.job_id) == [], "it never ran"
        clock.advance(deadline * 3)  # a started job is not failed by it again
        assert self.watch(ws, clock).missed_start == (delayed.job_id,), "measured from its due time"
        assert store.get_job(started.job_id).status is JobStatus.PENDING
        assert store.get_job(untimed.job_id).status is JobStatus.PENDING

    def test_a_reserved_job_keeps_its_deadline_until_it_starts(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        self.node(ws, clock, NODE)
        deadline = timedelta(seconds=30)
        a, b = (new_job(clock, schedule_to_start=deadline) for _ in range(2))
        store.insert_jobs([a, b], now=clock.now())
        reserved = {r.job_id: r for r in ws.reserve(NODE, 5, now=clock.now(), boost_interval=BOOST)}
        assert ws.start_reserved(NODE, a.job_id, reserved[a.job_id].epoch, now=clock.now())
        clock.advance(SETTINGS.queued_stall)  # b's reservation is revoked: PENDING again
        assert ws.beat(NODE, now=clock.now())
        assert self.watch(ws, clock).revoked == 1
        clock.advance(deadline)
        assert ws.beat(NODE, now=clock.now())
        assert self.watch(ws, clock).missed_start == (b.job_id,)
        assert store.get_job(a.job_id).status is JobStatus.RUNNING

    # ------------------------------------------------------------------ takeover policies
    def orphan(
        self, store: Any, ws: WatcherStore, clock: FakeClock, policy: TakeoverPolicy | None
    ) -> Any:
        """A job RUNNING on :data:`NODE` with a checkpoint, NODE dead, the job TIMED_OUT."""
        self.node(ws, clock, NODE)
        self.node(ws, clock, OTHER)
        store.insert_jobs([new_job(clock, takeover_policy=policy, max_retries=1)], now=clock.now())
        [job] = store.claim(NODE, 1, now=clock.now(), boost_interval=BOOST)
        ws.record_progress(NODE, job.job_id, job.epoch, now=clock.now(), step=2, data={"n": 2})
        clock.advance(SETTINGS.dead_after)
        assert ws.beat(OTHER, now=clock.now())
        assert self.watch(ws, clock).orphaned == 1
        return job

    def test_resume_keeps_the_checkpoint_and_the_attempt(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        job = self.orphan(store, ws, clock, TakeoverPolicy.RESUME)
        [taken] = ws.takeover(OTHER, 1, now=clock.now(), settings=SETTINGS)
        assert (taken.job_id, taken.attempt) == (job.job_id, job.attempt)
        checkpoint = ws.last_checkpoint(job.job_id)
        assert checkpoint is not None and (checkpoint.step, checkpoint.data) == (2, {"n": 2})
        assert store.get_job(job.job_id).takeover_policy is TakeoverPolicy.RESUME

    def test_restart_drops_the_checkpoint_and_counts_the_attempt(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        job = self.orphan(store, ws, clock, TakeoverPolicy.RESTART)
        [taken] = ws.takeover(OTHER, 1, now=clock.now(), settings=SETTINGS)
        assert (taken.job_id, taken.epoch, taken.attempt) == (
            job.job_id,
            job.epoch + 1,
            job.attempt + 1,
        )
        assert ws.last_checkpoint(job.job_id) is None
        assert store.get_job(job.job_id).attempts == 1, "the stalled attempt counted"
        done = outcome(taken, OutcomeKind.SUCCEEDED, clock)
        assert store.record_outcomes(OTHER, [done], now=clock.now()).fenced == ()
        assert [a.attempt for a in store.attempts(job.job_id)] == [1, 2]

    def test_fail_is_never_taken_over_and_fails_through_the_retry_policy(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        job = self.orphan(store, ws, clock, TakeoverPolicy.FAIL)
        assert ws.takeover(OTHER, 1, now=clock.now(), settings=SETTINGS) == []
        work = ws.acquire_work(OTHER, 4, now=clock.now(), settings=SETTINGS, boost_interval=BOOST)
        assert work.taken == ()
        report = self.watch(ws, clock)
        [failed] = report.expired
        assert (failed.job_id, failed.kind) == (job.job_id, OutcomeKind.RETRY), "retries left"
        assert failed.error is not None and "takeover policy is FAIL" in failed.error
        assert store.get_job(job.job_id).status is JobStatus.PENDING

    # ------------------------------------------------------------------ per execution type limits
    @pytest.fixture
    def types(self, store: Any) -> TypeLimitStore:
        cap = store.capability(TypeLimitStore)
        if cap is None:
            pytest.skip("N/A: the store has no TypeLimitStore capability")
        return cap  # type: ignore[no-any-return]

    def test_type_limits_are_stored_replaced_and_removed(
        self, types: TypeLimitStore, clock: FakeClock
    ) -> None:
        limit = TypeLimit("app.jobs:Send", rate_per_minute=10, max_concurrent=2)
        types.set_type_limit(limit, now=clock.now())
        assert types.get_type_limit("app.jobs:Send") == limit
        assert types.get_type_limit("app.jobs:send") is None, "targets compare exactly"
        again = TypeLimit("app.jobs:Send", max_concurrent=5, retry_delay=timedelta(seconds=9))
        types.set_type_limit(again, now=clock.now())
        assert types.list_type_limits() == [again]
        assert types.delete_type_limit("app.jobs:Send")
        assert not types.delete_type_limit("app.jobs:Send")
        assert types.list_type_limits() == []

    def test_the_rate_admits_n_starts_per_minute_cluster_wide(
        self, store: Any, types: TypeLimitStore, clock: FakeClock
    ) -> None:
        target = "tests.jobs:noop"
        types.set_type_limit(TypeLimit(target, rate_per_minute=3), now=clock.now())
        store.insert_jobs([new_job(clock) for _ in range(5)], now=clock.now())
        jobs = store.claim(NODE, 5, now=clock.now(), boost_interval=BOOST)
        t0 = clock.now()
        decisions = []
        for i, job in enumerate(jobs):
            node = NODE if i % 2 else OTHER  # two nodes share the budget
            decisions.append(types.admit_type(target, job.job_id, job.epoch, node, now=clock.now()))
            clock.advance(timedelta(seconds=10))
        assert [d.admitted for d in decisions] == [True, True, True, False, False]
        assert decisions[3].retry_at == t0 + RATE_WINDOW, "when the first start leaves the window"
        assert types.admit_type(target, jobs[0].job_id, jobs[0].epoch, NODE, now=clock.now())
        clock.advance(t0 + RATE_WINDOW - clock.now())
        later = types.admit_type(target, jobs[3].job_id, jobs[3].epoch, NODE, now=clock.now())
        assert later.admitted

    def test_the_cap_counts_attempts_that_still_execute(
        self, store: Any, ws: WatcherStore, types: TypeLimitStore, clock: FakeClock
    ) -> None:
        target = "tests.jobs:noop"
        types.set_type_limit(TypeLimit(target, max_concurrent=2), now=clock.now())
        store.insert_jobs([new_job(clock) for _ in range(4)], now=clock.now())
        a, b, c, d = store.claim(NODE, 4, now=clock.now(), boost_interval=BOOST)

        def admit(job: Any) -> TypeDecision:
            return types.admit_type(target, job.job_id, job.epoch, NODE, now=clock.now())

        assert admit(a).admitted and admit(b).admitted
        refused = admit(c)
        assert not refused.admitted and refused.retry_at == clock.now() + timedelta(seconds=5)
        assert refused.reason is not None and "2/2" in refused.reason
        assert types.release_type(a.job_id, a.epoch)
        assert admit(c).admitted, "a released attempt frees its place"
        # an attempt that ended without a release (its outcome was written) stops counting too
        assert (
            store.record_outcomes(
                NODE, [outcome(b, OutcomeKind.SUCCEEDED, clock)], now=clock.now()
            ).fenced
            == ()
        )
        assert admit(d).admitted
        assert not admit(new_claim(store, clock)).admitted

    def test_racing_admissions_never_exceed_the_cap(
        self, store: Any, types: TypeLimitStore, clock: FakeClock
    ) -> None:
        import threading

        target = "tests.jobs:noop"
        types.set_type_limit(TypeLimit(target, max_concurrent=3), now=clock.now())
        store.insert_jobs([new_job(clock) for _ in range(12)], now=clock.now())
        jobs = store.claim(NODE, 12, now=clock.now(), boost_interval=BOOST)
        admitted: list[bool] = []
        barrier = threading.Barrier(4)

        def admit(mine: list[Any]) -> None:
            barrier.wait()
            for j in mine:
                decision = types.admit_type(target, j.job_id, j.epoch, NODE, now=clock.now())
                admitted.append(decision.admitted)

        threads = [threading.Thread(target=admit, args=(jobs[i::4],)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert len(admitted) == 12 and admitted.count(True) == 3


def new_claim(store: Any, clock: FakeClock) -> Any:
    """One more job, claimed by :data:`NODE`."""
    store.insert_jobs([new_job(clock)], now=clock.now())
    [job] = store.claim(NODE, 1, now=clock.now(), boost_interval=BOOST)
    return job
