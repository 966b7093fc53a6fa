"""An in-memory broker and its :class:`~ratchet.ports.WakeupTransport`, with failures on demand.

``MemoryBroker`` stands in for Redis or PostgreSQL under a
:class:`~ratchet.adapters.wakeups.BrokerCoordinator`: every listening connection gets every
published message, in order. A test can take it down (connections break, connecting and
publishing fail), stall publishing, stop answering pings, and watch what the coordinator did
(connection attempts, pings, publish calls).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from ratchet.adapters.wakeups import BrokerCoordinator
from ratchet.domain.lifecycle import JobPriority
from ratchet.ports import WakeupHint

SECRET = "hunter2"


class BrokerDown(ConnectionError):
    """What the memory broker raises while it is down."""


class MemoryBroker:
    """The broker: shared by every transport of a test, all state behind one condition."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.up = True
        self.answer_pings = True
        self.sync_pings = False
        """Answer a ping within the call (as a synchronous ``SELECT 1`` does)."""
        self.connections: list[MemoryConnection] = []
        self.connect_attempts = 0
        self.publish_calls: list[int] = []
        """The size of every publish call that reached the broker."""
        self.pings = 0
        self._stall: threading.Event | None = None
        self.stalled = 0
        """Publish calls waiting in :meth:`stall_publishing`'s gate."""

    # -- failures ------------------------------------------------------------------------------
    def go_down(self) -> None:
        """Break every connection; connecting and publishing fail until :meth:`come_back`."""
        with self.cond:
            self.up = False
            for connection in self.connections:
                connection.broken = True
            self.cond.notify_all()

    def come_back(self) -> None:
        with self.cond:
            self.up = True
            self.cond.notify_all()

    def restart(self) -> None:
        """For the coordinator contract: down and up again on the same address."""
        self.go_down()
        self.come_back()

    def stall_publishing(self) -> threading.Event:
        """Make publish calls wait until the returned event is set (a hung broker)."""
        gate = threading.Event()
        with self.cond:
            self._stall = gate
        return gate

    def listening(self) -> int:
        with self.cond:
            return sum(1 for c in self.connections if c.listening and not c.broken)

    # -- what the transport calls --------------------------------------------------------------
    def publish(self, messages: Sequence[str]) -> None:
        with self.cond:
            gate = self._stall
            if gate is not None:
                self.stalled += 1
        if gate is not None:
            gate.wait()
        with self.cond:
            if gate is not None:
                self.stalled -= 1
            if not self.up:
                raise BrokerDown("the memory broker is down")
            self.publish_calls.append(len(messages))
            for connection in self.connections:
                if connection.listening and not connection.broken:
                    connection.inbox.extend(messages)
            self.cond.notify_all()


class MemoryConnection:
    """A receiving connection to the memory broker."""

    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker
        self.inbox: list[str] = []
        self.listening = False
        self.broken = False
        self.interrupted = False
        self.closed = False
        self.pong = False

    def listen(self) -> None:
        with self.broker.cond:
            if self.broken or not self.broker.up:
                raise BrokerDown("the memory broker is down")
            self.listening = True

    def receive(self, timeout: float) -> list[str] | None:
        cond = self.broker.cond
        with cond:
            cond.wait_for(
                lambda: self.inbox or self.pong or self.broken or self.interrupted, timeout
            )
            if self.broken:
                raise BrokerDown("connection lost")
            if self.inbox or self.pong:
                messages, self.inbox, self.pong = self.inbox, [], False
                return messages
            return None

    def ping(self) -> bool:
        with self.broker.cond:
            if self.broken:
                raise BrokerDown("connection lost")
            self.broker.pings += 1
            if self.broker.sync_pings:
                return True
            if self.broker.answer_pings:
                self.pong = True
                self.broker.cond.notify_all()
        return False

    def interrupt(self) -> None:
        with self.broker.cond:
            self.interrupted = True
            self.broker.cond.notify_all()

    def close(self) -> None:
        with self.broker.cond:
            self.closed = True
            if self in self.broker.connections:
                self.broker.connections.remove(self)


class MemoryTransport:
    """A :class:`~ratchet.ports.WakeupTransport` over a :class:`MemoryBroker`."""

    errors: tuple[type[BaseException], ...] = (BrokerDown,)
    where = "memory://broker"

    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker
        self.forked = False
        self.closed = 0
        self.fail_connect_with: BaseException | None = None

    def connect(self) -> MemoryConnection:
        with self.broker.cond:
            self.broker.connect_attempts += 1
            self.broker.cond.notify_all()
            if self.fail_connect_with is not None:
                raise self.fail_connect_with
            if not self.broker.up:
                raise BrokerDown(f"cannot reach memory://user:{SECRET}@broker")
            connection = MemoryConnection(self.broker)
            self.broker.connections.append(connection)
            return connection

    def publish(self, messages: Sequence[str]) -> None:
        self.broker.publish(messages)

    def encode(self, hint: WakeupHint, sender: str) -> str:
        return json.dumps([int(hint.priority), hint.origin_node, hint.target, hint.jobs, sender])

    def decode(self, message: str | bytes) -> tuple[WakeupHint, str]:
        priority, origin, target, jobs, sender = json.loads(message)
        return WakeupHint(JobPriority(priority), origin, target, jobs), sender

    def redact(self, text: str) -> str:
        return text.replace(SECRET, "***")

    def after_fork_in_child(self) -> None:
        self.forked = True

    def close(self) -> None:
        self.closed += 1


def memory_coordinator(broker: MemoryBroker, **kwargs: Any) -> BrokerCoordinator[MemoryTransport]:
    """A coordinator on ``broker`` that has made its first connection attempt."""
    kwargs.setdefault("startup_wait", 5.0)
    return BrokerCoordinator(MemoryTransport(broker), **kwargs)
