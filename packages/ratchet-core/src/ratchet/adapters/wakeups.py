"""What every wakeup coordinator shares: listener fan-out and :class:`BrokerCoordinator`.

A coordinator that carries hints through a broker (Redis pub/sub, PostgreSQL LISTEN/NOTIFY,
...) is a :class:`BrokerCoordinator` around a :class:`~ratchet.ports.WakeupTransport`, which
only talks to its broker. Everything else is here, once:

* ``notify_new_work`` delivers the hint to this process's listeners at once (the local wakeup),
  then queues it in the *outbox* and returns: it never touches the network, never blocks and
  never raises. The outbox coalesces hints with the same origin and target (the highest
  priority wins) and is bounded: a hint that finds it full is dropped and counted, since the
  queued ones already wake every node.
* the publisher thread sends what is queued, in batches. A failure is counted, logged once per
  outage and the hints are dropped: a hint is an optimisation, polling still finds every job.
* the subscriber thread holds a dedicated connection and calls the listeners for every hint
  published by *another* coordinator (a message names the instance that sent it, so a node never
  hears its own hints twice). After ``keepalive`` seconds of silence it pings the broker; no
  answer within ``ping_timeout`` means the connection is dead. On a failure it reconnects with
  capped exponential backoff and jitter, logging once when the outage starts and once when it
  ends; after reconnecting it wakes its listeners once, since a hint sent meanwhile was lost.
* ``close`` stops both threads and releases every connection; a copy inherited through
  ``fork()`` publishes from the child (with fresh locks and threads) but does not subscribe.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import logging
import os
import random
import socket
import threading
import time
import traceback
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from ratchet.domain.errors import ConfigurationError
from ratchet.domain.lifecycle import JobPriority
from ratchet.named_thread import NamedThread
from ratchet.ports import WakeupConnection, WakeupHint, WakeupTransport

Listener = Callable[[WakeupHint], None]
T = TypeVar("T", bound=WakeupTransport)

#: Origin of the hint a coordinator hands its listeners after it reconnected.
RECONNECT_ORIGIN: Final = "<listener reconnected>"

#: Longest single wait of the subscriber for traffic, should an interrupt be missed.
_RECEIVE_SLICE: Final = 1.0


class Listeners:
    """A coordinator's listeners: called in turn, each one's exception logged and contained."""

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._closed = False

    def add(self, listener: Listener) -> None:
        """Call ``listener`` for every delivered hint (ignored once closed)."""
        with self._lock:
            if not self._closed:
                self._listeners.append(listener)

    def deliver(self, hint: WakeupHint) -> None:
        """Call every listener with ``hint`` on this thread; never raises."""
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(hint)
            except Exception:
                self._log.exception("wakeup listener failed")

    def close(self) -> None:
        """Forget every listener and accept no more."""
        with self._lock:
            self._closed = True
            self._listeners.clear()


class CoordinatorState(enum.StrEnum):
    """Where a coordinator's receiving connection stands."""

    CONNECTING = "connecting"
    """Started; the first subscription attempt has not succeeded yet."""
    CONNECTED = "connected"
    """Subscribed: hints from other nodes arrive."""
    RECONNECTING = "reconnecting"
    """The connection failed or dropped; retrying with backoff (polling carries on)."""
    CLOSED = "closed"
    """``close()`` was called (or this is a copy inherited through ``fork()``)."""


@dataclass(frozen=True)
class CoordinatorStats:
    """A snapshot of a coordinator's counters."""

    published: int = 0
    """Messages the broker accepted."""
    received: int = 0
    """Hints from other coordinators handed to the listeners."""
    publish_errors: int = 0
    """Hints that could not be published (broker down or too slow); dropped."""
    reconnects: int = 0
    """Subscriptions made after an outage (a lost connection or a failed first attempt)."""
    connect_failures: int = 0
    """Subscription attempts that failed, or connections that were lost."""
    dropped: int = 0
    """Hints discarded because the outbox was full."""
    ignored_own: int = 0
    """Messages this coordinator published itself and therefore ignored."""
    malformed: int = 0
    """Messages on the channel that were not hints."""


class _Counters:
    """Thread-safe counters behind :class:`CoordinatorStats`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = dict.fromkeys(CoordinatorStats.__dataclass_fields__, 0)

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._values[name] += amount

    def snapshot(self) -> CoordinatorStats:
        with self._lock:
            return CoordinatorStats(**self._values)


def backoff_delay(failures: int, low: float, high: float) -> float:
    """Seconds to wait after ``failures`` consecutive failures (at least 1).

    ``low`` doubling per failure up to ``high``, then jittered down to half of it, so that nodes
    that lost the broker together do not reconnect in lockstep.
    """
    delay = min(high, low * 2 ** min(max(failures, 1) - 1, 30))
    return random.uniform(delay / 2, delay)


#: The most jobs one hint may announce (a count read from the wire is clamped to it).
MAX_HINT_JOBS = 10**9


def hint_jobs(value: object) -> int:
    """A hint's job count as read from the wire: an integer from 1 to :data:`MAX_HINT_JOBS`
    (anything else counts as one job: hints are never needed for correctness)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return 1
    return min(MAX_HINT_JOBS, max(1, value))


def new_instance_id() -> str:
    """``host-pid-random``: names one coordinator instance in the messages it sends."""
    return f"{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


class BrokerCoordinator(Generic[T]):
    """A :class:`~ratchet.ports.ClusterCoordinator` carrying hints through a broker.

    :param transport: talks to the broker (see :class:`~ratchet.ports.WakeupTransport`).
    :param max_pending: most distinct (origin, target) hints in the outbox.
    :param publish_batch: most messages per :meth:`~ratchet.ports.WakeupTransport.publish`
        call (``None``: everything queued).
    :param reconnect_min: first reconnection delay in seconds (doubling per failure...).
    :param reconnect_max: ...up to this; each delay is jittered down to half of it.
    :param keepalive: seconds of silence after which the subscriber pings the broker.
    :param ping_timeout: seconds after a ping with no traffic at all that mean a dead connection.
    :param startup_wait: how long the constructor waits for the first subscription attempt to
        finish (it never fails because the broker is down: the coordinator keeps retrying).
    :param close_timeout: how long :meth:`close` waits for each thread.
    """

    name = "broker"
    """Names the logger (``ratchet.coordinator.{name}``) and the threads."""
    cross_process = True
    """Hints reach other processes (the contract suite checks self-delivery only then)."""

    def __init__(
        self,
        transport: T,
        *,
        max_pending: int = 256,
        publish_batch: int | None = None,
        reconnect_min: float = 0.1,
        reconnect_max: float = 5.0,
        keepalive: float = 10.0,
        ping_timeout: float = 1.5,
        startup_wait: float = 0.0,
        close_timeout: float = 5.0,
    ) -> None:
        if max_pending < 1:
            raise ConfigurationError("max_pending must be at least 1")
        if publish_batch is not None and publish_batch < 1:
            raise ConfigurationError("publish_batch must be at least 1")
        if not 0 < reconnect_min <= reconnect_max:
            raise ConfigurationError("need 0 < reconnect_min <= reconnect_max")
        if not (keepalive > 0 and ping_timeout > 0):
            raise ConfigurationError("keepalive and ping_timeout must be positive")
        self.transport = transport
        self.instance_id = new_instance_id()
        """Names this coordinator in the messages it sends (to ignore their echo)."""
        self.reconnect_min = reconnect_min
        self.reconnect_max = reconnect_max
        self._max_pending = max_pending
        self._publish_batch = publish_batch
        self._keepalive = keepalive
        self._ping_timeout = ping_timeout
        self._close_timeout = close_timeout
        self._log = logging.getLogger(f"ratchet.coordinator.{self.name}")
        self._counters = _Counters()
        self._lock = threading.Lock()
        self._listeners = Listeners(self._log)
        # the outbox: (origin, target) -> (highest pending priority, jobs announced in all);
        # insertion-ordered
        self._pending: dict[tuple[str, str | None], tuple[JobPriority, int]] = {}
        self._pending_ready = threading.Condition(self._lock)
        self._closed = threading.Event()
        self._first_attempt = threading.Event()
        self._connected = threading.Event()
        self._state = CoordinatorState.CONNECTING
        self._outage_since: float | None = None
        self._publish_outage = False
        self._outage_warned = False
        """This node already warned of the broker's current outage (one warning per outage:
        a publish may fail before the subscriber notices, and the subscriber then tells)."""
        self._connection: WakeupConnection | None = None
        self._subscriber = self._thread(self._subscribe_loop, "subscriber")
        self._publisher = self._thread(self._publish_loop, "publisher")
        self._pid = os.getpid()
        _live.add(self)
        self._subscriber.start()
        self._publisher.start()
        if startup_wait > 0:
            self._first_attempt.wait(startup_wait)

    # ------------------------------------------------------------------ public API
    @property
    def state(self) -> CoordinatorState:
        """CONNECTING, CONNECTED, RECONNECTING or CLOSED."""
        return self._state

    @property
    def stats(self) -> CoordinatorStats:
        """A snapshot of the counters."""
        return self._counters.snapshot()

    @property
    def pending(self) -> int:
        """Hints waiting for the publisher (never more than ``max_pending``)."""
        with self._lock:
            return len(self._pending)

    def wait_connected(self, timeout: float) -> bool:
        """Block until subscribed (True) or ``timeout`` seconds passed / closed (False)."""
        return self._connected.wait(timeout) and not self._closed.is_set()

    def notify_new_work(self, hint: WakeupHint) -> None:
        """Wake this process's listeners now and queue the hint for other nodes.

        Never raises and never blocks on the network.
        """
        if self._closed.is_set():
            return
        self._listeners.deliver(hint)
        try:
            key = (hint.origin_node, hint.target)
            priority = JobPriority(hint.priority)
        except (AttributeError, TypeError, ValueError):
            self._log.debug("ignored a malformed hint %r", hint)
            return
        with self._lock:
            if not self._publisher.is_alive() and not self._closed.is_set():
                self._publisher = self._thread(self._publish_loop, "publisher")
                self._publisher.start()  # the first hint in a forked child
            queued = self._pending.get(key)
            if queued is None and len(self._pending) >= self._max_pending:
                self._counters.add("dropped")
                return
            jobs = max(1, hint.jobs)
            if queued is None:
                self._pending[key] = (priority, jobs)
            else:  # one message for both: the higher priority, the jobs of both
                self._pending[key] = (max(priority, queued[0]), queued[1] + jobs)
            self._pending_ready.notify()

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener`` for every hint: local ones on the caller's thread, others on ours."""
        self._listeners.add(listener)

    def close(self) -> None:
        """Stop both threads (joined) and release every connection. Idempotent, never raises."""
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            self._state = CoordinatorState.CLOSED
            self._pending.clear()
            self._pending_ready.notify_all()
            if self._connection is not None:
                self._interrupt(self._connection)
        self._listeners.close()
        for thread in (self._publisher, self._subscriber):
            if thread is not threading.current_thread():
                thread.join(timeout=self._close_timeout)
                if thread.is_alive():  # pragma: no cover - a connection hung beyond its timeouts
                    self._log.warning("wakeup coordinator thread %s did not stop", thread.name)
        try:
            self.transport.close()
        except Exception as exc:
            self._log.debug("closing %s failed: %s", self.transport.where, self._explain(exc))
        self._connected.clear()

    def __enter__(self) -> BrokerCoordinator[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.transport.where} state={self._state.name}>"

    # ------------------------------------------------------------------ internals
    def _thread(self, target: Callable[[], None], role: str) -> threading.Thread:
        return NamedThread(target=target, name=f"ratchet-{self.name}-{role}")

    def _explain(self, exc: BaseException) -> str:
        """``Type: message`` of ``exc``, with its traceback unless it is a broker failure.

        An exception the transport does not list among its ``errors`` (nor a timeout) is a bug:
        its traceback helps. Everything goes through the transport's ``redact``.
        """
        if isinstance(exc, (TimeoutError, *self.transport.errors)):
            text = f"{type(exc).__name__}: {exc}"
        else:
            text = "".join(traceback.format_exception(exc)).rstrip()
        try:
            return self.transport.redact(text)
        except Exception:
            return type(exc).__name__

    def _interrupt(self, connection: WakeupConnection) -> None:
        """Wake the subscriber (called under ``_lock``, so never on a closed connection)."""
        try:
            connection.interrupt()
        except Exception as exc:
            self._log.debug("interrupting the subscriber failed: %s", self._explain(exc))

    def _after_fork_in_child(self) -> None:
        """Make a copy inherited through ``fork()`` usable: publish-only, fresh locks.

        The parent's threads did not come along and its locks may have been held at the fork.
        The child publishes (its first hint starts a publisher thread) but does not subscribe:
        its listeners belong to the parent's workers. It gets an instance id of its own, so that
        the parent hears the child's hints instead of taking them for its own echo.
        """
        if os.getpid() == self._pid:
            return
        self._pid = os.getpid()
        self.instance_id = new_instance_id()
        self._lock = threading.Lock()
        self._pending_ready = threading.Condition(self._lock)
        self._counters = _Counters()
        self._listeners = Listeners(self._log)
        self._pending = {}
        self._connection = None  # the parent's socket: never touch it from here
        self._connected = threading.Event()
        self._first_attempt = threading.Event()
        self._publish_outage = False
        self._outage_warned = False
        self.transport.after_fork_in_child()
        if not self._closed.is_set():
            self._state = CoordinatorState.CLOSED  # no subscription in this process

    # -- publisher -----------------------------------------------------------------------------
    def _publish_loop(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closed.is_set():
                    self._pending_ready.wait()
                if self._closed.is_set():
                    return
                if self._publish_batch is None or len(self._pending) <= self._publish_batch:
                    batch = list(self._pending.items())
                    self._pending.clear()
                else:
                    keys = list(itertools.islice(self._pending, self._publish_batch))
                    batch = [(key, self._pending.pop(key)) for key in keys]
            self._publish(batch)

    def _publish(
        self, batch: Sequence[tuple[tuple[str, str | None], tuple[JobPriority, int]]]
    ) -> None:
        try:
            sender = self.instance_id
            self.transport.publish(
                [
                    self.transport.encode(WakeupHint(priority, origin, target, jobs), sender)
                    for (origin, target), (priority, jobs) in batch
                ]
            )
        except Exception as exc:
            self._counters.add("publish_errors", len(batch))
            if self._closed.is_set():
                return
            with self._lock:
                first = not self._publish_outage
                self._publish_outage = True
                subscriber_knows = self._state is CoordinatorState.RECONNECTING
                warn = first and not subscriber_knows
                self._outage_warned = self._outage_warned or warn
            if warn:
                self._log.warning(
                    "could not publish a wakeup to %s (%s); polling will still find the job, "
                    "further failures are not logged until publishing works again",
                    self.transport.where,
                    self._explain(exc),
                )
            return
        self._counters.add("published", len(batch))
        if self._publish_outage:
            with self._lock:
                self._publish_outage = False
                self._outage_warned = False
            self._log.debug("publishing wakeups to %s works again", self.transport.where)

    # -- subscriber ----------------------------------------------------------------------------
    def _subscribe_loop(self) -> None:
        failures = 0
        while not self._closed.is_set():
            try:
                self._subscribe()  # returns only when closed
                return
            except Exception as exc:
                if self._closed.is_set():
                    return
                if self._state is CoordinatorState.CONNECTED:
                    failures = 0  # a fresh outage starts the backoff over
                failures += 1
                self._counters.add("connect_failures")
                self._on_outage(exc)
            finally:
                self._first_attempt.set()
            delay = backoff_delay(failures, self.reconnect_min, self.reconnect_max)
            if self._closed.wait(delay):
                return

    def _subscribe(self) -> None:
        connection = self.transport.connect()
        with self._lock:
            closed = self._closed.is_set()
            if not closed:
                self._connection = connection
        if closed:
            self._close_connection(connection)
            return
        try:
            connection.listen()
            if self._closed.is_set():
                return
            self._on_connected()
            self._pump(connection)
        finally:
            with self._lock:
                if self._connection is connection:
                    self._connection = None
            self._close_connection(connection)

    def _close_connection(self, connection: WakeupConnection) -> None:
        try:
            connection.close()
        except Exception as exc:  # closing a broken connection
            self._log.debug(
                "closing a connection to %s: %s", self.transport.where, self._explain(exc)
            )

    def _pump(self, connection: WakeupConnection) -> None:
        """Hand every message to :meth:`_on_message` until closed; raise when the link is lost."""
        last_seen = time.monotonic()
        ping_sent: float | None = None
        while not self._closed.is_set():
            now = time.monotonic()
            if ping_sent is not None:
                due = ping_sent + self._ping_timeout
                if now >= due:
                    raise TimeoutError(f"{self.transport.where} did not answer a keepalive ping")
            else:
                due = last_seen + self._keepalive
                if now >= due:
                    if connection.ping():
                        last_seen = time.monotonic()
                    else:
                        ping_sent = now
                    continue
            messages = connection.receive(min(due - now, _RECEIVE_SLICE))
            if messages is None:
                continue
            last_seen = time.monotonic()
            ping_sent = None
            for message in messages:
                self._on_message(message)

    def _on_message(self, message: str | bytes) -> None:
        try:
            hint, sender = self.transport.decode(message)
        except (ValueError, KeyError, TypeError):
            self._counters.add("malformed")
            self._log.debug("ignored a malformed message from %s", self.transport.where)
            return
        if sender == self.instance_id:
            self._counters.add("ignored_own")
            return
        self._counters.add("received")
        self._listeners.deliver(dataclasses.replace(hint, remote=True))

    def _on_connected(self) -> None:
        # Counters and log lines first: whoever waits for CONNECTED then sees them too.
        with self._lock:
            if self._closed.is_set():
                return
            previous = self._state
            since, self._outage_since = self._outage_since, None
            self._outage_warned = False
        recovered = previous is CoordinatorState.RECONNECTING
        if recovered:
            outage = time.monotonic() - since if since is not None else 0.0
            self._log.info("wakeups via %s work again after %.1f s", self.transport.where, outage)
            self._counters.add("reconnects")
        else:
            self._log.debug("subscribed to %s", self.transport.where)
        with self._lock:
            if self._closed.is_set():
                return
            self._state = CoordinatorState.CONNECTED
        self._connected.set()
        self._first_attempt.set()
        if recovered:
            # Hints sent while this node was not listening are lost: let its pollers look once.
            self._listeners.deliver(WakeupHint(JobPriority.NORMAL, RECONNECT_ORIGIN))

    def _on_outage(self, exc: BaseException) -> None:
        with self._lock:
            if self._closed.is_set():
                return
            first = self._outage_since is None
            if first:
                self._outage_since = time.monotonic()
            was = self._state
            self._state = CoordinatorState.RECONNECTING
            warned, self._outage_warned = self._outage_warned, True
        self._connected.clear()
        if first:
            what = (
                "cannot reach" if was is CoordinatorState.CONNECTING else "lost its connection to"
            )
            # A failed publish already warned of this outage: the subscriber's news is detail.
            self._log.log(
                logging.INFO if warned else logging.WARNING,
                "wakeup coordinator %s %s (%s); retrying with backoff up to %.1f s, polling "
                "still finds every job meanwhile",
                what,
                self.transport.where,
                self._explain(exc),
                self.reconnect_max,
            )


#: Every coordinator not yet garbage-collected, for the fork handler below.
_live: weakref.WeakSet[BrokerCoordinator[Any]] = weakref.WeakSet()


def _reinit_in_child() -> None:
    for coordinator in list(_live):
        coordinator._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_in_child)
