"""Conformance suite of the :class:`~ratchet.ports.WatcherStore` capability (the transitions of ratchet.domain.watcher).

Node incarnations (ALIVE, DRAINING, DEAD by compare-and-set), the watcher's transitions (queue
stall, running stall, node death, expiry through the retry policy), takeovers with a new epoch
inside the slots, reservations within the prefetch, fenced progress and checkpoints, and the
drain hand-back; racing watchers and racing takers. Subclass :class:`WatcherStoreContract`
where the ``store`` and ``clock`` fixtures exist. A store without the capability skips as N/A.
"""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest

from ratchet.domain.errors import FencedOut
from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.model import ClaimedJob, Outcome, OutcomeKind
from ratchet.domain.watcher import NodeInfo, NodeState, StalledJob, WatcherSettings
from ratchet.ports import WatcherStore
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import BOOST, NODE, OTHER, new_job, outcome

THIRD = "node-c"
SETTINGS = WatcherSettings(
    queued_stall=timedelta(seconds=30),
    running_stall=timedelta(seconds=60),
    timed_out_grace=timedelta(seconds=60),
    takeover_window=timedelta(seconds=120),
    max_takeovers=2,
    dead_after=timedelta(seconds=30),
)
US = timedelta(microseconds=1)


def fail_or_retry(stalled: StalledJob, now: Any) -> Outcome:
    """A retry while retries remain, else the DLQ (what the engine's retry policy does)."""
    retry = stalled.attempt <= stalled.max_retries
    return Outcome(
        stalled.job_id,
        stalled.epoch,
        stalled.attempt,
        OutcomeKind.RETRY if retry else OutcomeKind.DEAD,
        stalled.started_at,
        now,
        error=f"JobStalledError: {stalled.reason}",
        retry_at=now if retry else None,
    )


class WatcherStoreContract:
    """Liveness, watcher, takeover and fencing rules every store must keep."""

    @pytest.fixture
    def ws(self, store: Any) -> WatcherStore:
        cap = store.capability(WatcherStore)
        if cap is None:
            pytest.skip("N/A: the store has no WatcherStore capability")
        return cap  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ helpers
    def node(
        self, ws: WatcherStore, clock: FakeClock, node_id: str, *, slots: int = 4, **kw: Any
    ) -> NodeInfo:
        info = NodeInfo(
            node_id=node_id,
            node_name=kw.pop("name", node_id),
            host=kw.pop("host", "host-1"),
            pid=kw.pop("pid", 100),
            slots=slots,
            prefetch=kw.pop("prefetch", 0),
        )
        ws.register_incarnation(info, now=clock.now())
        return info

    def running(
        self, store: Any, clock: FakeClock, node: str = NODE, n: int = 1, **job: Any
    ) -> list[ClaimedJob]:
        jobs = [new_job(clock, **job) for _ in range(n)]
        store.insert_jobs(jobs, now=clock.now())
        claimed: list[ClaimedJob] = store.claim(node, n, now=clock.now(), boost_interval=BOOST)
        assert {c.job_id for c in claimed} == {j.job_id for j in jobs}
        return claimed

    def watch(self, ws: WatcherStore, clock: FakeClock) -> Any:
        now = clock.now()
        return ws.watch(now=now, settings=SETTINGS, decide=lambda s: fail_or_retry(s, now))

    def view(self, ws: WatcherStore, job_id: uuid.UUID) -> Any:
        [v] = ws.job_liveness([job_id])
        return v

    def beat_all(self, ws: WatcherStore, clock: FakeClock, *nodes: str) -> None:
        for n in nodes:
            assert ws.beat(n, now=clock.now())

    # ------------------------------------------------------------------ nodes
    def test_incarnations_and_dead_nodes_by_compare_and_set(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        self.node(ws, clock, "web-1-a", name="web-1", pid=1)
        info = NodeInfo("web-1-b", "web-1", "host-1", 2, 4)
        others = ws.register_incarnation(info, now=clock.now())
        assert [(o.node_id, o.pid, o.node_name) for o in others] == [("web-1-a", 1, "web-1")]
        assert ws.declare_dead(["web-1-a"], now=clock.now()) == ["web-1-a"]
        assert ws.declare_dead(["web-1-a"], now=clock.now()) == [], "one CAS wins"
        assert not ws.beat("web-1-a", now=clock.now()), "a dead incarnation learns it"
        assert ws.beat("web-1-b", now=clock.now())
        states = {n.node_id: n.state for n in store.list_nodes()}
        assert states == {"web-1-a": "DEAD", "web-1-b": "ALIVE"}
        # Silence: only past dead_after, and only once however many watchers look.
        clock.advance(SETTINGS.dead_after - US)
        assert self.watch(ws, clock).dead_nodes == ()
        clock.advance(US)
        assert self.watch(ws, clock).dead_nodes == ("web-1-b",)
        assert self.watch(ws, clock).dead_nodes == ()
        # DEAD rows go after the retention.
        clock.advance(SETTINGS.dead_node_retention)
        assert self.watch(ws, clock).removed_nodes == 2
        assert store.list_nodes() == []

    def test_a_heartbeat_publishes_the_nodes_open_breakers(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        self.node(ws, clock, "web-2-a", name="web-2", pid=1)

        def published() -> dict[str, str]:
            [node] = [n for n in store.list_nodes() if n.node_id == "web-2-a"]
            return dict(node.breakers)

        assert published() == {}, "nothing published yet"
        opened = {"payments": "OPEN", "mail \u00e9": "HALF_OPEN"}
        assert ws.beat("web-2-a", now=clock.now(), breakers=opened)
        assert published() == opened
        assert ws.beat("web-2-a", now=clock.now()), "a beat without breakers keeps them"
        assert published() == opened
        assert ws.beat("web-2-a", now=clock.now(), breakers={})
        assert published() == {}, "all closed again"

    def test_draining_node_keeps_its_jobs_but_takes_nothing(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        self.node(ws, clock, NODE)
        self.node(ws, clock, OTHER)
        [job] = self.running(store, clock, NODE)
        assert ws.set_draining(NODE, now=clock.now())
        assert not ws.set_draining(NODE, now=clock.now())
        assert ws.beat(NODE, now=clock.now()), "a draining node still heart-beats"
        report = self.watch(ws, clock)
        assert report.orphaned == 0 and self.view(ws, job.job_id).status is JobStatus.RUNNING
        store.insert_jobs([new_job(clock)], now=clock.now())
        assert ws.reserve(NODE, 5, now=clock.now(), boost_interval=BOOST) == []
        assert ws.takeover(NODE, 5, now=clock.now(), settings=SETTINGS) == []

    # ------------------------------------------------------------------ T13, T8, fencing
    def test_a_silent_node_dies_and_survivors_take_over_its_running_jobs(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        """Only the node silent past ``dead_after`` dies: its RUNNING jobs become TIMED_OUT and
        eligible at once, a node that heart-beats keeps its own, a survivor's poll takes them
        over under a new epoch, and the dead node's late outcomes are refused."""
        self.node(ws, clock, NODE)
        self.node(ws, clock, OTHER)
        mine = self.running(store, clock, NODE, n=2)
        [theirs] = self.running(store, clock, OTHER)
        clock.advance(SETTINGS.dead_after - US)
        assert ws.beat(OTHER, now=clock.now())
        report = self.watch(ws, clock)
        assert (report.dead_nodes, report.orphaned) == ((), 0), "silent, but not long enough"
        clock.advance(US)
        report = self.watch(ws, clock)
        assert (report.dead_nodes, report.orphaned) == ((NODE,), 2)
        assert {self.view(ws, c.job_id).status for c in mine} == {JobStatus.TIMED_OUT}
        assert self.view(ws, theirs.job_id).status is JobStatus.RUNNING
        assert {n.node_id: n.state for n in store.list_nodes()} == {NODE: "DEAD", OTHER: "ALIVE"}
        assert not ws.beat(NODE, now=clock.now()), "a dead node learns it on its next beat"
        work = ws.acquire_work(OTHER, 4, now=clock.now(), settings=SETTINGS, boost_interval=BOOST)
        assert (work.state, work.started, work.claimed) == (NodeState.ALIVE, (), ())
        assert sorted((str(t.job_id), t.epoch) for t in work.taken) == sorted(
            (str(c.job_id), c.epoch + 1) for c in mine
        )
        late = [outcome(c, OutcomeKind.SUCCEEDED, clock) for c in mine]
        assert sorted(store.record_outcomes(NODE, late, now=clock.now()).fenced, key=str) == sorted(
            (c.job_id for c in mine), key=str
        )
        views = ws.job_liveness([c.job_id for c in mine])
        assert {(v.status, v.picked_by) for v in views} == {(JobStatus.RUNNING, OTHER)}

    def test_dead_owner_jobs_are_taken_over_at_once_and_the_zombie_is_fenced(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        self.node(ws, clock, NODE)
        self.node(ws, clock, OTHER)
        [job] = self.running(store, clock, NODE)
        ws.record_progress(NODE, job.job_id, job.epoch, now=clock.now(), step=1, data={"a": 1})
        clock.advance(SETTINGS.dead_after)
        assert ws.beat(OTHER, now=clock.now())
        report = self.watch(ws, clock)
        assert report.dead_nodes == (NODE,) and report.orphaned == 1
        v = self.view(ws, job.job_id)
        assert v.status is JobStatus.TIMED_OUT and v.epoch == job.epoch
        assert ws.takeover(NODE, 1, now=clock.now(), settings=SETTINGS) == [], "DEAD takes none"
        now, no_boost = clock.now(), timedelta(0)
        dead = ws.acquire_work(NODE, 4, now=now, settings=SETTINGS, boost_interval=no_boost)
        assert (dead.state, dead.jobs) == (NodeState.DEAD, []), "a DEAD node's poll gets nothing"
        unknown = ws.acquire_work("nobody", 4, now=now, settings=SETTINGS, boost_interval=no_boost)
        assert (unknown.state, unknown.jobs) == (None, []), "a node without a row gets nothing"
        [taken] = ws.takeover(OTHER, 4, now=clock.now(), settings=SETTINGS)
        assert (taken.job_id, taken.epoch, taken.takeovers) == (job.job_id, job.epoch + 1, 1)
        assert taken.attempt == job.attempt
        v = self.view(ws, job.job_id)
        assert (v.status, v.picked_by, v.takeovers, v.timed_out_at) == (
            JobStatus.RUNNING,
            OTHER,
            1,
            None,
        )
        cp = ws.last_checkpoint(job.job_id)
        assert cp is not None and (cp.step, cp.data, cp.epoch) == (1, {"a": 1}, job.epoch)
        with pytest.raises(FencedOut):
            ws.record_progress(NODE, job.job_id, job.epoch, now=clock.now(), step=2, data=None)
        assert store.record_outcomes(
            NODE, [outcome(job, OutcomeKind.SUCCEEDED, clock, result='"zombie"')], now=clock.now()
        ).fenced == (job.job_id,)
        assert self.view(ws, job.job_id) == v, "a refused write changes nothing"
        assert (
            store.record_outcomes(
                OTHER,
                [outcome(taken, OutcomeKind.SUCCEEDED, clock, result='"ok"')],
                now=clock.now(),
            ).fenced
            == ()
        )
        rec = store.get_job(job.job_id)
        assert (rec.status, rec.result) == (JobStatus.SUCCEEDED, '"ok"')
        history = [(a.epoch, a.node_id, a.outcome) for a in store.attempts(job.job_id)]
        assert history == [(job.epoch, NODE, "ABANDONED"), (taken.epoch, OTHER, "SUCCEEDED")]

    # ------------------------------------------------------------------ T6, T7, T8 timing
    def test_stall_revival_grace_and_takeover(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        self.node(ws, clock, NODE)
        self.node(ws, clock, OTHER)
        [job] = self.running(store, clock, NODE)
        clock.advance(600)
        self.beat_all(ws, clock, NODE, OTHER)
        assert self.watch(ws, clock).stalled == 0, "no progress reported: only liveness applies"
        ws.record_progress(NODE, job.job_id, job.epoch, now=clock.now())  # a touch
        clock.advance(SETTINGS.running_stall - US)
        self.beat_all(ws, clock, NODE, OTHER)
        assert self.watch(ws, clock).stalled == 0
        clock.advance(US)
        assert self.watch(ws, clock).stalled == 1
        assert self.watch(ws, clock).stalled == 0, "idempotent"
        stalled_at = clock.now()
        assert self.view(ws, job.job_id).status is JobStatus.TIMED_OUT
        # The owner revives it (same epoch).
        assert ws.record_progress(NODE, job.job_id, job.epoch, now=clock.now()) is True
        v = self.view(ws, job.job_id)
        assert (v.status, v.epoch, v.timed_out_at) == (JobStatus.RUNNING, job.epoch, None)
        assert ws.record_progress(NODE, job.job_id, job.epoch, now=clock.now()) is False
        # Stalls again: nobody may take it during the grace, then another incarnation may.
        clock.advance(SETTINGS.running_stall)
        self.beat_all(ws, clock, NODE, OTHER)
        assert self.watch(ws, clock).stalled == 1
        assert stalled_at < clock.now()
        clock.advance(SETTINGS.timed_out_grace - US)
        self.beat_all(ws, clock, NODE, OTHER)
        assert ws.takeover(OTHER, 1, now=clock.now(), settings=SETTINGS) == []
        clock.advance(US)
        assert ws.takeover(NODE, 1, now=clock.now(), settings=SETTINGS) == [], "not its owner"
        [taken] = ws.takeover(OTHER, 1, now=clock.now(), settings=SETTINGS)
        assert taken.epoch == job.epoch + 1

    def test_stall_timeout_applies_from_the_start(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        self.node(ws, clock, NODE)
        [job] = self.running(store, clock, NODE, stall_timeout=timedelta(seconds=5))
        clock.advance(timedelta(seconds=5) - US)
        self.beat_all(ws, clock, NODE)
        assert self.watch(ws, clock).stalled == 0
        clock.advance(US)
        assert self.watch(ws, clock).stalled == 1
        assert self.view(ws, job.job_id).stall_timeout == timedelta(seconds=5)

    def test_owner_may_finish_a_timed_out_job(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        self.node(ws, clock, NODE)
        [job] = self.running(store, clock, NODE, stall_timeout=timedelta(seconds=5))
        clock.advance(6)
        self.beat_all(ws, clock, NODE)
        assert self.watch(ws, clock).stalled == 1
        assert (
            store.record_outcomes(
                NODE, [outcome(job, OutcomeKind.SUCCEEDED, clock, result="1")], now=clock.now()
            ).fenced
            == ()
        )
        assert store.get_job(job.job_id).status is JobStatus.SUCCEEDED

    def test_a_watcher_that_may_not_judge_silence_still_does_the_rest(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        self.node(ws, clock, NODE)
        self.node(ws, clock, OTHER)
        [silent] = self.running(store, clock, NODE, stall_timeout=timedelta(seconds=5))
        [orphan] = self.running(store, clock, OTHER)
        ws.declare_dead([OTHER], now=clock.now())
        clock.advance(SETTINGS.dead_after)
        now = clock.now()
        report = ws.watch(
            now=now,
            settings=SETTINGS,
            decide=lambda s: fail_or_retry(s, now),
            judge_silence=False,
        )
        assert (report.dead_nodes, report.stalled, report.orphaned) == ((), 0, 1)
        assert self.view(ws, silent.job_id).status is JobStatus.RUNNING
        assert self.view(ws, orphan.job_id).status is JobStatus.TIMED_OUT
        report = self.watch(ws, clock)
        assert (report.dead_nodes, report.stalled) == ((NODE,), 0), "orphaned, not stalled"
        assert report.orphaned == 1

    # ------------------------------------------------------------------ T9
    def test_no_taker_within_the_window_fails_through_the_retry_policy(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        self.node(ws, clock, NODE)
        [retried] = self.running(store, clock, NODE, max_retries=1)
        [dead] = self.running(store, clock, NODE, max_retries=0)
        clock.advance(SETTINGS.dead_after)
        assert self.watch(ws, clock).orphaned == 2
        clock.advance(SETTINGS.takeover_window - US)
        assert self.watch(ws, clock).expired == ()
        clock.advance(US)
        report = self.watch(ws, clock)
        assert {o.job_id: o.kind for o in report.expired} == {
            retried.job_id: OutcomeKind.RETRY,
            dead.job_id: OutcomeKind.DEAD,
        }
        assert self.watch(ws, clock).expired == ()
        # A retry remains: PENDING, one more attempt, a new epoch, no owner, due at retry_at.
        r = store.get_job(retried.job_id)
        assert (r.status, r.attempts, r.picked_by) == (JobStatus.PENDING, 1, None)
        assert r.scheduled_time == clock.now()
        v = self.view(ws, retried.job_id)
        assert (v.epoch, v.timed_out_at, v.takeovers) == (retried.epoch + 1, None, 0)
        assert "JobStalledError" in (r.last_error or "")
        assert [a.outcome for a in store.attempts(retried.job_id)] == ["RETRY"]
        # The stalled run is fenced out; any node, its old owner included, may claim the job.
        late = outcome(retried, OutcomeKind.SUCCEEDED, clock)
        assert store.record_outcomes(NODE, [late], now=clock.now()).fenced == (retried.job_id,)
        [again] = store.claim(NODE, 1, now=clock.now(), boost_interval=BOOST)
        assert (again.job_id, again.epoch) == (retried.job_id, retried.epoch + 2)
        # No retry remains: FAILED, the dead-letter queue.
        d = store.get_job(dead.job_id)
        assert (d.status, d.attempts) == (JobStatus.FAILED, 1)
        assert "JobStalledError" in (d.last_error or "")
        assert [a.outcome for a in store.attempts(dead.job_id)] == ["DEAD"]

    def test_takeover_cap(self, store: Any, ws: WatcherStore, clock: FakeClock) -> None:
        nodes = [NODE, OTHER, THIRD]
        for n in nodes:
            self.node(ws, clock, n)
        [job] = self.running(store, clock, NODE, stall_timeout=timedelta(seconds=10))
        owner = NODE
        for takeover in range(1, SETTINGS.max_takeovers + 1):
            clock.advance(10)
            self.beat_all(ws, clock, *nodes)
            assert self.watch(ws, clock).stalled == 1
            clock.advance(SETTINGS.timed_out_grace)
            self.beat_all(ws, clock, *nodes)
            taker = next(n for n in nodes if n != owner)
            [taken] = ws.takeover(taker, 1, now=clock.now(), settings=SETTINGS)
            assert taken.takeovers == takeover
            owner = taker
        clock.advance(10)
        self.beat_all(ws, clock, *nodes)
        assert self.watch(ws, clock).stalled == 1
        clock.advance(SETTINGS.timed_out_grace)
        self.beat_all(ws, clock, *nodes)
        taker = next(n for n in nodes if n != owner)
        assert ws.takeover(taker, 1, now=clock.now(), settings=SETTINGS) == [], "at the cap"
        [expired] = self.watch(ws, clock).expired
        assert (expired.job_id, expired.kind) == (job.job_id, OutcomeKind.RETRY), "retries remain"
        v = self.view(ws, job.job_id)
        assert (v.status, v.epoch, v.attempts) == (JobStatus.PENDING, job.epoch + 3, 1)

    # ------------------------------------------------------------------ T2, T3, T4
    def test_reservations_start_stall_and_respect_the_prefetch(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        self.node(ws, clock, NODE, prefetch=2)
        self.node(ws, clock, OTHER)
        store.insert_jobs([new_job(clock) for _ in range(4)], now=clock.now())
        reserved = ws.reserve(NODE, 5, now=clock.now(), boost_interval=BOOST)
        assert len(reserved) == 2, "never beyond the prefetch"
        assert ws.reserve(NODE, 5, now=clock.now(), boost_interval=BOOST) == []
        first, second = reserved
        v = self.view(ws, first.job_id)
        assert (v.status, v.picked_by, v.epoch) == (JobStatus.QUEUED, NODE, first.epoch)
        assert ws.start_reserved(NODE, first.job_id, first.epoch, now=clock.now())
        assert not ws.start_reserved(OTHER, second.job_id, second.epoch, now=clock.now())
        assert self.view(ws, first.job_id).status is JobStatus.RUNNING
        assert (
            store.record_outcomes(
                NODE, [outcome(first, OutcomeKind.SUCCEEDED, clock)], now=clock.now()
            ).fenced
            == ()
        )
        clock.advance(SETTINGS.queued_stall - US)
        self.beat_all(ws, clock, NODE, OTHER)
        assert self.watch(ws, clock).revoked == 0
        clock.advance(US)
        assert self.watch(ws, clock).revoked == 1
        v = self.view(ws, second.job_id)
        assert (v.status, v.picked_by) == (JobStatus.PENDING, None)
        assert v.epoch == second.epoch + 1, "T4: the revoke bumps the epoch"
        assert not ws.start_reserved(NODE, second.job_id, second.epoch, now=clock.now())
        [again] = [
            c
            for c in store.claim(OTHER, 4, now=clock.now(), boost_interval=BOOST)
            if c.job_id == second.job_id
        ]
        assert again.epoch == second.epoch + 2

    def test_takeover_stays_within_the_slots_and_prefers_nothing_over_overload(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        self.node(ws, clock, NODE, slots=5)
        self.node(ws, clock, OTHER, slots=3)
        self.running(store, clock, NODE, n=5)
        self.running(store, clock, OTHER, n=1)
        clock.advance(SETTINGS.dead_after)
        assert ws.beat(OTHER, now=clock.now())
        assert self.watch(ws, clock).orphaned == 5
        taken = ws.takeover(OTHER, 10, now=clock.now(), settings=SETTINGS)
        assert len(taken) == 2, "3 slots, 1 held"
        assert ws.takeover(OTHER, 10, now=clock.now(), settings=SETTINGS) == []

    def test_takeover_only_of_jobs_the_taker_supports(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        self.node(ws, clock, NODE)
        self.node(ws, clock, OTHER)
        [plain] = self.running(store, clock, NODE)
        [special] = self.running(store, clock, NODE, executor="gpu")
        clock.advance(SETTINGS.dead_after)
        assert ws.beat(OTHER, now=clock.now())
        assert self.watch(ws, clock).orphaned == 2
        seen: list[tuple[str, str | None]] = []

        def supports(target: str, executor: str | None) -> bool:
            seen.append((target, executor))
            return executor != "gpu"

        taken = ws.takeover(OTHER, 4, now=clock.now(), settings=SETTINGS, supports=supports)
        assert [t.job_id for t in taken] == [plain.job_id]
        assert (special.target, "gpu") in seen
        v = self.view(ws, special.job_id)
        assert (v.status, v.picked_by, v.epoch) == (JobStatus.TIMED_OUT, NODE, special.epoch)
        [later] = ws.takeover(OTHER, 4, now=clock.now(), settings=SETTINGS)
        assert later.job_id == special.job_id, "a node that supports it takes it"

    # ------------------------------------------------------------------ progress, checkpoints
    def test_checkpoints_are_fenced_json_and_never_go_back_within_an_epoch(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        self.node(ws, clock, NODE)
        [job] = self.running(store, clock, NODE)
        assert ws.last_checkpoint(job.job_id) is None
        ws.record_progress(NODE, job.job_id, job.epoch, now=clock.now(), step=3, data=[1, "x"])
        with pytest.raises(ValueError, match="backwards"):
            ws.record_progress(NODE, job.job_id, job.epoch, now=clock.now(), step=2, data=None)
        with pytest.raises(ValueError, match="JSON"):
            ws.record_progress(NODE, job.job_id, job.epoch, now=clock.now(), step=4, data={1, 2})
        cp = ws.last_checkpoint(job.job_id)
        assert cp is not None and (cp.step, cp.data) == (3, [1, "x"])
        with pytest.raises(FencedOut):
            ws.record_progress(OTHER, job.job_id, job.epoch, now=clock.now(), step=9, data=None)
        with pytest.raises(FencedOut):
            ws.record_progress(NODE, job.job_id, job.epoch + 1, now=clock.now())
        ws.declare_dead([NODE], now=clock.now())
        with pytest.raises(FencedOut):
            ws.record_progress(NODE, job.job_id, job.epoch, now=clock.now(), step=5, data=None)
        assert ws.last_checkpoint(job.job_id) == cp

    def test_cancel_wins_over_takeover(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        self.node(ws, clock, NODE)
        self.node(ws, clock, OTHER)
        [job] = self.running(store, clock, NODE)
        clock.advance(SETTINGS.dead_after)
        assert ws.beat(OTHER, now=clock.now())
        assert self.watch(ws, clock).orphaned == 1
        assert store.cancel_job(job.job_id, now=clock.now()).value
        assert ws.takeover(OTHER, 4, now=clock.now(), settings=SETTINGS) == []
        assert store.get_job(job.job_id).status is JobStatus.CANCELED

    # ------------------------------------------------------------------ drain
    def test_hand_back(self, store: Any, ws: WatcherStore, clock: FakeClock) -> None:
        self.node(ws, clock, NODE, prefetch=1)
        self.node(ws, clock, OTHER)
        [job] = self.running(store, clock, NODE)
        store.insert_jobs([new_job(clock)], now=clock.now())
        [reserved] = ws.reserve(NODE, 1, now=clock.now(), boost_interval=BOOST)
        assert ws.set_draining(NODE, now=clock.now())
        assert ws.hand_back(NODE, None, now=clock.now(), settings=SETTINGS) == (1, 1)
        assert self.view(ws, reserved.job_id).status is JobStatus.PENDING
        assert self.view(ws, job.job_id).status is JobStatus.TIMED_OUT
        [taken] = ws.takeover(OTHER, 4, now=clock.now(), settings=SETTINGS)
        assert taken.job_id == job.job_id, "eligible at once, though its node is alive"

    def test_hand_back_of_listed_jobs_touches_only_this_nodes_running_jobs(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        """A drain that lists its jobs hands back only its own among them; a taker then runs
        them under a new epoch and the drained node's late writes are refused."""
        self.node(ws, clock, NODE)
        self.node(ws, clock, OTHER)
        mine = self.running(store, clock, NODE, n=2)
        [unlisted] = self.running(store, clock, NODE)
        [theirs] = self.running(store, clock, OTHER)
        assert ws.set_draining(NODE, now=clock.now())
        listed = [c.job_id for c in mine] + [theirs.job_id]
        assert ws.hand_back(NODE, listed, now=clock.now(), settings=SETTINGS) == (0, 2)
        assert ws.hand_back(NODE, [], now=clock.now(), settings=SETTINGS) == (0, 0)
        assert {self.view(ws, c.job_id).status for c in mine} == {JobStatus.TIMED_OUT}
        assert self.view(ws, unlisted.job_id).status is JobStatus.RUNNING
        v = self.view(ws, theirs.job_id)
        assert (v.status, v.picked_by, v.epoch) == (JobStatus.RUNNING, OTHER, theirs.epoch)
        taken = ws.takeover(OTHER, 4, now=clock.now(), settings=SETTINGS)
        assert sorted((str(t.job_id), t.epoch) for t in taken) == sorted(
            (str(c.job_id), c.epoch + 1) for c in mine
        )
        zombie = outcome(mine[0], OutcomeKind.SUCCEEDED, clock, result='"late"')
        assert store.record_outcomes(NODE, [zombie], now=clock.now()).fenced == (mine[0].job_id,)
        rec = store.get_job(mine[0].job_id)
        assert (rec.status, rec.picked_by, rec.epoch, rec.result) == (
            JobStatus.RUNNING,
            OTHER,
            mine[0].epoch + 1,
            None,
        )

    # ------------------------------------------------------------------ races
    def test_racing_watchers_and_takers_act_once(
        self, store: Any, ws: WatcherStore, clock: FakeClock
    ) -> None:
        takers = [f"taker-{i}" for i in range(4)]
        self.node(ws, clock, NODE, slots=40)
        for t in takers:
            self.node(ws, clock, t, slots=40)
        jobs = self.running(store, clock, NODE, n=40)
        clock.advance(SETTINGS.dead_after)
        for t in takers:
            assert ws.beat(t, now=clock.now())
        now = clock.now()
        barrier = threading.Barrier(len(takers))
        reports: list[Any] = []
        taken: list[ClaimedJob] = []
        errors: list[BaseException] = []

        def race(taker: str) -> None:
            try:
                barrier.wait()
                reports.append(
                    ws.watch(now=now, settings=SETTINGS, decide=lambda s: fail_or_retry(s, now))
                )
                barrier.wait()
                taken.extend(ws.takeover(taker, 40, now=now, settings=SETTINGS))
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=race, args=(name,)) for name in takers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert sum(len(r.dead_nodes) for r in reports) == 1
        assert sum(r.orphaned for r in reports) == 40
        assert sorted(str(c.job_id) for c in taken) == sorted(str(j.job_id) for j in jobs)
        assert {c.epoch for c in taken} == {jobs[0].epoch + 1}
        views = ws.job_liveness([j.job_id for j in jobs])
        assert all(v.status is JobStatus.RUNNING and v.takeovers == 1 for v in views)
        owners = {str(c.job_id): c for c in taken}
        assert all(owners[str(v.job_id)].epoch == v.epoch for v in views)
        assert NodeState.DEAD.value in {n.state for n in store.list_nodes()}
