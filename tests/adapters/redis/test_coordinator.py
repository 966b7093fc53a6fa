"""The Redis coordinator against a real redis-server: delivery, counters, outages, leaks."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from ratchet.domain.lifecycle import JobPriority
from ratchet.ports import WakeupHint
from ratchet.testing import wait_until
from ratchet.testing.coordinator_contract import Recorder, unique
from ratchet.testing.servers import free_port
from ratchet_redis_coordinator import CoordinatorState, RedisClusterCoordinator, parse_url
from ratchet_redis_coordinator.coordinator import decode_hint, encode_hint

from .conftest import cluster_url

pytestmark = pytest.mark.redis
LOGGER = "ratchet.coordinator.redis"


def listening(make: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, Recorder]:
    coordinator = make(*args, **kwargs)
    recorder = Recorder()
    coordinator.add_listener(recorder)
    return coordinator, recorder


def raw_client(server: Any) -> redis.Redis:
    return redis.Redis.from_url(server.url(), socket_timeout=5)


def test_connected_and_counting(make_coordinator: Callable[..., Any]) -> None:
    a, at_a = listening(make_coordinator)
    b, at_b = listening(make_coordinator)
    assert a.state is b.state is CoordinatorState.CONNECTED
    origin = unique("x")
    a.notify_new_work(WakeupHint(JobPriority.CRITICAL, origin))
    assert at_b.wait_for(origin, 5) is not None
    marker = unique("marker")
    b.notify_new_work(WakeupHint(JobPriority.LOW, marker))
    assert at_a.wait_for(marker, 5) is not None
    assert wait_until(lambda: a.stats.ignored_own >= 1 and a.stats.published >= 1, 5)
    assert b.stats.received >= 1
    assert a.stats.publish_errors == 0 and a.stats.reconnects == 0
    assert len(at_a.find(origin)) == 1  # the local delivery, not the echo


def test_local_listeners_are_called_at_once_on_the_callers_thread(
    make_coordinator: Callable[..., Any],
) -> None:
    coordinator = make_coordinator()
    threads: list[int] = []
    coordinator.add_listener(lambda hint: threads.append(threading.get_ident()))
    coordinator.notify_new_work(WakeupHint(JobPriority.NORMAL, "me"))
    assert threads == [threading.get_ident()]


def test_clusters_sharing_one_redis_do_not_hear_each_other(
    redis_server: Any, make_coordinator: Callable[..., Any]
) -> None:
    shop_url, billing_url = cluster_url(redis_server), cluster_url(redis_server)
    shop1 = make_coordinator(shop_url)
    _, at_shop2 = listening(make_coordinator, shop_url)
    billing1 = make_coordinator(billing_url)
    _, at_billing2 = listening(make_coordinator, billing_url)
    origin = unique("shop")
    shop1.notify_new_work(WakeupHint(JobPriority.CRITICAL, origin))
    assert at_shop2.wait_for(origin, 5) is not None
    marker = unique("billing")
    billing1.notify_new_work(WakeupHint(JobPriority.LOW, marker))
    assert at_billing2.wait_for(marker, 5) is not None
    assert at_billing2.find(origin) == []


def test_malformed_messages_are_counted_and_ignored(
    redis_server: Any, redis_url: str, make_coordinator: Callable[..., Any]
) -> None:
    node, recorder = listening(make_coordinator)
    client = raw_client(redis_server)
    try:
        channel = parse_url(redis_url).channel
        for junk in (b"not json", b"[1,2]", b'{"priority": 9, "origin": "x", "instance": "y"}'):
            client.publish(channel, junk)
        origin = unique("valid")
        make_coordinator().notify_new_work(WakeupHint(JobPriority.HIGH, origin))
        assert recorder.wait_for(origin, 5) is not None
        assert node.stats.malformed == 3
        assert [h.origin_node for h in recorder.hints] == [origin]
    finally:
        client.close()


def test_a_killed_subscriber_connection_is_replaced(
    redis_server: Any, make_coordinator: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    sender = make_coordinator()
    node, recorder = listening(make_coordinator)
    client = raw_client(redis_server)
    try:
        killed = client.client_kill_filter(_type="pubsub")
        assert killed >= 1
        assert wait_until(lambda: node.stats.reconnects >= 1, 10), node.stats
        assert node.state is CoordinatorState.CONNECTED
        origin = unique("after-kill")
        sender.notify_new_work(WakeupHint(JobPriority.NORMAL, origin))
        assert recorder.wait_for(origin, 5) is not None
    finally:
        client.close()
    warnings = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    recoveries = [r for r in caplog.records if r.name == LOGGER and "work again" in r.message]
    assert len(warnings) >= 1 and len(recoveries) >= 1


def test_an_outage_is_logged_once_and_recovery_once(
    stoppable_redis: Any, make_coordinator: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    node = make_coordinator(reconnect_min=0.01, reconnect_max=0.05)
    assert node.state is CoordinatorState.CONNECTED
    stoppable_redis.stop()
    assert wait_until(lambda: node.stats.connect_failures >= 5, 10), node.stats
    assert node.state is CoordinatorState.RECONNECTING
    for i in range(20):
        node.notify_new_work(WakeupHint(JobPriority.CRITICAL, f"during-{i}"))
    assert wait_until(lambda: node.stats.publish_errors >= 1 and node.pending == 0, 10)
    stoppable_redis.start()
    assert node.wait_connected(10)
    assert node.state is CoordinatorState.CONNECTED
    assert node.stats.reconnects == 1
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    infos = [r for r in caplog.records if r.levelno == logging.INFO]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "lost its connection" in warnings[0].getMessage()
    assert len(infos) == 1 and "work again" in infos[0].getMessage()


def test_notify_never_blocks_or_raises_while_redis_is_unreachable() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0?cluster=dead&reconnect_max=0.05"
    node = RedisClusterCoordinator(url, max_pending=64)
    try:
        started = time.perf_counter()
        for i in range(10_000):
            node.notify_new_work(WakeupHint(JobPriority.NORMAL, f"o{i}", f"t{i}"))
        per_call = (time.perf_counter() - started) / 10_000
        assert per_call < 0.001, f"{per_call * 1e6:.1f} us per notify_new_work"
        assert node.pending <= 64
        assert wait_until(lambda: node.stats.publish_errors >= 1, 5)
        assert node.stats.dropped > 0
    finally:
        node.close()


def test_hints_are_coalesced_not_queued_without_bound(
    make_coordinator: Callable[..., Any],
) -> None:
    sender = make_coordinator()
    _, recorder = listening(make_coordinator)
    for _ in range(5_000):
        sender.notify_new_work(WakeupHint(JobPriority.NORMAL, "same-origin"))
    sender.notify_new_work(WakeupHint(JobPriority.CRITICAL, "same-origin"))
    marker = unique("end")
    sender.notify_new_work(WakeupHint(JobPriority.LOW, marker))
    assert recorder.wait_for(marker, 5) is not None
    received = recorder.find("same-origin")
    assert 1 <= len(received) < 5_001
    assert received[-1].priority is JobPriority.CRITICAL
    assert sum(hint.jobs for hint in received) == 5_001  # coalesced hints add up their jobs
    assert all(hint.remote for hint in received)


def test_the_wire_form_carries_the_jobs_and_clamps_a_bad_count() -> None:
    hint = WakeupHint(JobPriority.HIGH, "web-1", jobs=40)
    assert decode_hint(encode_hint(hint, "i"))[0] == hint
    for jobs, read in ((0, 1), (-3, 1), ("9", 1), (None, 1), (10**12, 10**9)):
        wire = json.dumps({"v": 1, "priority": 2, "origin": "o", "target": None,
                           "jobs": jobs, "instance": "i"})  # fmt: skip
        assert decode_hint(wire)[0].jobs == read


def client_names(server: Any) -> list[str]:
    client = raw_client(server)
    try:
        return [c.get("name", "") for c in client.client_list()]
    finally:
        client.close()


def test_close_releases_every_connection_and_thread(redis_server: Any, redis_url: str) -> None:
    threads_before = set(threading.enumerate())
    nodes = [RedisClusterCoordinator(redis_url) for _ in range(3)]
    for node in nodes:
        node.notify_new_work(WakeupHint(JobPriority.NORMAL, unique("n")))
    assert wait_until(lambda: client_names(redis_server).count("ratchet-wakeup") >= 6, 5)
    started = time.perf_counter()
    for node in nodes:
        node.close()
        node.close()
    took = time.perf_counter() - started
    assert took < 2.0, f"closing 3 coordinators took {took:.3f} s"
    assert [t for t in threading.enumerate() if t not in threads_before] == []
    assert wait_until(lambda: "ratchet-wakeup" not in client_names(redis_server), 5)
    assert all(node.state is CoordinatorState.CLOSED for node in nodes)


def test_a_forked_child_can_still_publish(make_coordinator: Callable[..., Any]) -> None:
    inherited = make_coordinator()
    _, recorder = listening(make_coordinator)
    origin = unique("child")
    pid = os.fork()
    if pid == 0:  # the child: publish through the inherited coordinator, then leave at once
        code = 1
        try:
            inherited.notify_new_work(WakeupHint(JobPriority.CRITICAL, origin))
            deadline = time.monotonic() + 5
            while inherited.stats.published < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            code = 0 if inherited.stats.published == 1 else 2
            inherited.close()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert recorder.wait_for(origin, 5) is not None
    # the parent's copy is untouched: still subscribed and publishing
    assert inherited.state is CoordinatorState.CONNECTED
    again = unique("parent")
    inherited.notify_new_work(WakeupHint(JobPriority.NORMAL, again))
    assert recorder.wait_for(again, 5) is not None


def test_a_silent_connection_is_detected_by_keepalive(
    redis_server: Any, make_coordinator: Callable[..., Any]
) -> None:
    # CLIENT PAUSE makes Redis answer nothing (not even PING) while the sockets stay open: the
    # subscriber must notice by itself, as with a half-open TCP connection.
    sender = make_coordinator()
    node, recorder = listening(make_coordinator, keepalive=0.2, socket_timeout=0.2)
    client = raw_client(redis_server)
    try:
        client.execute_command("CLIENT", "PAUSE", "2500", "ALL")
        assert wait_until(lambda: node.stats.connect_failures >= 1, 10), node.stats
        assert wait_until(lambda: node.stats.reconnects >= 1, 15), node.stats
        origin = unique("after-pause")
        sender.notify_new_work(WakeupHint(JobPriority.NORMAL, origin))
        assert recorder.wait_for(origin, 5) is not None
    finally:
        client.execute_command("CLIENT", "UNPAUSE")
        client.close()
