"""Conformance suite of the :class:`~ratchet.ports.RecurringStore` capability.

Subclass :class:`RecurringStoreContract` where the ``store`` and ``clock`` fixtures exist (the
fixtures :class:`~ratchet.testing.store_contract.StoreContract` uses). A store without the
capability skips every test as N/A. The cluster test needs three stores on one database: the
``node_stores`` fixture opens two more from ``store.url`` through the installed plugins
(override it if your store is built differently).
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ratchet.domain.errors import DuplicateBusinessKeyError
from ratchet.domain.lifecycle import JobPriority, JobStatus
from ratchet.domain.misfire import RecurringMisfirePolicy
from ratchet.domain.options import BackoffPolicy
from ratchet.domain.recurring import (
    FIRE_TIME_PARAM,
    MASTER_PARAM,
    NewRecurring,
    RecurringRecord,
    RecurringSource,
    RecurringStatus,
    fire_idempotency_key,
)
from ratchet.engine.recurring import make_planner, next_fire_after
from ratchet.ids import uuid7
from ratchet.ports import RecurringStore
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import BOOST, NODE, OTHER, new_job, trace_context

EVERY_SECOND = "* * * * * ?"
EVERY_MINUTE = "0 * * * * ?"
T0 = datetime(2026, 3, 2, 12, 0, 0, tzinfo=UTC)  # on a minute boundary


def master(clock: FakeClock, cron: str = EVERY_SECOND, **overrides: Any) -> NewRecurring:
    """A valid master whose first fire is the first fire time after now (override any field)."""
    now = clock.now()
    zone = overrides.get("zone", "UTC")
    fields: dict[str, Any] = {
        "recurring_id": uuid7(),
        "cron": cron,
        "zone": zone,
        "target": "tests.jobs:noop",
        "payload": '{"args":[1],"kwargs":{}}',
        "next_fire": next_fire_after(cron, zone, now),
        "created_at": now,
        "priority": JobPriority.HIGH,
        "max_retries": 2,
        "backoff": BackoffPolicy.FIXED,
        "backoff_delay": timedelta(seconds=3),
        "timeout": timedelta(minutes=10),
        "tags": ("reports",),
        "params": {"region": "eu"},
    }
    fields.update(overrides)
    return NewRecurring(**fields)


class _NodeDied(BaseException):
    """Stands for a process that died in the middle of a transaction."""


class RecurringStoreContract:
    """Masters, their materialization and leases. Needs ``store`` and ``clock``."""

    @pytest.fixture
    def recurring(self, store: Any, clock: FakeClock) -> RecurringStore:
        cap = store.capability(RecurringStore)
        if cap is None:
            pytest.skip("N/A: the store has no RecurringStore capability")
        clock.set(T0)
        return cap  # type: ignore[no-any-return]

    @pytest.fixture
    def node_stores(self, store: Any, recurring: RecurringStore) -> Iterator[list[Any]]:
        """Three stores (three connection pools) on the database of ``store``."""
        from ratchet.plugins import Plugins, make_plugin_manager

        plugins = Plugins(make_plugin_manager())
        others = [plugins.store_factory(store.url)(store.url, None) for _ in range(2)]
        yield [store, *others]
        for other in others:
            other.close()

    # ------------------------------------------------------------------ helpers
    def materialize(
        self, recurring: RecurringStore, clock: FakeClock, node: str = NODE, limit: int = 20
    ) -> list[Any]:
        _, fires = recurring.materialize_recurring(
            node, now=clock.now(), limit=limit, plan=make_planner()
        )
        return fires

    # ------------------------------------------------------------------ masters
    def test_a_master_round_trips(self, recurring: RecurringStore, clock: FakeClock) -> None:
        m = master(clock, business_key="hourly-report", name="Hourly report")
        assert recurring.create_recurring(m, now=clock.now()) == m.recurring_id
        got = recurring.get_recurring(m.recurring_id)
        assert isinstance(got, RecurringRecord)
        assert got.definition() == m.definition()
        assert (got.status, got.paused, got.source) == (
            RecurringStatus.ACTIVE,
            False,
            RecurringSource.API,
        )
        assert got.next_fire == T0 + timedelta(seconds=1)
        assert got.misfire == RecurringMisfirePolicy.default()
        assert recurring.find_recurring("hourly-report") == got
        assert recurring.find_recurring("nope") is None
        assert recurring.get_recurring(uuid.uuid4()) is None
        policy = RecurringMisfirePolicy.catch_up(3)
        other = master(clock, EVERY_MINUTE, misfire=policy, tags=("a", "b"))
        recurring.create_recurring(other, now=clock.now())
        assert recurring.get_recurring(other.recurring_id).misfire == policy  # type: ignore[union-attr]
        assert [r.recurring_id for r in recurring.list_recurring()] == [
            m.recurring_id,
            other.recurring_id,
        ]
        assert [r.recurring_id for r in recurring.list_recurring(tag="B")] == [other.recurring_id]

    def test_business_keys_are_unique_among_active_masters(
        self, recurring: RecurringStore, clock: FakeClock
    ) -> None:
        first = master(clock, business_key="sync")
        recurring.create_recurring(first, now=clock.now())
        with pytest.raises(DuplicateBusinessKeyError) as info:
            recurring.create_recurring(master(clock, business_key="sync"), now=clock.now())
        assert info.value.holder == first.recurring_id
        # Keys are exact: case and trailing spaces make different keys on every database.
        recurring.create_recurring(master(clock, business_key="SYNC"), now=clock.now())
        recurring.create_recurring(master(clock, business_key="sync "), now=clock.now())
        # Masters without a key never collide.
        recurring.create_recurring(master(clock), now=clock.now())
        recurring.create_recurring(master(clock), now=clock.now())
        assert recurring.cancel_recurring_by_business_key("sync", now=clock.now()) == 1
        assert recurring.cancel_recurring_by_business_key("sync", now=clock.now()) == 0
        again = master(clock, business_key="sync")
        recurring.create_recurring(again, now=clock.now())
        assert recurring.find_recurring("sync").recurring_id == again.recurring_id  # type: ignore[union-attr]
        ended = recurring.get_recurring(first.recurring_id)
        assert ended is not None and ended.status is RecurringStatus.CANCELED
        assert (ended.business_key, ended.next_fire, ended.ended_at) == ("sync", None, T0)

    def test_cancel_by_id_and_by_tag(self, recurring: RecurringStore, clock: FakeClock) -> None:
        a = master(clock, tags=("nightly", "x"))
        b = master(clock, tags=("nightly",))
        c = master(clock, tags=("other",))
        for m in (a, b, c):
            recurring.create_recurring(m, now=clock.now())
        assert recurring.cancel_recurring(a.recurring_id, now=clock.now())
        assert not recurring.cancel_recurring(a.recurring_id, now=clock.now())
        assert recurring.cancel_recurring_by_tag(" Nightly ", now=clock.now()) == 1
        assert recurring.cancel_recurring_by_tag("nightly", now=clock.now()) == 0
        assert [r.recurring_id for r in recurring.list_recurring()] == [c.recurring_id]
        assert len(recurring.list_recurring(active_only=False)) == 3
        clock.advance(5)
        assert {f.recurring_id for f in self.materialize(recurring, clock)} == {c.recurring_id}

    def test_pause_stops_fires_and_resume_restarts_from_now(
        self, recurring: RecurringStore, clock: FakeClock
    ) -> None:
        m = master(clock, EVERY_MINUTE)
        recurring.create_recurring(m, now=clock.now())
        assert recurring.pause_recurring(m.recurring_id, now=clock.now())
        assert recurring.pause_recurring(m.recurring_id, now=clock.now())  # already paused
        clock.advance(timedelta(minutes=10, seconds=30))
        assert self.materialize(recurring, clock) == []
        paused = recurring.get_recurring(m.recurring_id)
        assert paused is not None and paused.paused and paused.paused_at == T0
        assert recurring.resume_recurring(
            m.recurring_id, now=clock.now(), next_fire=next_fire_after
        )
        assert not recurring.resume_recurring(
            m.recurring_id, now=clock.now(), next_fire=next_fire_after
        )
        resumed = recurring.get_recurring(m.recurring_id)
        assert resumed is not None and not resumed.paused
        assert resumed.next_fire == T0 + timedelta(minutes=11)
        assert self.materialize(recurring, clock) == [], "fires missed while paused never come"
        clock.advance(30)
        assert [f.fire_time for f in self.materialize(recurring, clock)] == [
            T0 + timedelta(minutes=11)
        ]
        assert recurring.cancel_recurring(m.recurring_id, now=clock.now())
        assert not recurring.pause_recurring(m.recurring_id, now=clock.now())
        assert not recurring.resume_recurring(
            m.recurring_id, now=clock.now(), next_fire=next_fire_after
        )

    # ------------------------------------------------------------------ materializer
    def test_occurrences_are_ordinary_jobs_with_the_masters_options(
        self, store: Any, recurring: RecurringStore, clock: FakeClock
    ) -> None:
        m = master(clock, business_key="report")
        recurring.create_recurring(m, now=clock.now())
        assert self.materialize(recurring, clock) == [], "nothing is due yet"
        clock.advance(1)
        [fire] = self.materialize(recurring, clock)
        assert (fire.recurring_id, fire.fire_time, fire.inserted) == (
            m.recurring_id,
            T0 + timedelta(seconds=1),
            True,
        )
        job = store.get_job(fire.job_id)
        assert job.status is JobStatus.PENDING
        assert job.recurring_master_id == m.recurring_id
        assert (job.target, job.payload, job.priority, job.max_retries) == (
            m.target,
            m.payload,
            JobPriority.HIGH,
            2,
        )
        assert (job.backoff, job.backoff_delay, job.timeout) == (
            BackoffPolicy.FIXED,
            timedelta(seconds=3),
            timedelta(minutes=10),
        )
        assert job.scheduled_time == fire.fire_time
        assert job.tags == ("reports",)
        assert job.business_key is None, "occurrences never hold the master's business key"
        assert job.idempotency_key == fire_idempotency_key(m.recurring_id, fire.fire_time)
        assert job.params == {
            "region": "eu",
            MASTER_PARAM: str(m.recurring_id),
            FIRE_TIME_PARAM: "2026-03-02T12:00:01+00:00",
        }
        after = recurring.get_recurring(m.recurring_id)
        assert after is not None
        assert (after.next_fire, after.last_fire) == (T0 + timedelta(seconds=2), fire.fire_time)
        [claimed] = store.claim(OTHER, 10, now=clock.now(), boost_interval=BOOST)
        assert claimed.job_id == fire.job_id
        assert [j.job_id for j in recurring.recurring_fires(m.recurring_id)] == [fire.job_id]

    def test_each_occurrence_stores_the_trace_context_its_plan_gave_it(
        self, store: Any, recurring: RecurringStore, clock: FakeClock
    ) -> None:
        m = master(clock, misfire=RecurringMisfirePolicy.catch_up(3))
        recurring.create_recurring(m, now=clock.now())
        clock.advance(2)
        traced = make_planner(trace=lambda rec, fire: trace_context(fire.isoformat()))
        _, fires = recurring.materialize_recurring(NODE, now=clock.now(), limit=5, plan=traced)
        assert len(fires) == 2
        claimed = store.claim(OTHER, 10, now=clock.now(), boost_interval=BOOST)
        assert {c.job_id: c.trace_context for c in claimed} == {
            f.job_id: trace_context(f.fire_time.isoformat()) for f in fires
        }

    def test_an_occurrence_already_stored_is_never_stored_again(
        self, store: Any, recurring: RecurringStore, clock: FakeClock
    ) -> None:
        m = master(clock)
        recurring.create_recurring(m, now=clock.now())
        first_fire = T0 + timedelta(seconds=1)
        squatter = new_job(clock, idempotency_key=fire_idempotency_key(m.recurring_id, first_fire))
        store.insert_jobs([squatter], now=clock.now())
        clock.advance(2)
        fires = self.materialize(recurring, clock)
        assert [(f.fire_time, f.inserted) for f in fires] == [
            (first_fire, False),
            (first_fire + timedelta(seconds=1), True),
        ]
        assert fires[0].job_id == squatter.job_id
        assert len(recurring.recurring_fires(m.recurring_id)) == 1

    def test_a_schedule_that_ends_exhausts_its_master_and_frees_its_key(
        self, recurring: RecurringStore, clock: FakeClock
    ) -> None:
        m = master(clock, "0 0 13 2 3 ? 2026", business_key="once")  # 2026-03-02 13:00 only
        recurring.create_recurring(m, now=clock.now())
        clock.advance(timedelta(hours=2))
        [fire] = self.materialize(recurring, clock)
        assert fire.fire_time == datetime(2026, 3, 2, 13, tzinfo=UTC)
        ended = recurring.get_recurring(m.recurring_id)
        assert ended is not None
        assert (ended.status, ended.next_fire, ended.ended_at) == (
            RecurringStatus.EXHAUSTED,
            None,
            clock.now(),
        )
        assert recurring.find_recurring("once") is None
        assert self.materialize(recurring, clock) == []

    @pytest.mark.parametrize(
        ("policy", "created"),
        [
            (RecurringMisfirePolicy.skip(), 0),
            (RecurringMisfirePolicy.fire_once(), 1),
            (RecurringMisfirePolicy.catch_up(3), 3),
            (RecurringMisfirePolicy.catch_up(), 5),
        ],
        ids=str,
    )
    def test_the_persisted_misfire_policy_decides_a_backlog(
        self, recurring: RecurringStore, clock: FakeClock, policy: Any, created: int
    ) -> None:
        m = master(clock, EVERY_MINUTE, misfire=policy)
        recurring.create_recurring(m, now=clock.now())
        clock.advance(timedelta(minutes=5, seconds=30))  # five fire times overdue
        fires = self.materialize(recurring, clock)
        assert [f.fire_time for f in fires] == [
            T0 + timedelta(minutes=1 + i) for i in range(created)
        ]
        after = recurring.get_recurring(m.recurring_id)
        assert after is not None and after.next_fire == T0 + timedelta(minutes=6)

    def test_a_due_master_is_claimed_by_one_materializer_at_a_time(
        self, node_stores: list[Any], clock: FakeClock
    ) -> None:
        """While one transaction plans a due master, a second materializer gets nothing for it:
        it skips the locked row (SKIP LOCKED) or waits for the commit (a database-wide writer
        lock), after which the master is no longer due."""
        first, second, _ = (s.capability(RecurringStore) for s in node_stores)
        m = master(clock)
        first.create_recurring(m, now=clock.now())
        clock.advance(1)
        inside = threading.Event()
        release = threading.Event()
        planner = make_planner()

        def slow_plan(rec: RecurringRecord, now: datetime) -> Any:
            inside.set()
            assert release.wait(30)
            return planner(rec, now)

        with ThreadPoolExecutor(max_workers=2) as pool:
            holder = pool.submit(
                first.materialize_recurring, NODE, now=clock.now(), limit=5, plan=slow_plan
            )
            assert inside.wait(30)
            other = pool.submit(
                second.materialize_recurring, OTHER, now=clock.now(), limit=5, plan=planner
            )
            if node_stores[0].capabilities.skip_locked:
                assert other.result(timeout=30) == (0, []), "the locked master was skipped"
            release.set()
            claimed, fires = holder.result(timeout=30)
            assert other.result(timeout=30) == (0, [])
        assert claimed == 1 and [f.fire_time for f in fires] == [T0 + timedelta(seconds=1)]

    def test_a_materializer_that_dies_mid_transaction_creates_nothing(
        self, node_stores: list[Any], clock: FakeClock
    ) -> None:
        """A node dying after claiming (here: an exception no handler catches) rolls back: the
        master stays due and the next node creates the occurrence, once."""
        first, second, _ = (s.capability(RecurringStore) for s in node_stores)
        m = master(clock)
        first.create_recurring(m, now=clock.now())
        clock.advance(1)
        planner = make_planner()

        def dies(rec: RecurringRecord, now: datetime) -> Any:
            planner(rec, now)
            raise _NodeDied

        with pytest.raises(_NodeDied):
            first.materialize_recurring(NODE, now=clock.now(), limit=5, plan=dies)
        assert first.recurring_fires(m.recurring_id) == []
        claimed, fires = second.materialize_recurring(OTHER, now=clock.now(), limit=5, plan=planner)
        assert claimed == 1 and [f.fire_time for f in fires] == [T0 + timedelta(seconds=1)]
        assert self.materialize(first, clock) == []
        assert len(first.recurring_fires(m.recurring_id)) == 1

    # ------------------------------------------------------------------ decorators and leases
    def test_sync_creates_updates_and_cancels_decorator_masters(
        self, recurring: RecurringStore, clock: FakeClock
    ) -> None:
        def decl(key: str, cron: str = EVERY_MINUTE, **overrides: Any) -> NewRecurring:
            fields = {"business_key": key, "source": RecurringSource.DECORATOR, **overrides}
            fields.setdefault("target", f"app.jobs:{key}")
            return master(clock, cron, **fields)

        api = master(clock, business_key="taken-over")
        recurring.create_recurring(api, now=clock.now())
        kept_api = master(clock, business_key="api-only")
        recurring.create_recurring(kept_api, now=clock.now())
        first = recurring.sync_recurring(
            [decl("a"), decl("b"), decl("taken-over")], now=clock.now(), next_fire=next_fire_after
        )
        assert (first.created, first.updated, first.canceled) == (("a", "b"), ("taken-over",), ())
        a = recurring.find_recurring("a")
        assert a is not None and a.source is RecurringSource.DECORATOR
        taken = recurring.find_recurring("taken-over")
        assert taken is not None and taken.recurring_id == api.recurring_id
        assert taken.source is RecurringSource.DECORATOR

        clock.advance(timedelta(seconds=20))
        same = recurring.sync_recurring(
            [decl("a"), decl("b"), decl("taken-over")], now=clock.now(), next_fire=next_fire_after
        )
        assert (same.created, same.updated, same.canceled) == ((), (), ())
        assert set(same.unchanged) == {"a", "b", "taken-over"}
        assert recurring.find_recurring("a") == a, "an unchanged master is not written"

        changed = recurring.sync_recurring(
            [decl("a", max_retries=9, tags=("new",)), decl("b", "*/10 * * * * ?")],
            now=clock.now(),
            next_fire=next_fire_after,
            owns=lambda target: target != "app.jobs:taken-over",
        )
        assert (changed.updated, changed.canceled) == (("a", "b"), ())
        a2, b2 = recurring.find_recurring("a"), recurring.find_recurring("b")
        assert a2 is not None and b2 is not None
        assert (a2.max_retries, a2.tags, a2.next_fire) == (9, ("new",), a.next_fire)
        assert [r.business_key for r in recurring.list_recurring(tag="new")] == ["a"]
        assert b2.next_fire == clock.now() + timedelta(seconds=10), "a new cron restarts now"
        assert recurring.find_recurring("taken-over") is not None, "not owned: left alone"

        gone = recurring.sync_recurring([decl("a")], now=clock.now(), next_fire=next_fire_after)
        assert set(gone.canceled) == {"b", "taken-over"}
        assert [r.business_key for r in recurring.list_recurring()] == ["api-only", "a"]

    def test_a_lease_has_one_holder_until_it_expires(
        self, node_stores: list[Any], clock: FakeClock
    ) -> None:
        stores = [s.capability(RecurringStore) for s in node_stores]
        lease = timedelta(seconds=30)
        barrier = threading.Barrier(3)

        def take(i: int) -> bool:
            barrier.wait(timeout=30)
            return bool(stores[i].try_lock("startup", f"node-{i}", now=clock.now(), lease=lease))

        with ThreadPoolExecutor(max_workers=3) as pool:
            won = list(pool.map(take, range(3)))
        assert won.count(True) == 1, won
        holder = won.index(True)
        other = (holder + 1) % 3
        assert stores[holder].try_lock("startup", f"node-{holder}", now=clock.now(), lease=lease)
        assert not stores[other].try_lock("startup", f"node-{other}", now=clock.now(), lease=lease)
        assert stores[other].try_lock("other-lock", f"node-{other}", now=clock.now(), lease=lease)
        clock.advance(lease)  # the holder stopped renewing: its lease ran out
        assert stores[other].try_lock("startup", f"node-{other}", now=clock.now(), lease=lease)
        assert not stores[holder].release_lock("startup", f"node-{holder}")
        assert stores[other].release_lock("startup", f"node-{other}")
        assert stores[holder].try_lock("startup", f"node-{holder}", now=clock.now(), lease=lease)

    # ------------------------------------------------------------------ the cluster
    def test_three_materializers_create_every_occurrence_exactly_once(
        self, node_stores: list[Any], clock: FakeClock
    ) -> None:
        """Three nodes share a FakeClock advanced second by second for 60 s over a per-second
        master; each second all three materialize at once."""
        stores = [s.capability(RecurringStore) for s in node_stores]
        m = master(clock, EVERY_SECOND)
        stores[0].create_recurring(m, now=clock.now())
        barrier = threading.Barrier(3)
        planner = make_planner()

        def node(i: int) -> list[Any]:
            barrier.wait(timeout=30)
            _, fires = stores[i].materialize_recurring(
                f"node-{i}", now=clock.now(), limit=20, plan=planner
            )
            return list(fires)

        created: list[Any] = []
        per_node: Counter[int] = Counter()
        with ThreadPoolExecutor(max_workers=3) as pool:
            for _ in range(60):
                clock.advance(1)
                results = list(pool.map(node, range(3)))
                for i, fires in enumerate(results):
                    per_node[i] += len(fires)
                    created.extend(fires)
        times = [f.fire_time for f in created]
        assert all(f.inserted for f in created)
        assert len(times) == 60 and len(set(times)) == 60, Counter(times).most_common(3)
        assert sorted(times) == [T0 + timedelta(seconds=s) for s in range(1, 61)]
        stored = stores[0].recurring_fires(m.recurring_id)
        assert len(stored) == 60
        assert len({j.idempotency_key for j in stored}) == 60
        assert sum(per_node.values()) == 60
