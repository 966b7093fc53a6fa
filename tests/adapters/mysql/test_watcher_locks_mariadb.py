"""MariaDB 10.11: the scans for stalled and orphaned jobs take no locks beyond their candidates.

A locking read (``SELECT … FOR UPDATE``) over every matching row locks each row InnoDB passes,
so a scan waits on, and deadlocks with, other workers' claims and completions. The watcher and
the takers therefore read their candidates without locks and then lock (or conditionally
update) those rows only, by primary key. Here another transaction holds locks that
a locking scan would run into (a job that is not a candidate, and the owner's node row as a
heartbeat in flight holds it); every pass must finish without waiting for them and act on the
candidates.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

import pytest
from sqlalchemy import create_engine, select

from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.watcher import NodeInfo
from ratchet.plugins import Plugins, make_plugin_manager
from ratchet.sql import schema
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import BOOST, new_job
from ratchet.testing.watcher_contract import SETTINGS, fail_or_retry

T = TypeVar("T")
Q, NODE, PERMIT = schema.job_queue, schema.node, schema.resource_permit
#: Far below the server's lock wait timeout (50 s) and the store's retries of it: a pass that
#: waited for the other transaction's locks could not finish within this bound.
BOUND = 20.0


@pytest.fixture
def store(mysql_store_url: str) -> Iterator[Any]:
    store = Plugins(make_plugin_manager()).store_factory(mysql_store_url)(mysql_store_url, None)
    store.migrate()
    yield store
    store.close()


@pytest.fixture
def blocker(mysql_store_url: str) -> Iterator[Any]:
    """A second session whose open transaction holds row locks until the test ends."""
    engine = create_engine(mysql_store_url)
    conn = engine.connect()
    conn.begin()
    yield conn
    conn.rollback()
    conn.close()
    engine.dispose()


def bounded(work: Callable[[], T]) -> T:
    """Run ``work`` on a thread; fail if it does not finish within :data:`BOUND` seconds."""
    result: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(work())
        except BaseException as exc:  # re-raised below
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(BOUND)
    assert not thread.is_alive(), "the scan waited for a lock on a row that is no candidate"
    if errors:
        raise errors[0]
    return result[0]


def register(store: Any, clock: FakeClock, node_id: str) -> None:
    info = NodeInfo(node_id, node_id, "host-1", 100, 8)
    store.register_incarnation(info, now=clock.now())


def claim_one(store: Any, clock: FakeClock, node_id: str, **job: Any) -> Any:
    new = new_job(clock, **job)
    store.insert_jobs([new], now=clock.now())
    [claimed] = store.claim(node_id, 1, now=clock.now(), boost_interval=BOOST)
    assert claimed.job_id == new.job_id
    return claimed


def lock_job(blocker: Any, job_id: Any) -> None:
    stmt = select(Q.c.status).where(Q.c.job_id == job_id).with_for_update()
    assert blocker.execute(stmt).first() is not None, "the blocker must really hold the row"


def lock_node(blocker: Any, node_id: str) -> None:
    stmt = select(NODE.c.state).where(NODE.c.node_id == node_id).with_for_update()
    assert blocker.execute(stmt).first() is not None, "the blocker must really hold the row"


def test_declaring_a_node_dead_locks_only_its_candidates(
    store: Any, blocker: Any, clock: FakeClock
) -> None:
    register(store, clock, "doomed")
    orphan = claim_one(store, clock, "doomed")
    ghost = claim_one(store, clock, "ghost")  # its node never registered: orphaned at once
    clock.advance(SETTINGS.dead_after)
    register(store, clock, "alive")
    busy = claim_one(store, clock, "alive")  # RUNNING, not orphaned: no candidate
    lock_job(blocker, busy.job_id)  # its owner is writing its completion, say
    lock_node(blocker, "alive")  # a heartbeat in flight
    now = clock.now()
    report = bounded(
        lambda: store.watch(now=now, settings=SETTINGS, decide=lambda s: fail_or_retry(s, now))
    )
    assert (report.dead_nodes, report.orphaned) == (("doomed",), 2)
    views = store.job_liveness([orphan.job_id, ghost.job_id])
    assert {v.status for v in views} == {JobStatus.TIMED_OUT}


def test_watcher_pass_locks_only_its_candidates(store: Any, blocker: Any, clock: FakeClock) -> None:
    register(store, clock, "owner")
    stalled = claim_one(store, clock, "owner", stall_timeout=timedelta(seconds=10))
    clock.advance(timedelta(seconds=5))
    busy = claim_one(store, clock, "owner")  # never reported progress: no candidate
    clock.advance(timedelta(seconds=5))
    assert store.beat("owner", now=clock.now())
    lock_job(blocker, busy.job_id)
    lock_node(blocker, "owner")  # a heartbeat in flight
    now = clock.now()
    report = bounded(
        lambda: store.watch(now=now, settings=SETTINGS, decide=lambda s: fail_or_retry(s, now))
    )
    assert (report.stalled, report.orphaned, report.dead_nodes) == (1, 0, ())
    [view] = store.job_liveness([stalled.job_id])
    assert (view.status, view.timed_out_at, view.epoch) == (JobStatus.TIMED_OUT, now, stalled.epoch)


def test_takeover_locks_only_its_candidates(store: Any, blocker: Any, clock: FakeClock) -> None:
    register(store, clock, "owner")
    register(store, clock, "taker")
    orphan = claim_one(store, clock, "owner")
    clock.advance(SETTINGS.dead_after)
    assert store.beat("taker", now=clock.now())
    now = clock.now()
    report = store.watch(now=now, settings=SETTINGS, decide=lambda s: fail_or_retry(s, now))
    assert report.orphaned == 1
    busy = claim_one(store, clock, "taker")  # RUNNING on the taker: no candidate
    lock_job(blocker, busy.job_id)
    lock_node(blocker, "owner")
    taken = bounded(lambda: store.takeover("taker", 4, now=clock.now(), settings=SETTINGS))
    assert [(t.job_id, t.epoch) for t in taken] == [(orphan.job_id, orphan.epoch + 1)]


def test_reclaiming_permits_of_vanished_nodes_locks_only_those_permits(
    store: Any, blocker: Any, clock: FakeClock
) -> None:
    register(store, clock, "alive")
    busy = claim_one(store, clock, "alive")
    stray = claim_one(store, clock, "ghost")  # its node never registered (or deregistered)
    for job, node in ((busy, "alive"), (stray, "ghost")):
        decision = store.acquire_permit("api", job.job_id, job.epoch, node, now=clock.now())
        assert decision.granted
    clock.advance(SETTINGS.dead_after)
    assert store.beat("alive", now=clock.now())
    lock_job(blocker, busy.job_id)
    lock_node(blocker, "alive")  # a heartbeat in flight
    held = select(PERMIT.c.node_id).where(PERMIT.c.job_id == busy.job_id).with_for_update()
    assert blocker.execute(held).first() is not None  # its release in flight, say
    now = clock.now()
    bounded(lambda: store.watch(now=now, settings=SETTINGS, decide=lambda s: fail_or_retry(s, now)))
    assert [(p.job_id, p.node_id) for p in store.list_permits()] == [(busy.job_id, "alive")]
