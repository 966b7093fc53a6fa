"""Cluster liveness end to end on SQLite with real worker threads and a FakeClock.

Stalls and takeovers that resume from the last checkpoint, the zombie's fenced write, a node
that finds itself DEAD and continues as a new incarnation, recovery of a previous incarnation
at start, the drain hand-back, expiry through the retry policy, and prefetch back-pressure.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import liveness_jobs as lj
import pytest
from timeout_harness import Events, wait_for

from ratchet import EventKind, JobContext, JobStatus, Ratchet
from ratchet.domain.model import Outcome, OutcomeKind
from ratchet.domain.watcher import NodeInfo
from ratchet.engine.liveness import Liveness, WatcherTask, host_name
from ratchet.engine.worker import Worker
from ratchet.testing import FakeClock
from ratchet.testing.store_contract import new_job

FAST: dict[str, Any] = {
    "concurrency": 2,
    "burst_delay": timedelta(milliseconds=10),
    "min_delay": timedelta(milliseconds=20),
    "max_delay": timedelta(milliseconds=50),
    "deep_idle_delay": timedelta(milliseconds=50),
    "heartbeat_interval": timedelta(milliseconds=50),
    "orphan_grace": timedelta(seconds=30),
    "watcher_enabled": False,  # the tests run the watcher passes themselves
    "drain_timeout": timedelta(seconds=2),
    "cancel_request_interval": timedelta(milliseconds=50),
}


def test_watcher_jitter_leaves_the_global_random_state_alone() -> None:
    """Regression: the watcher task's jitter drew from the global ``random`` generator, from
    the heartbeat thread, so a running worker advanced the sequence that seeded code (and
    Hypothesis, which seeds it per example) relies on."""
    task = WatcherTask(timedelta(seconds=10))
    state = random.getstate()
    intervals = [task.interval for _ in range(50)]
    assert random.getstate() == state
    assert all(timedelta(seconds=8) <= i <= timedelta(seconds=12) for i in intervals)
    assert len(set(intervals)) > 1  # still jittered


@pytest.fixture
def app(sqlite_url: str, clock: FakeClock) -> Iterator[Ratchet]:
    lj.reset()
    app = Ratchet(sqlite_url, allowed_modules=["liveness_jobs"], clock=clock, node_name="box")
    workers: list[Worker] = []
    app.test_workers = workers  # type: ignore[attr-defined]
    yield app
    for g in list(lj.GATES.values()):
        g.set()
    for w in workers:
        w.stop(timeout=timedelta(seconds=1))
    app.close()


def start(app: Ratchet, **options: Any) -> Worker:
    worker: Worker = app.worker(**{**FAST, **options})
    app.test_workers.append(worker)  # type: ignore[attr-defined]
    worker.start()
    return worker


@pytest.fixture
def beats_by_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers' heartbeats come from :func:`tick` alone, at FakeClock times.

    A liveness thread beats on wall time and reads the FakeClock: a beat that read the clock
    before a tick and wrote after it (a wait for SQLite's write lock, a loaded machine) sets the
    node's heartbeat back by the whole tick, past ``orphan_grace``, and the test's next watcher
    pass declares a live node dead. Without those threads every beat happens at a known time.
    """
    monkeypatch.setattr(Liveness, "_beat_loop", lambda self: None)


def tick(clock: FakeClock, delta: timedelta | float, *workers: Worker) -> None:
    """Let ``delta`` pass in steps of at most 10 s, every worker heart-beating after each step
    (as their threads would): a node judges silence only while its own beats are regular."""
    left = delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
    while left > timedelta(0):
        step = min(left, timedelta(seconds=10))
        clock.advance(step)
        left -= step
        for w in workers:
            assert w.liveness is not None and w.liveness.beat()


def status(app: Ratchet, job_id: uuid.UUID) -> JobStatus:
    rec = app.get_job(job_id)
    assert rec is not None
    return rec.status


def view(app: Ratchet, job_id: uuid.UUID) -> Any:
    [v] = app.store.job_liveness([job_id])  # type: ignore[attr-defined]
    return v


def polled(worker: Worker, times: int = 3) -> None:
    """Wait until ``worker`` polled ``times`` more times (each poll could have taken the job)."""
    start = worker.stats.polls
    wait_for(lambda: worker.stats.polls >= start + times, what=f"{times} polls")


def fatal_fenced_logs(caplog: pytest.LogCaptureFixture, job_id: uuid.UUID) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.ERROR
        and "fatal: FencedOut" in r.getMessage()
        and str(job_id) in r.getMessage()
    ]


@pytest.mark.usefixtures("beats_by_tick")
def test_stalled_job_is_taken_over_and_resumes_from_its_checkpoint(
    app: Ratchet, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    a = start(app)
    handle = app.enqueue(lj.steps, "s", 4, hang_after=2).submit()
    wait_for(lambda: lj.WAITING.get("s") == 1, what="the first run to hang after step 2")
    b = start(app)
    assert a.liveness is not None and b.liveness is not None
    tick(clock, a.config.running_stall - timedelta(microseconds=1), a, b)
    assert a.liveness.watch_once().stalled == 0, "no premature stall"
    tick(clock, timedelta(microseconds=1), a, b)
    assert a.liveness.watch_once().stalled == 1
    assert view(app, handle.id).status is JobStatus.TIMED_OUT
    tick(clock, a.config.timed_out_grace - timedelta(microseconds=1), a, b)
    polled(b)  # nobody takes it during the owner's grace
    assert view(app, handle.id).status is JobStatus.TIMED_OUT
    tick(clock, timedelta(microseconds=1), a, b)
    wait_for(lambda: status(app, handle.id) is JobStatus.SUCCEEDED, what="the takeover")
    assert handle.result() == {"epoch": 2, "resumed_from": 2, "done": [1, 2, 3, 4]}
    assert b.liveness.stats.taken_over == 1
    lj.gate("s").set()  # the zombie wakes up and tries its next checkpoint
    wait_for(lambda: a.liveness.stats.fenced_progress == 1, what="the zombie to be fenced")
    assert ("s", 1, 0, "FencedOut") in lj.RUNS and ("s", 2, 2, "ok") in lj.RUNS
    assert a.stats.fenced_out == 1
    assert len(fatal_fenced_logs(caplog, handle.id)) == 1, "logged as fatal, once"
    history = [(x.epoch, x.node_id, x.outcome) for x in app.attempts(handle.id)]
    assert history == [(1, a.node_id, "ABANDONED"), (2, b.node_id, "SUCCEEDED")]
    # The records about the job name it, its attempt and the node that logged them.
    fields = {
        r.getMessage().split(":")[0]: (r.ratchet_job_id, r.ratchet_attempt, r.ratchet_node_id)  # type: ignore[attr-defined]
        for r in caplog.records
        if str(handle.id) in r.getMessage()
    }
    assert fields[f"job {handle.id} taken over (epoch 2, takeover 1)"] == (
        str(handle.id),
        1,
        b.node_id,
    )
    assert fields["fatal"] == (str(handle.id), 1, a.node_id), "the zombie's fenced progress"


def test_node_found_dead_continues_as_a_new_incarnation(app: Ratchet, clock: FakeClock) -> None:
    events = Events(app)
    a = start(app)
    assert a.liveness is not None
    handle = app.enqueue(lj.steps, "r", 3, hang_after=1).submit()
    wait_for(lambda: lj.WAITING.get("r") == 1)
    old = a.node_id
    assert app.store.declare_dead([old], now=clock.now()) == [old]  # type: ignore[attr-defined]
    wait_for(lambda: a.node_id != old, what="the next heartbeat to notice")
    assert a.liveness.stats.restarts == 1 and a.liveness.previous_ids == [old]
    quick = app.enqueue(lj.quick, 5).submit()
    wait_for(lambda: status(app, quick.id) is JobStatus.SUCCEEDED, what="work under the new id")
    assert app.attempts(quick.id)[0].node_id == a.node_id
    # Its hung run belongs to the dead incarnation: orphaned, and not taken by this process.
    assert a.liveness.watch_once().orphaned == 1
    polled(a)  # its own polls do not take its own hung run over
    assert view(app, handle.id).status is JobStatus.TIMED_OUT
    b = start(app)
    wait_for(lambda: status(app, handle.id) is JobStatus.SUCCEEDED, what="b's takeover")
    assert handle.result()["resumed_from"] == 1
    lj.gate("r").set()
    wait_for(lambda: a.liveness.stats.fenced_progress == 1)
    assert [e.job_id for e in events.of(EventKind.FENCED_OUT)] == [handle.id]
    assert b.liveness is not None and b.liveness.stats.taken_over == 1


def test_previous_incarnation_is_recovered_at_start(app: Ratchet, clock: FakeClock) -> None:
    store: Any = app.store
    previous = NodeInfo("box-old", "box", host_name(), os.getpid(), 2)
    store.register_incarnation(previous, now=clock.now())
    handle = app.enqueue(lj.quick, 7).submit()
    [claimed] = store.claim("box-old", 1, now=clock.now(), boost_interval=timedelta(0))
    assert claimed.job_id == handle.id
    a = start(app)  # same name, same host, same pid: box-old is this process's past
    assert a.liveness is not None and a.liveness.stats.nodes_declared_dead == 1
    wait_for(lambda: status(app, handle.id) is JobStatus.SUCCEEDED, what="recovery at once")
    assert {n.node_id: n.state for n in app.store.list_nodes()}["box-old"] == "DEAD"
    assert [x.outcome for x in app.attempts(handle.id)] == ["ABANDONED", "SUCCEEDED"]


def test_drain_stops_at_a_safe_point_and_hands_the_job_back(app: Ratchet, clock: FakeClock) -> None:
    a = start(app)
    assert a.liveness is not None
    handle = app.enqueue(lj.cooperative, "d", 5).submit()  # no retries to spare
    wait_for(lambda: lj.WAITING.get("d") == 1)
    assert a.liveness.readiness()["ready"] is True
    b = start(app)
    a.stop(timeout=timedelta(seconds=2))
    assert a.liveness.readiness() == {"ready": False, "state": "DRAINING", "node_id": a.node_id}
    assert a.liveness.stats.drain_stops == 1 and a.liveness.stats.handed_back == 1
    assert a.node_id not in {n.node_id for n in app.store.list_nodes()}, "deregistered"
    wait_for(lambda: status(app, handle.id) is JobStatus.SUCCEEDED, what="b's takeover")
    rec = handle.record()
    assert rec is not None and rec.attempts == 0, "a drain consumes no retry"
    assert handle.result() == {"epoch": 2, "resumed_from": 2}
    assert b.liveness is not None and b.liveness.stats.taken_over == 1


def test_drain_hands_back_a_job_that_ignores_the_request(app: Ratchet, clock: FakeClock) -> None:
    a = start(app)
    handle = app.enqueue(lj.stubborn, "x").submit()
    wait_for(lambda: lj.WAITING.get("x") == 1)
    start(app)
    a.stop(timeout=timedelta(milliseconds=300))
    wait_for(lambda: status(app, handle.id) is JobStatus.SUCCEEDED, what="b's takeover")
    assert handle.result() == 2
    lj.gate("x").set()
    wait_for(lambda: ("x", 1, 0, "ok") in lj.RUNS, what="the zombie to return")
    wait_for(
        lambda: a.stats.late_results_discarded + a.stats.fenced_out == 1,
        what="the zombie's outcome to be discarded",
    )
    assert handle.result() == 2 and a.stats.succeeded == 0, "the late result was discarded"


@pytest.mark.usefixtures("beats_by_tick")
def test_expiry_goes_through_the_retry_policy(
    app: Ratchet, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    events = Events(app)
    a = start(app)
    assert a.liveness is not None
    handle = (
        app.enqueue(lj.hang, "t").with_stall_timeout(timedelta(seconds=10)).with_max_retries(1)
    ).submit()
    wait_for(lambda: lj.WAITING.get("t") == 1)
    tick(clock, 10, a)
    assert a.liveness.watch_once().stalled == 0, "not judging yet: healthy for less than Dn"
    tick(clock, a.config.orphan_grace, a)
    assert a.liveness.watch_once().stalled == 1
    tick(clock, a.config.timed_out_grace + a.config.takeover_window, a)
    [expired] = a.liveness.watch_once().expired
    assert expired.kind.value == "RETRY"
    wait_for(lambda: lj.WAITING.get("t") == 2, what="attempt 2 on the same node")
    rec = handle.record()
    assert rec is not None and rec.attempts == 1 and "JobStalledError" in (rec.last_error or "")
    kinds = events.kinds(handle.id)
    assert EventKind.RETRYING in kinds and EventKind.FAILED in kinds
    assert [e.data["stalled"] for e in events.of(EventKind.STALLED)] == [1]
    lj.gate("t").set()
    wait_for(lambda: status(app, handle.id) is JobStatus.SUCCEEDED)
    assert handle.result() == 3, "epoch 1, + 1 by the expiry (T9), + 1 by the claim"
    wait_for(lambda: a.stats.fenced_out == 1, what="attempt 1's late result to be refused")
    assert len(fatal_fenced_logs(caplog, handle.id)) == 1, "logged as fatal, once"


def test_prefetch_reserves_within_its_bound(app: Ratchet, clock: FakeClock) -> None:
    a = start(app, concurrency=1, prefetch=2)
    handles = [app.enqueue(lj.hang, "p").submit() for _ in range(4)]
    wait_for(lambda: lj.WAITING.get("p") == 1)
    assert a.liveness is not None

    def held() -> Counter[JobStatus]:
        views = app.store.job_liveness()  # type: ignore[attr-defined]
        return Counter(v.status for v in views if v.picked_by == a.node_id)

    full = {JobStatus.RUNNING: 1, JobStatus.QUEUED: 2}
    wait_for(lambda: held() == full, what="the prefetch to fill")
    for _ in range(3):  # what the poller does while every slot is busy: never beyond the bound
        a.liveness.refill()
        assert held() == full
    lj.gate("p").set()
    wait_for(lambda: all(status(app, h.id) is JobStatus.SUCCEEDED for h in handles))


def test_outcomes_waiting_to_be_written_hold_slots_past_the_write_ahead(
    app: Ratchet, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Back-pressure counts what the store sees: a finished run is still RUNNING there until
    its (batched) outcome is written. Up to ``concurrency`` such runs wait without holding a
    slot (the next claim overlaps the write); past that they hold their slots, so a stalled
    write stops the claims with at most ``2 * concurrency`` of the node's jobs RUNNING."""
    store: Any = app.store
    real = store.record_outcomes
    writing, release = threading.Event(), threading.Event()

    def held_write(node_id: str, outcomes: Any, **options: Any) -> Any:
        writing.set()
        assert release.wait(10), "the test never released the write"
        return real(node_id, outcomes, **options)

    monkeypatch.setattr(store, "record_outcomes", held_write)
    first = app.enqueue(lj.quick, 1).submit()
    a = start(app, concurrency=1)

    def running_here() -> set[uuid.UUID]:
        views = store.job_liveness()
        return {
            v.job_id for v in views if v.picked_by == a.node_id and v.status is JobStatus.RUNNING
        }

    try:
        wait_for(writing.is_set, what="the first outcome write")
        second = app.enqueue(lj.quick, 2).submit()
        # the first's outcome waits without its slot: the second is claimed and runs
        wait_for(lambda: second.id in running_here(), what="the second job claimed")
        wait_for(lambda: not a.slots.local_job_ids(), what="the second run to end")
        third = app.enqueue(lj.quick, 3).submit()
        assert a.free_slots() == 0
        assert a.poll_once() == [], "a poll now would exceed the slots and the write-ahead"
        assert running_here() == {first.id, second.id}
        assert status(app, third.id) is JobStatus.PENDING
    finally:
        release.set()
    wait_for(lambda: status(app, third.id) is JobStatus.SUCCEEDED, what="the third job")
    assert status(app, first.id) is JobStatus.SUCCEEDED
    assert status(app, second.id) is JobStatus.SUCCEEDED


def test_a_node_takes_over_only_jobs_it_can_run(app: Ratchet, clock: FakeClock) -> None:
    a = app.worker(**FAST)
    assert a.liveness is not None
    supports = a.liveness.supports
    assert supports("liveness_jobs:quick", None)
    assert supports("liveness_jobs:quick", "threads")
    assert not supports("elsewhere:quick", None), "its class policy refuses the target"
    assert not supports("liveness_jobs:quick", "no-such-executor"), "no such executor here"
    assert not supports("not a target", None)


def test_a_job_this_node_cannot_run_is_left_to_others(app: Ratchet, clock: FakeClock) -> None:
    store: Any = app.store
    gone = NodeInfo("gone-1", "gone", "other-host", 1, 4)
    store.register_incarnation(gone, now=clock.now())
    payload = '{"args":[3],"kwargs":{}}'
    plain = new_job(clock, target="liveness_jobs:quick", payload=payload)
    special = new_job(clock, target="liveness_jobs:quick", payload=payload, executor="gpu")
    store.insert_jobs([plain, special], now=clock.now())
    assert len(store.claim("gone-1", 2, now=clock.now(), boost_interval=timedelta(0))) == 2
    assert store.declare_dead(["gone-1"], now=clock.now()) == ["gone-1"]
    b = app.worker(**FAST)  # not started: this test polls it
    assert b.liveness is not None
    b.liveness.register()
    assert b.liveness.watch_once().orphaned == 2  # takeover-eligible at once: their node is dead
    assert {v.job_id: v.status for v in store.job_liveness()} == {
        plain.job_id: JobStatus.TIMED_OUT,
        special.job_id: JobStatus.TIMED_OUT,
    }
    taken = b.poll_once()
    assert [j.job_id for j in taken] == [plain.job_id], "no 'gpu' executor on this node"
    assert view(app, special.job_id).picked_by == "gone-1"
    for job in taken:  # the poll claimed it; nothing runs it here
        b.record(
            [
                Outcome(
                    job.job_id,
                    job.epoch,
                    job.attempt,
                    OutcomeKind.SUCCEEDED,
                    clock.now(),
                    clock.now(),
                    result="3",
                )
            ]
        )
    b.liveness.stop()


def test_progress_needs_a_worker_run_context(clock: FakeClock) -> None:
    ctx = JobContext(uuid.uuid4(), 1, 1, "n", clock.now())
    with pytest.raises(RuntimeError, match="worker"):
        ctx.checkpoint(1, None)
    with pytest.raises(RuntimeError, match="worker"):
        ctx.touch()


def test_reservations_that_takeovers_left_no_room_for_stay_reserved(
    app: Ratchet, clock: FakeClock
) -> None:
    """A poll takes over eligible jobs before it starts its reserved ones; a reservation that
    found no free slot is still this node's and starts on a later poll (it used to be dropped
    from memory and sit QUEUED until the queued-stall deadline revoked it)."""
    store: Any = app.store
    gone = NodeInfo("gone-1", "gone", "other-host", 1, 4)
    store.register_incarnation(gone, now=clock.now())
    payload = '{"args":[3],"kwargs":{}}'
    orphan = new_job(clock, target="liveness_jobs:quick", payload=payload)
    store.insert_jobs([orphan], now=clock.now())
    assert len(store.claim("gone-1", 1, now=clock.now(), boost_interval=timedelta(0))) == 1
    assert store.declare_dead(["gone-1"], now=clock.now()) == ["gone-1"]
    b = app.worker(**{**FAST, "concurrency": 1, "prefetch": 1})  # not started: polled here
    assert b.liveness is not None
    b.liveness.register()
    waiting = new_job(clock, target="liveness_jobs:quick", payload=payload)
    store.insert_jobs([waiting], now=clock.now())
    b.liveness.refill()
    assert b.liveness.reserved == 1
    assert b.liveness.watch_once().orphaned == 1

    def finish(jobs: list[Any]) -> None:  # the poll claimed them; nothing runs them here
        for job in jobs:
            b.slots.release(job)
            outcome = Outcome(
                job.job_id, job.epoch, job.attempt, OutcomeKind.SUCCEEDED, clock.now(), clock.now()
            )
            assert b.record([outcome]) == []

    taken = b.poll_once()
    assert [j.job_id for j in taken] == [orphan.job_id], "the takeover used the only slot"
    assert b.liveness.reserved == 1, "the untried reservation is still held"
    assert view(app, waiting.job_id).status is JobStatus.QUEUED
    finish(taken)
    started = b.poll_once()
    assert [j.job_id for j in started] == [waiting.job_id]
    finish(started)
    b.liveness.stop()


def test_a_worker_publishes_its_open_breakers_with_its_heartbeat(
    app: Ratchet, clock: FakeClock, beats_by_tick: None
) -> None:
    a = start(app)
    assert a.liveness is not None

    def published() -> dict[str, str]:
        [node] = [n for n in app.store.list_nodes() if n.node_id == a.node_id]
        return dict(node.breakers)

    tick(clock, 1, a)
    assert published() == {}
    app.resilience.force_open("carrier-api")  # type: ignore[attr-defined]
    tick(clock, 1, a)
    assert published() == {"carrier-api": "OPEN"}
    app.resilience.reset("carrier-api")  # type: ignore[attr-defined]
    tick(clock, 1, a)
    assert published() == {}, "closed again: the next beat clears it"
