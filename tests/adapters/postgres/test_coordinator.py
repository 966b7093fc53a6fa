"""The LISTEN/NOTIFY coordinator beyond the shared contract: latency, reconnects, cleanup."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from ratchet.domain.lifecycle import JobPriority
from ratchet.ports import WakeupHint
from ratchet.testing import assert_eventually
from ratchet.testing.coordinator_contract import Recorder
from ratchet_postgres.coordinator import (
    RECONNECT_ORIGIN,
    CoordinatorState,
    PostgresClusterCoordinator,
    decode_hint,
    encode_hint,
)

pytestmark = pytest.mark.postgres

DELIVERY_BOUND = 1.0  # seconds; typical delivery on loopback is well under 5 ms


@pytest.fixture
def make(postgres_store_url: str) -> Iterator[Callable[..., PostgresClusterCoordinator]]:
    channel = f"test_{uuid.uuid4().hex[:10]}"
    made: list[PostgresClusterCoordinator] = []

    def factory(**kwargs: Any) -> PostgresClusterCoordinator:
        node = PostgresClusterCoordinator(postgres_store_url, channel=channel, **kwargs)
        made.append(node)
        assert node.wait_connected(10), "listener did not connect"
        return node

    yield factory
    for node in made:
        node.close()


def _admin(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True)


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    assert_eventually(predicate, timeout, what)


def test_delivery_to_another_node_is_fast(make: Callable[..., PostgresClusterCoordinator]) -> None:
    sender, receiver = make(), make()
    recorder = Recorder()
    receiver.add_listener(recorder)
    latencies = []
    for i in range(20):
        origin = f"lat-{i}"
        started = time.perf_counter()
        sender.notify_new_work(WakeupHint(JobPriority.HIGH, origin, target="t"))
        hint = recorder.wait_for(origin, DELIVERY_BOUND)
        latencies.append(time.perf_counter() - started)
        assert hint == WakeupHint(JobPriority.HIGH, origin, target="t")
    assert max(latencies) < DELIVERY_BOUND
    assert receiver.received == 20


def test_local_listeners_hear_their_own_node_once(
    make: Callable[..., PostgresClusterCoordinator],
) -> None:
    """A worker in the submitting process wakes at once (no round trip) and exactly once."""
    node, other = make(), make()
    mine, theirs = Recorder(), Recorder()
    node.add_listener(mine)
    other.add_listener(theirs)
    node.notify_new_work(WakeupHint(JobPriority.NORMAL, "self"))
    assert mine.find("self") != []  # synchronous, before any round trip
    other.notify_new_work(WakeupHint(JobPriority.NORMAL, "marker"))
    assert mine.wait_for("marker", DELIVERY_BOUND) is not None
    assert theirs.wait_for("self", DELIVERY_BOUND) is not None
    assert len(mine.find("self")) == 1
    assert node.received == 1  # the marker; its own echo was dropped


def test_reconnects_after_the_listener_backend_is_terminated(
    make: Callable[..., PostgresClusterCoordinator],
    postgres_store_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sender = make()
    receiver = make(max_backoff=0.2)
    recorder = Recorder()
    receiver.add_listener(recorder)
    old_pid = receiver.listener_pid
    caplog.set_level(logging.WARNING, logger="ratchet.coordinator.postgres")
    with _admin(postgres_store_url) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (old_pid,))
    _wait(
        lambda: receiver.reconnects == 1 and receiver.state is CoordinatorState.CONNECTED,
        10,
        "reconnect",
    )
    assert receiver.listener_pid != old_pid
    # Missed wakeups are covered by one synthetic hint after reconnecting.
    assert recorder.wait_for(RECONNECT_ORIGIN, DELIVERY_BOUND) is not None
    sender.notify_new_work(WakeupHint(JobPriority.CRITICAL, "after"))
    assert recorder.wait_for("after", DELIVERY_BOUND) is not None
    lost = [r for r in caplog.records if "lost its connection" in r.getMessage()]
    assert len(lost) == 1  # logged once per outage


def test_outage_is_logged_once_and_polling_is_not_blocked(
    make: Callable[..., PostgresClusterCoordinator],
    postgres_store_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """While the listener cannot reconnect (role may not log in), it retries quietly."""
    role = f"r_{uuid.uuid4().hex[:8]}"
    with _admin(postgres_store_url) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
    from sqlalchemy.engine import make_url

    url = make_url(postgres_store_url).set(username=role, password="pw").render_as_string(False)
    caplog.set_level(logging.INFO, logger="ratchet.coordinator.postgres")
    node = PostgresClusterCoordinator(url, max_backoff=0.05, initial_backoff=0.01)
    try:
        assert node.wait_connected(10)
        with _admin(postgres_store_url) as admin:
            admin.execute(f"ALTER ROLE {role} NOLOGIN")
            admin.execute("SELECT pg_terminate_backend(%s)", (node.listener_pid,))
        _wait(lambda: node.connect_failures >= 3, 10, "several failed reconnects")
        assert node.state is CoordinatorState.RECONNECTING
        # Local listeners still hear local hints while the listener is down.
        recorder = Recorder()
        node.add_listener(recorder)
        node.notify_new_work(WakeupHint(JobPriority.HIGH, "local"))  # NOTIFY fails: no raise
        assert recorder.find("local") != []
        _wait(lambda: node.publish_errors == 1, 10, "the failed NOTIFY")
        with _admin(postgres_store_url) as admin:
            admin.execute(f"ALTER ROLE {role} LOGIN")
        _wait(lambda: node.state is CoordinatorState.CONNECTED, 10, "reconnected")
        messages = [r.getMessage() for r in caplog.records]
        outage = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(outage) == 1, messages  # once per outage, however many attempts failed
        assert "lost its connection" in outage[0]
        assert sum("work again" in m for m in messages) == 1
    finally:
        node.close()
        with _admin(postgres_store_url) as admin:
            admin.execute(f"DROP ROLE IF EXISTS {role}")


def test_close_is_prompt_idempotent_and_leaks_nothing(
    make: Callable[..., PostgresClusterCoordinator], postgres_store_url: str
) -> None:
    before = {t.ident for t in threading.enumerate()}
    node = PostgresClusterCoordinator(postgres_store_url, ping_interval=60)
    assert node.wait_connected(10)
    node.notify_new_work(WakeupHint(JobPriority.NORMAL, "warm"))  # opens the sender connection
    _wait(lambda: node.published == 1, 10, "the NOTIFY to be sent")
    with _admin(postgres_store_url) as admin:
        count = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'ratchet-listener'"
        ).fetchone()
        assert count is not None and count[0] == 2
        started = time.monotonic()
        node.close()
        took = time.monotonic() - started
        node.close()
        assert took < 1.0, f"close() took {took:.2f} s"
        assert node.state is CoordinatorState.CLOSED
        leaked = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
        assert leaked == []
        _wait(
            lambda: (
                admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND application_name = 'ratchet-listener'"
                ).fetchone()
                == (0,)
            ),
            10,
            "server-side sessions to end",
        )
    node.notify_new_work(WakeupHint(JobPriority.NORMAL, "after-close"))  # ignored, no raise


def test_close_while_reconnecting_is_prompt(postgres_store_url: str) -> None:
    from ratchet.testing.servers import free_port

    node = PostgresClusterCoordinator(
        f"postgresql://nobody:x@127.0.0.1:{free_port()}/none", max_backoff=30, initial_backoff=30
    )
    _wait(lambda: node.state is CoordinatorState.RECONNECTING, 10, "first failed connect")
    started = time.monotonic()
    node.close()
    assert time.monotonic() - started < 1.0
    assert not node._subscriber.is_alive()


def test_payload_round_trip_and_garbage() -> None:
    hint = WakeupHint(JobPriority.LOW, "node-ä", target="x" * 5000)
    decoded, sender = decode_hint(encode_hint(hint, "abc"))
    assert sender == "abc"
    assert decoded.priority is JobPriority.LOW and decoded.origin_node == "node-ä"
    assert decoded.target == "x" * 1000  # cut, so the payload stays under NOTIFY's limit
    assert len(encode_hint(WakeupHint(JobPriority.LOW, "o" * 9000, "t" * 9000)).encode()) < 8000
    assert decode_hint("not json")[0] == WakeupHint(JobPriority.NORMAL, "?")
    assert decode_hint('{"p": 99}')[0] == WakeupHint(JobPriority.NORMAL, "?")


def test_a_payload_carries_the_jobs_a_hint_announces() -> None:
    many = WakeupHint(JobPriority.HIGH, "web-1", jobs=250)
    assert decode_hint(encode_hint(many, "s"))[0] == many
    assert '"n"' not in encode_hint(WakeupHint(JobPriority.HIGH, "web-1"))  # one job: implied
    for count, jobs in ((0, 1), (-5, 1), ("7", 1), (True, 1), (10**13, 10**9)):
        assert decode_hint(json.dumps({"p": 2, "o": "x", "n": count}))[0].jobs == jobs


def test_a_burst_of_hints_is_sent_in_few_round_trips(
    make: Callable[..., PostgresClusterCoordinator],
) -> None:
    """Submitting never waits for NOTIFY; identical hints queued together collapse into one."""
    sender, receiver = make(), make()
    recorder = Recorder()
    receiver.add_listener(recorder)
    started = time.perf_counter()
    for _ in range(500):
        sender.notify_new_work(WakeupHint(JobPriority.NORMAL, "same"))
    for i in range(200):
        sender.notify_new_work(WakeupHint(JobPriority.NORMAL, f"distinct-{i}"))
    queued_in = time.perf_counter() - started
    assert queued_in < 0.5, f"queueing 700 hints took {queued_in:.3f} s"
    assert recorder.wait_for("distinct-199", 10) is not None
    assert [f"distinct-{i}" for i in range(200)] == [
        o for o in recorder.origins() if o.startswith("distinct")
    ]
    assert 1 <= len(recorder.find("same")) < 500
    assert sender.publish_errors == sender.dropped == 0 and sender.pending == 0


def test_no_wakeup_for_a_rolled_back_submit_in_the_callers_transaction(
    postgres_store_url: str, pg_jobs: Any
) -> None:
    """The job and its wakeup share the caller's PostgreSQL transaction's fate."""
    from sqlalchemy import create_engine

    from ratchet import Ratchet

    app = Ratchet(
        postgres_store_url, allowed_modules=["pg_jobs"], coordinator="postgres", node_name="app"
    )
    other = PostgresClusterCoordinator(postgres_store_url)
    recorder = Recorder()
    other.add_listener(recorder)
    engine = create_engine(postgres_store_url)
    try:
        assert other.wait_connected(10)
        with engine.connect() as conn:
            trans = conn.begin()
            rolled_back = app.enqueue(pg_jobs.noop, 1).submit(conn)
            trans.rollback()
        assert app.get_job(rolled_back.id) is None
        app.coordinator.notify_new_work(WakeupHint(JobPriority.LOW, "marker"))
        assert recorder.wait_for("marker", DELIVERY_BOUND) is not None
        assert recorder.find("app") == [], "a rolled-back submission sent a wakeup"
        with engine.connect() as conn:
            trans = conn.begin()
            committed = app.enqueue(pg_jobs.noop, 2).submit(conn)
            assert recorder.find("app") == []
            trans.commit()
        assert app.get_job(committed.id) is not None
        assert recorder.wait_for("app", DELIVERY_BOUND) is not None
    finally:
        engine.dispose()
        other.close()
        app.close()


def test_the_sender_does_not_wait_for_the_wal_flush(
    make: Callable[..., PostgresClusterCoordinator], postgres_store_url: str
) -> None:
    node = make()
    node.notify_new_work(WakeupHint(JobPriority.NORMAL, "warm"))
    _wait(lambda: node.published == 1, 10, "the NOTIFY to be sent")
    sender = node.transport.sender
    assert sender is not None
    setting = sender.execute("SHOW synchronous_commit").fetchone()
    assert setting == ("off",)


def test_a_forked_child_can_still_publish(
    make: Callable[..., PostgresClusterCoordinator],
) -> None:
    """A copy inherited through fork() sends from the child and leaves the parent's sessions be."""
    inherited = make()
    inherited.notify_new_work(WakeupHint(JobPriority.NORMAL, "warm"))  # opens the sender
    _wait(lambda: inherited.published == 1, 10, "the NOTIFY to be sent")
    assert inherited.transport.sender is not None
    sessions = (inherited.listener_pid, inherited.transport.sender.info.backend_pid)
    receiver = make()
    recorder = Recorder()
    receiver.add_listener(recorder)
    pid = os.fork()
    if pid == 0:  # the child: publish through the inherited coordinator, then leave at once
        code = 1
        try:
            inherited.notify_new_work(WakeupHint(JobPriority.CRITICAL, "child"))
            deadline = time.monotonic() + 10
            while inherited.published < 1 and time.monotonic() < deadline:
                time.sleep(0.01)  # polling a counter with a deadline
            code = 0 if inherited.published == 1 else 2
            inherited.close()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert recorder.wait_for("child", DELIVERY_BOUND) is not None
    # the parent's copy still listens and publishes on its own sessions, and hears the child
    assert inherited.state is CoordinatorState.CONNECTED
    mine = Recorder()
    inherited.add_listener(mine)
    receiver.notify_new_work(WakeupHint(JobPriority.NORMAL, "to-parent"))
    assert mine.wait_for("to-parent", DELIVERY_BOUND) is not None
    inherited.notify_new_work(WakeupHint(JobPriority.NORMAL, "parent"))
    assert recorder.wait_for("parent", DELIVERY_BOUND) is not None
    _wait(lambda: inherited.published == 2, 10, "the parent's NOTIFY to be counted")
    assert inherited.transport.sender is not None
    assert (inherited.listener_pid, inherited.transport.sender.info.backend_pid) == sessions


def test_a_cancel_with_interrupt_reaches_a_node_of_another_app_at_once(
    postgres_store_url: str, support_path: Any, tmp_path: Any
) -> None:
    """An app that only cancels (a web process) announces the stored request through
    LISTEN/NOTIFY; the worker of another app reads it at once, though its own poll of
    requests is an hour away."""
    from datetime import timedelta

    import timeout_jobs as tj

    from ratchet import Ratchet

    log = str(tmp_path / "units.log")
    web = Ratchet(
        postgres_store_url,
        allowed_modules=["timeout_jobs"],
        coordinator="postgres",
        node_name="web",
    )
    host = Ratchet(
        postgres_store_url,
        allowed_modules=["timeout_jobs"],
        coordinator="postgres",
        node_name="host",
    )
    worker = host.worker(
        cancel_request_interval=timedelta(hours=1), min_delay=timedelta(milliseconds=50)
    )
    worker.start()
    try:
        assert host.coordinator.wait_connected(10)  # type: ignore[attr-defined]
        handle = (
            web.enqueue(tj.units_with_safe_points, log, 1000, 0.02)
            .with_timeout(timedelta(seconds=60))
            .submit()
        )
        _wait(lambda: "unit 1 end" in tj.lines(log), 10, "the job to get going")
        assert web.cancel_job(handle.id, interrupt=True)
        _wait(lambda: tj.lines(log)[-1:] == ["stopped at a safe point"], 10, "a safe stop")
        assert worker.stats.cancellations_delivered == 1
    finally:
        worker.stop(timeout=timedelta(seconds=2))
        host.close()
        web.close()
