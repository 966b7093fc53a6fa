"""The coordinator conformance suite: every wakeup coordinator must pass it.

Subclass :class:`CoordinatorContract` in a test module and provide the fixture
``coordinator_factory``: a callable that returns a *new node* (a coordinator connected to the
same broker and cluster as every other node it returned). Wrap your factory in a
:class:`NodeFactory` so that the nodes are closed after each test. Optionally provide ``broker``:
an object with ``restart()`` (the broker goes down and comes back on the same address), or
``None`` for in-process coordinators::

    @pytest.fixture
    def coordinator_factory(redis_server):
        url = f"{redis_server.url()}?cluster=test-{uuid.uuid4().hex}"
        with NodeFactory(lambda: RedisClusterCoordinator(url)) as factory:
            yield factory

    @pytest.fixture
    def broker(redis_server):
        return redis_server

    class TestRedisCoordinator(CoordinatorContract):
        pass

Capabilities are read from the coordinator: ``cross_process = True`` means hints travel through a
broker to other processes (the in-process ``local`` coordinator has none, so the self-delivery
check does not apply to it). The suite assumes that hints published by one node reach another
node in the order they were published (every broker here keeps per-connection order); tests use
that to prove an absence ("hint X never arrived") with a marker hint instead of a sleep.
"""

from __future__ import annotations

import threading
import time
import tracemalloc
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import pytest

from ratchet.domain.lifecycle import JobPriority
from ratchet.ports import ClusterCoordinator, WakeupHint
from ratchet.registry import CoordinatorRegistry

#: Module whose functions the suite submits as jobs (the class policy must allow it).
JOBS_MODULE = __name__


def contract_job() -> None:
    """The job the transactional tests submit (never run)."""


class Broker(Protocol):
    """A broker the suite can bounce."""

    def restart(self) -> Any:
        """Stop and start again on the same address (blocking until it accepts connections)."""


class NodeFactory:
    """Makes coordinator nodes with ``make()`` and closes every one of them on :meth:`close_all`."""

    def __init__(self, make: Callable[[], ClusterCoordinator]) -> None:
        self._make = make
        self.nodes: list[ClusterCoordinator] = []

    def __call__(self) -> ClusterCoordinator:
        """A new node (closed again by :meth:`close_all`)."""
        node = self._make()
        self.nodes.append(node)
        return node

    def close_all(self) -> None:
        """Close every node made so far (each once more if a test closed it already)."""
        nodes, self.nodes = self.nodes, []
        for node in nodes:
            node.close()

    def __enter__(self) -> NodeFactory:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close_all()


@dataclass
class CoordinatorBackend:
    """One coordinator implementation as a parametrized test run needs it.

    Ratchet's own ``tests/contract/test_coordinator_contract.py`` asks for a fixture named
    ``{name}_coordinator_backend`` returning one of these, for each backend it runs.
    """

    factory: NodeFactory
    broker: Broker | None = None
    """An object with ``restart()``, or None when there is nothing to restart (in-process)."""


class Recorder:
    """A listener that remembers every hint and lets a test wait for one."""

    def __init__(self) -> None:
        self.hints: list[WakeupHint] = []
        self._cond = threading.Condition()

    def __call__(self, hint: WakeupHint) -> None:
        with self._cond:
            self.hints.append(hint)
            self._cond.notify_all()

    def origins(self) -> list[str]:
        with self._cond:
            return [h.origin_node for h in self.hints]

    def find(self, origin: str) -> list[WakeupHint]:
        with self._cond:
            return [h for h in self.hints if h.origin_node == origin]

    def wait_for(self, origin: str, timeout: float) -> WakeupHint | None:
        """The first hint from ``origin``, waiting up to ``timeout`` seconds for it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for hint in self.hints:
                    if hint.origin_node == origin:
                        return hint
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)


def unique(prefix: str) -> str:
    """A fresh origin name, so that hints of different tests never mix."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _listening(factory: Callable[[], ClusterCoordinator]) -> tuple[ClusterCoordinator, Recorder]:
    node = factory()
    recorder = Recorder()
    node.add_listener(recorder)
    return node, recorder


class CoordinatorContract:
    """Behaviour every wakeup coordinator must have. Needs the fixture ``coordinator_factory``.

    Class attributes bound the waits; an adapter may raise them for a slow broker.
    """

    #: Seconds a hint may take to reach another node.
    delivery_timeout: float = 5.0
    #: Seconds the nodes may take to deliver again after the broker restarted.
    recovery_timeout: float = 30.0
    #: Hints published in the bounded-memory test, and the growth they may cause.
    flood_hints: int = 10_000
    flood_growth_limit: int = 512 * 1024

    # ------------------------------------------------------------------ delivery
    def test_delivers_to_every_other_node(self, coordinator_factory: Any) -> None:
        nodes = [_listening(coordinator_factory) for _ in range(3)]
        for i, (sender, _) in enumerate(nodes):
            origin = unique(f"sender{i}")
            sender.notify_new_work(WakeupHint(JobPriority.CRITICAL, origin))
            for j, (_, recorder) in enumerate(nodes):
                if j == i:
                    continue
                hint = recorder.wait_for(origin, self.delivery_timeout)
                assert hint is not None, (
                    f"node {j} did not receive node {i}'s hint within {self.delivery_timeout} s"
                )
                assert hint.priority is JobPriority.CRITICAL

    def test_hint_fields_arrive_intact(self, coordinator_factory: Any) -> None:
        sender = coordinator_factory()
        _, recorder = _listening(coordinator_factory)
        origin = unique("fields")
        sent = WakeupHint(JobPriority.LOW, origin, target="queue-ä/1", jobs=3)
        sender.notify_new_work(sent)
        got = recorder.wait_for(origin, self.delivery_timeout)
        assert got == sent  # the job count included: workers weigh their claims by it
        if getattr(sender, "cross_process", False):
            assert got is not None and got.remote, "a hint from another node must be remote"

    def test_no_echo_to_the_publishing_node(self, coordinator_factory: Any) -> None:
        a, at_a = _listening(coordinator_factory)
        if not getattr(a, "cross_process", False):
            pytest.skip("N/A: in-process coordinator (delivery to its own listeners is the design)")
        b, at_b = _listening(coordinator_factory)
        own = unique("own")
        a.notify_new_work(WakeupHint(JobPriority.HIGH, own))
        assert at_b.wait_for(own, self.delivery_timeout) is not None
        # b saw a's hint, so the broker has it; a's echo (if any) precedes b's marker at a.
        marker = unique("marker")
        b.notify_new_work(WakeupHint(JobPriority.LOW, marker))
        assert at_a.wait_for(marker, self.delivery_timeout) is not None
        assert len(at_a.find(own)) <= 1, (
            "the publishing node heard its own hint back through the broker "
            f"({len(at_a.find(own))} deliveries; at most the local one is allowed)"
        )

    def test_a_failing_listener_does_not_stop_delivery(self, coordinator_factory: Any) -> None:
        sender = coordinator_factory()
        node = coordinator_factory()

        def broken(hint: WakeupHint) -> None:
            raise RuntimeError("listener bug")

        node.add_listener(broken)
        recorder = Recorder()
        node.add_listener(recorder)
        first, second = unique("first"), unique("second")
        sender.notify_new_work(WakeupHint(JobPriority.NORMAL, first))
        sender.notify_new_work(WakeupHint(JobPriority.NORMAL, second))
        assert recorder.wait_for(first, self.delivery_timeout) is not None
        assert recorder.wait_for(second, self.delivery_timeout) is not None

    # ------------------------------------------------------------------ transactions
    def test_no_hint_for_an_uncommitted_submission(
        self, coordinator_factory: Any, tmp_path: Path
    ) -> None:
        import sqlalchemy as sa

        from ratchet.engine.app import Ratchet

        app_node = coordinator_factory()
        _, recorder = _listening(coordinator_factory)
        app_name = unique("app")
        url = f"sqlite:///{tmp_path / 'contract.db'}"
        app = Ratchet(
            url,
            allowed_modules=[JOBS_MODULE],
            coordinator=_use_node(app_node),
            plugins=_plugins_with(app_node),
            node_name=app_name,
        )
        engine = sa.create_engine(url)
        try:
            with engine.connect() as conn:
                trans = conn.begin()
                rolled_back = (
                    app.enqueue(contract_job).with_priority(JobPriority.CRITICAL).submit(conn)
                )
                trans.rollback()
            assert app.get_job(rolled_back.id) is None
            marker = unique("marker")
            app_node.notify_new_work(WakeupHint(JobPriority.LOW, marker))
            assert recorder.wait_for(marker, self.delivery_timeout) is not None
            assert recorder.find(app_name) == [], "a rolled-back submission sent a wakeup"

            with engine.connect() as conn:
                trans = conn.begin()
                committed = (
                    app.enqueue(contract_job).with_priority(JobPriority.CRITICAL).submit(conn)
                )
                assert recorder.find(app_name) == [], "the wakeup was sent before the commit"
                trans.commit()
            assert app.get_job(committed.id) is not None
            hint = recorder.wait_for(app_name, self.delivery_timeout)
            assert hint is not None, (
                "a committed CRITICAL submission sent no wakeup (its Connection was the second "
                "one checked out of the engine's pool, after a rolled-back one)"
            )
            assert hint.priority is JobPriority.CRITICAL
        finally:
            engine.dispose()
            app.close()

    # ------------------------------------------------------------------ failures
    def test_survives_a_broker_restart(
        self, coordinator_factory: Any, request: pytest.FixtureRequest
    ) -> None:
        broker = _optional_fixture(request, "broker")
        if broker is None:
            pytest.skip("N/A: no broker to restart (in-process coordinator)")
        a, at_a = _listening(coordinator_factory)
        b, at_b = _listening(coordinator_factory)
        before = unique("before")
        a.notify_new_work(WakeupHint(JobPriority.NORMAL, before))
        assert at_b.wait_for(before, self.delivery_timeout) is not None

        broker.restart()

        # Hints sent while a node is still reconnecting may be lost (they are only hints), so
        # keep sending until one arrives in each direction; then the next ones must be prompt.
        deadline = time.monotonic() + self.recovery_timeout
        self._until_delivered(a, at_b, deadline, "a -> b")
        self._until_delivered(b, at_a, deadline, "b -> a")
        for sender, recorder in ((a, at_b), (b, at_a)):
            origin = unique("after")
            sender.notify_new_work(WakeupHint(JobPriority.NORMAL, origin))
            assert recorder.wait_for(origin, self.delivery_timeout) is not None

    def _until_delivered(
        self, sender: ClusterCoordinator, recorder: Recorder, deadline: float, what: str
    ) -> None:
        while True:
            probe = unique("probe")
            sender.notify_new_work(WakeupHint(JobPriority.NORMAL, probe))
            if recorder.wait_for(probe, 0.2) is not None:
                return
            assert time.monotonic() < deadline, (
                f"no hint got through ({what}) within {self.recovery_timeout} s of the restart"
            )

    def test_close_is_idempotent_and_leaves_no_thread(self, coordinator_factory: Any) -> None:
        before = set(threading.enumerate())
        node, _ = _listening(coordinator_factory)
        other = coordinator_factory()
        other.notify_new_work(WakeupHint(JobPriority.NORMAL, unique("warm")))
        node.notify_new_work(WakeupHint(JobPriority.NORMAL, unique("warm")))
        started = time.monotonic()
        node.close()
        node.close()
        other.close()
        other.close()
        took = time.monotonic() - started
        leftover = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
        assert leftover == [], f"threads still running after close(): {leftover}"
        assert took < 5.0, f"close() took {took:.1f} s"
        node.notify_new_work(WakeupHint(JobPriority.NORMAL, unique("after-close")))  # no raise

    def test_bounded_memory_when_nobody_listens(self, coordinator_factory: Any) -> None:
        node = coordinator_factory()
        coordinator_factory()  # a second node with no listener
        for i in range(100):  # warm up lazily created structures
            node.notify_new_work(WakeupHint(JobPriority.NORMAL, f"warm-{i}"))
        was_tracing = tracemalloc.is_tracing()
        if not was_tracing:
            tracemalloc.start()
        try:
            baseline = tracemalloc.get_traced_memory()[0]
            for i in range(self.flood_hints):
                node.notify_new_work(WakeupHint(JobPriority.NORMAL, f"flood-{i}", f"t{i}"))
            grown = tracemalloc.get_traced_memory()[0] - baseline
        finally:
            if not was_tracing:
                tracemalloc.stop()
        assert grown < self.flood_growth_limit, (
            f"{self.flood_hints} unheard hints grew memory by {grown} bytes "
            f"(limit {self.flood_growth_limit})"
        )
        pending = getattr(node, "pending", None)
        if isinstance(pending, int):
            assert pending <= self.flood_hints // 10, f"{pending} hints still queued"


# ---------------------------------------------------------------------- helpers
def _optional_fixture(request: pytest.FixtureRequest, name: str) -> Any:
    try:
        return request.getfixturevalue(name)
    except pytest.FixtureLookupError as exc:
        if exc.argname != name:  # the fixture exists but one it needs does not
            raise
        return None


def _use_node(node: ClusterCoordinator) -> str:
    """The coordinator name under which :func:`_plugins_with` registers ``node``."""
    return f"contract-node-{id(node)}"


def _plugins_with(node: ClusterCoordinator) -> Any:
    """Plugins (built-ins + entry points) plus one coordinator name that yields ``node``."""
    from ratchet import hookimpl
    from ratchet.plugins import Plugins, make_plugin_manager

    class _NodePlugin:
        @hookimpl
        def ratchet_register_coordinators(self, registry: CoordinatorRegistry) -> None:
            registry.add(_use_node(node), lambda spec, context: node)

    return Plugins(make_plugin_manager(extra=[_NodePlugin()]))
