"""Conformance suite of the :class:`~ratchet.ports.PermitStore` capability (resource permits).

Subclass :class:`PermitStoreContract` where the ``store`` and ``clock`` fixtures exist (the same
fixtures :class:`~ratchet.testing.store_contract.StoreContract` uses). A store without the
capability skips every test as N/A.
"""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest

from ratchet.domain.errors import InvalidJobOptions
from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.model import ClaimedJob, OutcomeKind
from ratchet.domain.resources import PermitDecision, ResourceLimit
from ratchet.domain.watcher import NodeInfo, WatcherReport
from ratchet.ports import PermitStore, WatcherStore
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import BOOST, NODE, OTHER, new_job, outcome
from ratchet.testing.watcher_contract import SETTINGS, US, fail_or_retry

RES = "payment-api"


class PermitStoreContract:
    """Resource limits and permits: exact, fenced, reclaimed. Needs ``store`` and ``clock``."""

    @pytest.fixture
    def permits(self, store: Any) -> PermitStore:
        cap = store.capability(PermitStore)
        if cap is None:
            pytest.skip("N/A: the store has no PermitStore capability")
        return cap  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ helpers
    def running(
        self, store: Any, clock: FakeClock, n: int = 1, node: str = NODE, **overrides: Any
    ) -> list[ClaimedJob]:
        """``n`` jobs claimed by ``node`` (RUNNING, epoch 1)."""
        jobs = [new_job(clock, **overrides) for _ in range(n)]
        store.insert_jobs(jobs, now=clock.now())
        claimed = list(store.claim(node, n, now=clock.now(), boost_interval=BOOST))
        assert {c.job_id for c in claimed} == {j.job_id for j in jobs}
        return claimed

    def acquire(
        self, permits: PermitStore, job: ClaimedJob, clock: FakeClock, node: str = NODE
    ) -> PermitDecision:
        return permits.acquire_permit(RES, job.job_id, job.epoch, node, now=clock.now())

    def watcher(self, store: Any) -> WatcherStore:
        """The store's watcher capability (node liveness, hand-back and takeover)."""
        ws = store.capability(WatcherStore)
        if ws is None:
            pytest.skip("N/A: the store has no WatcherStore capability")
        return ws  # type: ignore[no-any-return]

    def register(self, ws: WatcherStore, clock: FakeClock, *nodes: str) -> None:
        for node in nodes:
            ws.register_incarnation(NodeInfo(node, node, "host-1", 100, 4), now=clock.now())

    def watch(self, ws: WatcherStore, clock: FakeClock) -> WatcherReport:
        now = clock.now()
        return ws.watch(now=now, settings=SETTINGS, decide=lambda s: fail_or_retry(s, now))

    # ------------------------------------------------------------------ limits
    def test_limits_round_trip_and_update(self, permits: PermitStore, clock: FakeClock) -> None:
        assert permits.get_resource_limit(RES) is None
        permits.set_resource_limit(
            ResourceLimit(RES, 5, timedelta(seconds=2), "card processor"), now=clock.now()
        )
        permits.set_resource_limit(ResourceLimit("smtp", 1), now=clock.now())
        assert permits.get_resource_limit(RES) == ResourceLimit(
            RES, 5, timedelta(seconds=2), "card processor"
        )
        permits.set_resource_limit(
            ResourceLimit(RES, 7, timedelta(milliseconds=250)), now=clock.now()
        )
        assert [
            (lim.name, lim.max_concurrent, lim.retry_delay)
            for lim in permits.list_resource_limits()
        ] == [
            (RES, 7, timedelta(milliseconds=250)),
            ("smtp", 1, timedelta(seconds=5)),
        ]
        assert permits.delete_resource_limit("smtp")
        assert not permits.delete_resource_limit("smtp")
        assert [lim.name for lim in permits.list_resource_limits()] == [RES]

    @pytest.mark.parametrize(
        ("max_concurrent", "delay"),
        [
            (-1, timedelta(seconds=1)),
            (1, timedelta(0)),
            (1, timedelta(seconds=-1)),
            (True, timedelta(1)),
        ],
    )
    def test_bad_limits_are_refused(self, max_concurrent: Any, delay: timedelta) -> None:
        with pytest.raises(InvalidJobOptions):
            ResourceLimit(RES, max_concurrent, delay)

    def test_concurrent_registration_of_one_limit(
        self, permits: PermitStore, clock: FakeClock
    ) -> None:
        errors: list[BaseException] = []
        barrier = threading.Barrier(4)

        def register(n: int) -> None:
            try:
                barrier.wait()
                permits.set_resource_limit(ResourceLimit(RES, n), now=clock.now())
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=register, args=(n,)) for n in range(1, 5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        limit = permits.get_resource_limit(RES)
        assert limit is not None and limit.max_concurrent in {1, 2, 3, 4}

    # ------------------------------------------------------------------ acquiring
    def test_resource_without_limit_is_unlimited(
        self, store: Any, permits: PermitStore, clock: FakeClock
    ) -> None:
        jobs = self.running(store, clock, n=12)
        decisions = [self.acquire(permits, j, clock) for j in jobs]
        assert all(d.granted and d.limit is None for d in decisions)
        assert decisions[-1].in_use == 12
        assert len(permits.list_permits(RES)) == 12

    def test_limit_caps_permits_and_release_frees_one(
        self, store: Any, permits: PermitStore, clock: FakeClock
    ) -> None:
        permits.set_resource_limit(ResourceLimit(RES, 2, timedelta(seconds=3)), now=clock.now())
        a, b, c = self.running(store, clock, n=3)
        assert self.acquire(permits, a, clock).granted
        second = self.acquire(permits, b, clock)
        assert (second.granted, second.in_use, second.limit) == (True, 2, 2)
        refused = self.acquire(permits, c, clock)
        assert (refused.granted, refused.owned, refused.in_use) == (False, True, 2)
        assert refused.retry_delay == timedelta(seconds=3)
        assert {p.job_id for p in permits.list_permits(RES)} == {a.job_id, b.job_id}
        assert permits.release_permit(a.job_id, a.epoch)
        assert not permits.release_permit(a.job_id, a.epoch), "released once only"
        assert self.acquire(permits, c, clock).granted

    def test_zero_limit_holds_every_job_back(
        self, store: Any, permits: PermitStore, clock: FakeClock
    ) -> None:
        permits.set_resource_limit(ResourceLimit(RES, 0, timedelta(seconds=1)), now=clock.now())
        [job] = self.running(store, clock)
        assert not self.acquire(permits, job, clock).granted
        permits.delete_resource_limit(RES)
        assert self.acquire(permits, job, clock).granted

    def test_acquire_is_idempotent_per_attempt(
        self, store: Any, permits: PermitStore, clock: FakeClock
    ) -> None:
        permits.set_resource_limit(ResourceLimit(RES, 1), now=clock.now())
        [job] = self.running(store, clock)
        assert self.acquire(permits, job, clock).granted
        again = self.acquire(permits, job, clock)
        assert (again.granted, again.in_use) == (True, 1)
        assert len(permits.list_permits()) == 1

    def test_permits_of_one_resource_do_not_count_for_another(
        self, store: Any, permits: PermitStore, clock: FakeClock
    ) -> None:
        permits.set_resource_limit(ResourceLimit(RES, 1), now=clock.now())
        a, b = self.running(store, clock, n=2)
        assert permits.acquire_permit("smtp", a.job_id, a.epoch, NODE, now=clock.now()).granted
        assert self.acquire(permits, b, clock).granted
        assert [p.resource_name for p in permits.list_permits("smtp")] == ["smtp"]

    def test_only_the_owning_attempt_can_acquire(
        self, store: Any, permits: PermitStore, clock: FakeClock
    ) -> None:
        [job] = self.running(store, clock)
        wrong_node = self.acquire(permits, job, clock, node=OTHER)
        assert (wrong_node.granted, wrong_node.owned) == (False, False)
        stale = permits.acquire_permit(RES, job.job_id, job.epoch - 1, NODE, now=clock.now())
        assert (stale.granted, stale.owned) == (False, False)
        assert store.cancel_job(job.job_id, now=clock.now()).value
        canceled = self.acquire(permits, job, clock)
        assert (canceled.granted, canceled.owned) == (False, False)
        assert permits.list_permits() == []

    def test_acquisition_is_exact_under_concurrency(
        self, store: Any, permits: PermitStore, clock: FakeClock
    ) -> None:
        limit = 3
        permits.set_resource_limit(ResourceLimit(RES, limit), now=clock.now())
        jobs = self.running(store, clock, n=16)
        granted: list[uuid.UUID] = []
        errors: list[BaseException] = []
        lock = threading.Lock()
        barrier = threading.Barrier(8)

        def contend(chunk: list[ClaimedJob]) -> None:
            try:
                barrier.wait()
                for job in chunk:
                    if self.acquire(permits, job, clock).granted:
                        with lock:
                            granted.append(job.job_id)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=contend, args=(jobs[i::8],)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert len(granted) == limit
        assert {p.job_id for p in permits.list_permits(RES)} == set(granted)

    def test_a_new_attempt_takes_its_own_permit(
        self, store: Any, permits: PermitStore, clock: FakeClock
    ) -> None:
        """A zombie attempt keeps counting until it releases: the permit is per (job, epoch)."""
        ws = self.watcher(store)
        self.register(ws, clock, NODE, OTHER)
        permits.set_resource_limit(ResourceLimit(RES, 2), now=clock.now())
        [first] = self.running(store, clock)
        assert self.acquire(permits, first, clock).granted
        assert ws.hand_back(NODE, [first.job_id], now=clock.now(), settings=SETTINGS) == (0, 1)
        [second] = ws.takeover(OTHER, 1, now=clock.now(), settings=SETTINGS)
        assert (second.job_id, second.epoch) == (first.job_id, first.epoch + 1)
        decision = self.acquire(permits, second, clock, node=OTHER)
        assert (decision.granted, decision.in_use) == (True, 2)
        assert permits.release_permit(first.job_id, first.epoch)
        assert [(p.job_id, p.epoch, p.node_id) for p in permits.list_permits()] == [
            (second.job_id, second.epoch, OTHER)
        ]

    # ------------------------------------------------------------------ reclaiming
    def test_a_node_declared_dead_by_the_watcher_loses_its_permits(
        self, store: Any, permits: PermitStore, clock: FakeClock
    ) -> None:
        ws = self.watcher(store)
        permits.set_resource_limit(ResourceLimit(RES, 2), now=clock.now())
        self.register(ws, clock, NODE, OTHER)
        [dead_job] = self.running(store, clock, node=NODE)
        [live_job] = self.running(store, clock, node=OTHER)
        assert self.acquire(permits, dead_job, clock).granted
        assert self.acquire(permits, live_job, clock, node=OTHER).granted
        clock.advance(SETTINGS.dead_after - US)
        assert ws.beat(OTHER, now=clock.now())
        assert self.watch(ws, clock).dead_nodes == ()
        assert len(permits.list_permits(RES)) == 2, "a node within its deadline keeps its permits"
        clock.advance(US)
        assert self.watch(ws, clock).dead_nodes == (NODE,)
        assert [(p.job_id, p.node_id) for p in permits.list_permits(RES)] == [
            (live_job.job_id, OTHER)
        ]
        [again] = ws.takeover(OTHER, 1, now=clock.now(), settings=SETTINGS)
        assert (again.job_id, again.epoch) == (dead_job.job_id, dead_job.epoch + 1)
        assert self.acquire(permits, again, clock, node=OTHER).granted

    def test_a_node_declared_dead_explicitly_loses_its_permits_at_once(
        self, store: Any, permits: PermitStore, clock: FakeClock
    ) -> None:
        """The engine declares its own previous incarnations dead on start (``declare_dead``)."""
        ws = self.watcher(store)
        self.register(ws, clock, NODE, OTHER)
        [dead_job] = self.running(store, clock, node=NODE)
        [live_job] = self.running(store, clock, node=OTHER)
        assert self.acquire(permits, dead_job, clock).granted
        assert self.acquire(permits, live_job, clock, node=OTHER).granted
        assert ws.declare_dead([NODE], now=clock.now()) == [NODE]
        assert [p.node_id for p in permits.list_permits()] == [OTHER]
        assert ws.declare_dead([NODE], now=clock.now()) == []
        assert [p.node_id for p in permits.list_permits()] == [OTHER]

    def test_a_watcher_pass_reclaims_permits_of_vanished_nodes(
        self, store: Any, permits: PermitStore, clock: FakeClock
    ) -> None:
        """A node that deregistered (or never registered) while a permit of its attempt was
        still held never dies: the watcher reclaims the permit once it is ``dead_after`` old.
        Permits of live nodes stay, however old."""
        ws = self.watcher(store)
        self.register(ws, clock, NODE, OTHER)
        [job] = self.running(store, clock, node=NODE)
        [live_job] = self.running(store, clock, node=OTHER)
        [ghost_job] = self.running(store, clock, node="ghost")
        assert self.acquire(permits, job, clock).granted
        assert self.acquire(permits, live_job, clock, node=OTHER).granted
        assert self.acquire(permits, ghost_job, clock, node="ghost").granted
        assert ws.set_draining(NODE, now=clock.now())
        assert ws.hand_back(NODE, None, now=clock.now(), settings=SETTINGS) == (0, 1)
        store.deregister_node(NODE)
        clock.advance(SETTINGS.dead_after - US)
        assert ws.beat(OTHER, now=clock.now())
        self.watch(ws, clock)
        assert len(permits.list_permits()) == 3, "too fresh"
        clock.advance(US)
        assert ws.beat(OTHER, now=clock.now())
        self.watch(ws, clock)
        assert [(p.job_id, p.node_id) for p in permits.list_permits()] == [(live_job.job_id, OTHER)]
        clock.advance(SETTINGS.dead_node_retention)
        assert ws.beat(OTHER, now=clock.now())
        self.watch(ws, clock)
        assert [p.node_id for p in permits.list_permits()] == [OTHER], "a live node keeps its own"

    def test_reclaim_permits_of_vanished_nodes(
        self, store: Any, permits: PermitStore, clock: FakeClock
    ) -> None:
        ws = self.watcher(store)
        self.register(ws, clock, NODE)
        [job] = self.running(store, clock)
        assert self.acquire(permits, job, clock).granted
        grace = timedelta(seconds=30)
        assert permits.reclaim_permits(now=clock.now(), grace=grace) == 0
        store.deregister_node(NODE)
        assert permits.reclaim_permits(now=clock.now(), grace=grace) == 0, "too fresh"
        clock.advance(31)
        assert permits.reclaim_permits(now=clock.now(), grace=grace) == 1
        assert permits.list_permits() == []

    def test_release_stale_permits_keeps_running_attempts(
        self, store: Any, permits: PermitStore, clock: FakeClock
    ) -> None:
        a, b, c = self.running(store, clock, n=3)
        for job in (a, b):
            assert self.acquire(permits, job, clock).granted
        clock.advance(1)
        assert self.acquire(permits, c, clock).granted
        released = permits.release_stale_permits(NODE, [(a.job_id, a.epoch)], before=clock.now())
        assert released == 1, "b is stale; c was acquired at 'before' and is kept"
        assert {p.job_id for p in permits.list_permits()} == {a.job_id, c.job_id}
        assert permits.release_stale_permits(OTHER, [], before=clock.now() + timedelta(1)) == 0

    def test_permits_survive_outcomes_until_released(
        self, store: Any, permits: PermitStore, clock: FakeClock
    ) -> None:
        """Releasing is the worker's job (its gate), not a side effect of recording outcomes."""
        [job] = self.running(store, clock)
        assert self.acquire(permits, job, clock).granted
        store.record_outcomes(NODE, [outcome(job, OutcomeKind.SUCCEEDED, clock)], now=clock.now())
        assert store.get_job(job.job_id).status is JobStatus.SUCCEEDED
        assert permits.release_permit(job.job_id, job.epoch)

    # ------------------------------------------------------------------ the job's resource
    def test_resource_name_is_stored_and_claimed(self, store: Any, clock: FakeClock) -> None:
        job = new_job(clock, resource_name=RES)
        plain = new_job(clock)
        store.insert_jobs([job, plain], now=clock.now())
        assert store.get_job(job.job_id).resource_name == RES
        assert store.get_job(plain.job_id).resource_name is None
        claimed = {c.job_id: c for c in store.claim(NODE, 5, now=clock.now(), boost_interval=BOOST)}
        assert claimed[job.job_id].resource_name == RES
        assert claimed[plain.job_id].resource_name is None
