"""``BrokerCoordinator`` over an in-memory transport: what every broker coordinator gets for free.

The Redis and PostgreSQL coordinators are this class around their transports; these tests pin
the shared behaviour with a broker that fails on demand (``tests/support/memory_broker.py``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from memory_broker import SECRET, MemoryBroker, MemoryTransport, memory_coordinator

from ratchet.adapters import wakeups
from ratchet.adapters.wakeups import (
    RECONNECT_ORIGIN,
    BrokerCoordinator,
    CoordinatorState,
    backoff_delay,
)
from ratchet.domain.errors import ConfigurationError
from ratchet.domain.lifecycle import JobPriority
from ratchet.ports import WakeupHint
from ratchet.testing import wait_until
from ratchet.testing.coordinator_contract import Recorder, unique

LOGGER = "ratchet.coordinator.broker"
Coordinator = BrokerCoordinator[Any]


@pytest.fixture
def broker() -> MemoryBroker:
    return MemoryBroker()


@pytest.fixture
def make(broker: MemoryBroker) -> Iterator[Callable[..., Coordinator]]:
    """``make(**kwargs)``: a coordinator on the broker, closed after the test."""
    made: list[Coordinator] = []

    def factory(**kwargs: Any) -> Coordinator:
        kwargs.setdefault("reconnect_min", 0.01)
        kwargs.setdefault("reconnect_max", 0.05)
        coordinator = memory_coordinator(broker, **kwargs)
        made.append(coordinator)
        return coordinator

    yield factory
    for coordinator in made:
        coordinator.close()


def listening(make: Callable[..., Coordinator], **kwargs: Any) -> tuple[Coordinator, Recorder]:
    coordinator = make(**kwargs)
    recorder = Recorder()
    coordinator.add_listener(recorder)
    return coordinator, recorder


def stall(broker: MemoryBroker, sender: Coordinator, origin: str) -> threading.Event:
    """Hang the broker on ``sender``'s next publish call (for ``origin``); set the gate to go on."""
    gate = broker.stall_publishing()
    sender.notify_new_work(WakeupHint(JobPriority.LOW, origin))
    assert wait_until(lambda: broker.stalled == 1, 5)
    return gate


def our_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("ratchet-broker-")]


# ---------------------------------------------------------------------------------- delivery
def test_hints_reach_other_nodes_and_the_own_echo_is_ignored(
    make: Callable[..., Coordinator],
) -> None:
    a, at_a = listening(make)
    b, at_b = listening(make)
    threads: list[int] = []
    a.add_listener(lambda hint: threads.append(threading.get_ident()))
    assert a.state is b.state is CoordinatorState.CONNECTED
    assert a.state == "connected"  # a StrEnum: health checks may compare with text
    origin = unique("a")
    a.notify_new_work(WakeupHint(JobPriority.CRITICAL, origin, target="q"))
    # the local wakeup: at once, on the caller's thread
    assert at_a.find(origin) == [WakeupHint(JobPriority.CRITICAL, origin, "q")]
    assert threads == [threading.get_ident()]
    assert at_b.wait_for(origin, 5) == WakeupHint(JobPriority.CRITICAL, origin, "q")
    marker = unique("marker")  # a's echo, if any, reaches a before b's marker does
    b.notify_new_work(WakeupHint(JobPriority.LOW, marker))
    assert at_a.wait_for(marker, 5) is not None
    assert len(at_a.find(origin)) == 1
    assert wait_until(lambda: a.stats.ignored_own == 1 and a.stats.published == 1, 5)
    assert a.stats.received == 1 and b.stats.received == 1


def test_a_listener_that_raises_is_logged_and_the_others_still_hear_every_hint(
    make: Callable[..., Coordinator], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger=LOGGER)
    sender, node = make(), make()
    heard: list[str] = []

    def broken(hint: WakeupHint) -> None:
        heard.append(hint.origin_node)
        raise RuntimeError("listener bug")

    node.add_listener(broken)
    recorder = Recorder()
    node.add_listener(recorder)
    node.notify_new_work(WakeupHint(JobPriority.NORMAL, "local"))  # raises nothing
    for origin in ("remote-1", "remote-2"):
        sender.notify_new_work(WakeupHint(JobPriority.NORMAL, origin))
    assert recorder.wait_for("remote-2", 5) is not None
    assert heard == recorder.origins() == ["local", "remote-1", "remote-2"]
    assert node.state is CoordinatorState.CONNECTED and node.stats.connect_failures == 0
    failures = [r for r in caplog.records if "wakeup listener failed" in r.getMessage()]
    assert len(failures) == 3 and all(r.exc_info for r in failures)


def test_malformed_messages_are_counted_and_ignored(
    broker: MemoryBroker, make: Callable[..., Coordinator]
) -> None:
    node, recorder = listening(make)
    broker.publish(["not json", "[1, 2]", '[9, "o", null, "s"]'])
    origin = unique("valid")
    make().notify_new_work(WakeupHint(JobPriority.HIGH, origin))
    assert recorder.wait_for(origin, 5) is not None
    assert node.stats.malformed == 3
    assert recorder.origins() == [origin]


def test_malformed_hints_are_delivered_locally_but_never_queued(
    make: Callable[..., Coordinator],
) -> None:
    coordinator, recorder = listening(make)
    odd: Any = WakeupHint(42, "odd")  # type: ignore[arg-type]
    coordinator.notify_new_work(odd)
    assert recorder.find("odd") == [odd]
    assert coordinator.pending == 0


# ---------------------------------------------------------------------------------- the outbox
def test_the_outbox_is_bounded_coalesces_and_drains_once_the_broker_answers(
    broker: MemoryBroker, make: Callable[..., Coordinator]
) -> None:
    sender = make(max_pending=5)
    _, recorder = listening(make)
    gate = stall(broker, sender, "in-flight")  # the publisher hangs on the broker
    for i in range(20):
        sender.notify_new_work(WakeupHint(JobPriority.NORMAL, f"queued-{i}"))
    sender.notify_new_work(WakeupHint(JobPriority.CRITICAL, "queued-0"))  # coalesced, no drop
    assert sender.pending == 5
    assert sender.stats.dropped == 15
    gate.set()
    assert recorder.wait_for("queued-4", 5) is not None
    assert recorder.origins() == ["in-flight"] + [f"queued-{i}" for i in range(5)]
    assert recorder.find("queued-0")[0].priority is JobPriority.CRITICAL
    assert sender.pending == 0
    assert wait_until(lambda: sender.stats.published == 6, 5)
    assert broker.publish_calls == [1, 5]  # everything queued goes in one call


def test_coalesced_hints_add_up_their_jobs_and_arrive_marked_remote(
    broker: MemoryBroker, make: Callable[..., Coordinator]
) -> None:
    sender, at_sender = listening(make)
    _, recorder = listening(make)
    gate = stall(broker, sender, "in-flight")
    for jobs in (2, 3, 1):
        sender.notify_new_work(WakeupHint(JobPriority.NORMAL, "web", jobs=jobs))
    sender.notify_new_work(WakeupHint(JobPriority.HIGH, "web", target="<claimed>", jobs=7))
    gate.set()
    assert wait_until(lambda: len(recorder.find("web")) == 2, 5)
    work, claimed = sorted(recorder.find("web"), key=lambda hint: hint.target or "")
    assert (work.target, work.jobs, work.priority) == (None, 6, JobPriority.NORMAL)
    assert (claimed.target, claimed.jobs) == ("<claimed>", 7)
    assert work.remote and claimed.remote
    assert [hint.remote for hint in at_sender.find("web")] == [False] * 4  # delivered locally


def test_publish_batch_bounds_each_call(
    broker: MemoryBroker, make: Callable[..., Coordinator]
) -> None:
    sender = make(publish_batch=2)
    _, recorder = listening(make)
    gate = stall(broker, sender, "first")  # the publisher hangs on the broker
    for i in range(5):
        sender.notify_new_work(WakeupHint(JobPriority.NORMAL, f"o{i}"))
    gate.set()
    assert recorder.wait_for("o4", 5) is not None
    assert broker.publish_calls == [1, 2, 2, 1]


def test_publish_failures_are_counted_dropped_and_logged_once(
    broker: MemoryBroker, make: Callable[..., Coordinator], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    sender = make()
    _, recorder = listening(make)
    gate = stall(broker, sender, "lost-1")  # the publisher hangs on the broker
    with broker.cond:  # down for publishing only: the subscribers do not notice
        broker.up = False
    gate.set()
    assert wait_until(lambda: sender.stats.publish_errors == 1, 5)
    sender.notify_new_work(WakeupHint(JobPriority.NORMAL, "lost-2"))
    assert wait_until(lambda: sender.stats.publish_errors == 2 and sender.pending == 0, 5)
    broker.come_back()
    origin = unique("after")
    sender.notify_new_work(WakeupHint(JobPriority.NORMAL, origin))
    assert recorder.wait_for(origin, 5) is not None
    assert recorder.find("lost-1") == recorder.find("lost-2") == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "could not publish" in warnings[0], warnings
    assert SECRET not in caplog.text
    assert any("works again" in r.getMessage() for r in caplog.records)


def test_one_warning_per_outage_when_a_publish_fails_before_the_subscriber_notices(
    broker: MemoryBroker, make: Callable[..., Coordinator], caplog: pytest.LogCaptureFixture
) -> None:
    """A node that publishes (a claim report, a wakeup) just as the broker goes away warns of
    the failed publish; its subscriber, noticing the same outage a moment later, only informs.
    The next outage warns again."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    node = make()
    assert node.wait_connected(5)
    gate = stall(broker, node, "lost")
    with broker.cond:  # down for publishing only: the subscriber has not noticed yet
        broker.up = False
    gate.set()
    assert wait_until(lambda: node.stats.publish_errors == 1, 5)
    broker.go_down()  # now the subscriber's connection breaks too
    assert wait_until(lambda: node.state is CoordinatorState.RECONNECTING, 5)
    broker.come_back()
    assert node.wait_connected(5)

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]

    assert len(warnings()) == 1 and "could not publish" in warnings()[0], warnings()
    told = [r for r in caplog.records if "lost its connection" in r.getMessage()]
    assert [r.levelno for r in told] == [logging.INFO]
    broker.go_down()  # a second outage, noticed by the subscriber first
    assert wait_until(lambda: node.state is CoordinatorState.RECONNECTING, 5)
    assert len(warnings()) == 2 and "lost its connection" in warnings()[1], warnings()


# ---------------------------------------------------------------------------------- failures
def test_reconnects_with_backoff_after_a_failure(
    broker: MemoryBroker,
    make: Callable[..., Coordinator],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    delays: list[tuple[int, float, float]] = []

    def recording(failures: int, low: float, high: float) -> float:
        delays.append((failures, low, high))
        return 0.001

    monkeypatch.setattr(wakeups, "backoff_delay", recording)
    sender = make()
    node, recorder = listening(make, reconnect_min=0.2, reconnect_max=3.0)
    attempts = broker.connect_attempts
    broker.go_down()
    assert wait_until(
        lambda: node.stats.connect_failures >= 4 and sender.state == "reconnecting", 5
    )
    assert node.state is CoordinatorState.RECONNECTING
    assert not node.wait_connected(0)
    broker.come_back()
    assert wait_until(lambda: node.stats.reconnects == sender.stats.reconnects == 1, 5)
    assert node.state is sender.state is CoordinatorState.CONNECTED
    # one backoff per failure, growing with the count of failures in a row, with our bounds
    mine = [d for d in delays if d[1:] == (0.2, 3.0)]
    assert [f for f, _, _ in mine] == list(range(1, len(mine) + 1))
    assert len(mine) == node.stats.connect_failures
    assert broker.connect_attempts - attempts >= len(mine) + 1
    # the listeners look once for what they missed, and hints flow again
    assert recorder.wait_for(RECONNECT_ORIGIN, 5) is not None
    origin = unique("after")
    sender.notify_new_work(WakeupHint(JobPriority.NORMAL, origin))
    assert recorder.wait_for(origin, 5) is not None
    # a fresh outage starts the backoff over
    delays.clear()
    broker.go_down()
    assert wait_until(lambda: node.state == sender.state == "reconnecting", 5)
    assert wait_until(lambda: any(d[1:] == (0.2, 3.0) for d in delays), 5)
    assert next(d for d in delays if d[1:] == (0.2, 3.0))[0] == 1
    broker.come_back()
    assert wait_until(lambda: node.stats.reconnects == sender.stats.reconnects == 2, 5)
    # one warning per outage (not per attempt) and one line when it is over
    ours = [r for r in caplog.records if r.name == LOGGER]
    warnings = [r.getMessage() for r in ours if r.levelno >= logging.WARNING]
    assert len(warnings) == 4, warnings  # two outages, each node once
    assert all("lost its connection to memory://broker" in w for w in warnings)
    assert sum("work again" in r.getMessage() for r in ours if r.levelno == logging.INFO) == 4


@pytest.mark.parametrize("failures", [1, 2, 3, 5, 8, 40])
def test_backoff_doubles_up_to_the_cap_with_jitter(failures: int) -> None:
    ceiling = min(2.0, 0.1 * 2 ** (failures - 1))
    for _ in range(50):
        assert ceiling / 2 <= backoff_delay(failures, 0.1, 2.0) <= ceiling


def test_a_broker_down_at_start_is_reported_once_and_the_constructor_returns(
    broker: MemoryBroker, make: Callable[..., Coordinator], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    broker.go_down()
    node = make(startup_wait=5.0)
    assert node.state is CoordinatorState.RECONNECTING  # the first attempt has been made
    node.notify_new_work(WakeupHint(JobPriority.NORMAL, "no raise"))
    assert wait_until(lambda: node.stats.connect_failures >= 3, 5)
    broker.come_back()
    assert node.wait_connected(5)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "cannot reach memory://" in warnings[0]
    assert SECRET not in caplog.text


def test_an_unexpected_error_is_logged_with_its_traceback_and_retried(
    broker: MemoryBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    transport = MemoryTransport(broker)
    transport.fail_connect_with = RuntimeError(f"a bug near {SECRET}")
    node = BrokerCoordinator(transport, reconnect_min=0.01, reconnect_max=0.02, startup_wait=5)
    try:
        assert node.state is CoordinatorState.RECONNECTING
        assert wait_until(lambda: node.stats.connect_failures >= 3, 5)
        transport.fail_connect_with = None
        assert node.wait_connected(5)
    finally:
        node.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "cannot reach memory://broker" in warnings[0]
    assert "Traceback" in warnings[0] and "RuntimeError: a bug near ***" in warnings[0]
    assert SECRET not in caplog.text


def test_a_silent_connection_is_detected_by_the_keepalive(
    broker: MemoryBroker, make: Callable[..., Coordinator]
) -> None:
    node = make(keepalive=0.05, ping_timeout=1.0)
    assert wait_until(lambda: broker.pings >= 3, 5)  # answered pings keep the connection
    assert node.stats.connect_failures == 0 and node.state is CoordinatorState.CONNECTED
    with broker.cond:
        broker.answer_pings = False  # a half-open connection: silence, no error
    assert wait_until(lambda: node.stats.connect_failures >= 1, 5)
    with broker.cond:
        broker.answer_pings = True
    assert wait_until(lambda: node.stats.reconnects >= 1 and node.state == "connected", 5)


def test_a_ping_answered_at_once_counts_as_traffic(
    broker: MemoryBroker, make: Callable[..., Coordinator]
) -> None:
    broker.sync_pings = True  # as a ``SELECT 1``: no answer comes through receive()
    node = make(keepalive=0.02, ping_timeout=0.02)
    assert wait_until(lambda: broker.pings >= 5, 5)
    assert node.stats.connect_failures == 0 and node.state is CoordinatorState.CONNECTED


# ---------------------------------------------------------------------------------- close
def test_close_stops_the_threads_and_releases_the_connections(
    broker: MemoryBroker, make: Callable[..., Coordinator]
) -> None:
    assert our_threads() == []
    node, recorder = listening(make, keepalive=60.0, close_timeout=30.0)
    other = make()
    node.notify_new_work(WakeupHint(JobPriority.NORMAL, "warm"))
    assert len(our_threads()) == 4 and broker.listening() == 2
    connections = list(broker.connections)
    node.close()  # its subscriber is waiting for traffic: interrupted
    node.close()
    assert [c.interrupted for c in connections].count(True) == 1
    assert [c.closed for c in connections].count(True) == 1
    assert node.state is CoordinatorState.CLOSED
    assert node.transport.closed == 1
    assert broker.listening() == 1
    assert len(our_threads()) == 2  # the other node's
    node.notify_new_work(WakeupHint(JobPriority.NORMAL, "after close"))  # ignored, no raise
    node.add_listener(recorder)  # ignored
    assert recorder.find("after close") == []
    assert not node.wait_connected(0)
    other.close()
    assert our_threads() == []


def test_close_while_waiting_to_reconnect_is_prompt(
    broker: MemoryBroker, make: Callable[..., Coordinator]
) -> None:
    broker.go_down()
    node = make(reconnect_min=30.0, reconnect_max=30.0, close_timeout=30.0)
    assert node.state is CoordinatorState.RECONNECTING
    started = time.monotonic()
    node.close()
    assert time.monotonic() - started < 5.0
    assert our_threads() == []


def test_configuration_is_checked(broker: MemoryBroker) -> None:
    for bad in (
        {"max_pending": 0},
        {"publish_batch": 0},
        {"reconnect_min": 2.0, "reconnect_max": 1.0},
        {"keepalive": 0},
    ):
        with pytest.raises(ConfigurationError):
            memory_coordinator(broker, **bad)
    assert our_threads() == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_publishes_under_an_instance_id_of_its_own(
    broker: MemoryBroker, make: Callable[..., Coordinator]
) -> None:
    inherited = make()
    parent_id = inherited.instance_id
    pid = os.fork()
    if pid == 0:  # the child: its copy of the broker records what it publishes
        code = 1
        try:
            broker.cond = threading.Condition()  # another thread may have held it at the fork
            assert inherited.transport.forked
            assert inherited.state is CoordinatorState.CLOSED  # no subscription here
            assert inherited.instance_id != parent_id
            with broker.cond:
                broker.connections.clear()  # the parent's, in this copy: never touched
            inherited.notify_new_work(WakeupHint(JobPriority.CRITICAL, "child"))
            assert wait_until(lambda: inherited.stats.published == 1, 5)
            inherited.close()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert inherited.instance_id == parent_id
    assert inherited.state is CoordinatorState.CONNECTED
    _, recorder = listening(make)
    inherited.notify_new_work(WakeupHint(JobPriority.NORMAL, "parent"))
    assert recorder.wait_for("parent", 5) is not None
