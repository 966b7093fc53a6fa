"""The Redis pub/sub wakeup coordinator.

Hints travel as small JSON messages on the channel ``ratchet:{cluster}:wakeup``. Each coordinator
has three parts:

* ``notify_new_work`` delivers the hint to this process's listeners at once (the local wakeup),
  then queues it for the publisher thread and returns: it never touches the network, never
  blocks and never raises.
* the publisher thread sends queued hints (coalesced: one message per origin and target, highest
  priority wins) with short socket timeouts. A failure is counted, logged once per outage and
  the hints are dropped: a hint is an optimisation, polling still finds every job.
* the subscriber thread holds a dedicated connection SUBSCRIBEd to the channel and calls the
  listeners for every hint published by *another* coordinator (a hint carries the random id of
  the instance that sent it, so a node never hears its own hints twice). On a dropped connection
  it reconnects with capped exponential backoff and jitter, logging once when the outage starts
  and once when it ends.

The password of the URL never appears in logs, reprs or error messages.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import random
import re
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ratchet.domain.errors import ConfigurationError
from ratchet.domain.lifecycle import JobPriority
from ratchet.ports import WakeupHint

log = logging.getLogger("ratchet.coordinator.redis")

SCHEMES: Final = ("redis", "rediss")
DEFAULT_CLUSTER: Final = "default"
MESSAGE_VERSION: Final = 1
_CLUSTER_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
#: Query parameters this coordinator reads itself; everything else goes to redis-py.
_OWN_QUERY: Final = frozenset({"cluster", "reconnect_min", "reconnect_max"})
_REDACTED: Final = "***"


class CoordinatorState(enum.Enum):
    """Where the subscriber connection stands."""

    CONNECTING = "CONNECTING"
    """Started; the first subscription attempt has not succeeded yet."""
    CONNECTED = "CONNECTED"
    """Subscribed: hints from other nodes arrive."""
    RECONNECTING = "RECONNECTING"
    """The connection failed or dropped; retrying with backoff (polling carries on)."""
    CLOSED = "CLOSED"
    """``close()`` was called."""


@dataclass(frozen=True)
class CoordinatorStats:
    """A snapshot of the coordinator's counters."""

    published: int = 0
    """PUBLISH commands that Redis accepted."""
    received: int = 0
    """Hints from other coordinators handed to the listeners."""
    publish_errors: int = 0
    """Hints that could not be published (Redis down or too slow)."""
    reconnects: int = 0
    """Subscriptions re-established after a lost connection."""
    connect_failures: int = 0
    """Failed (re)connection attempts."""
    dropped: int = 0
    """Hints discarded because the publish queue was full."""
    ignored_own: int = 0
    """Messages this coordinator published itself and therefore ignored."""
    malformed: int = 0
    """Messages on the channel that were not valid hints."""


@dataclass(frozen=True)
class RedisSettings:
    """What a coordinator URL says, with the password kept out of ``repr``."""

    url: str
    """The URL handed to redis-py (our own query parameters removed; contains the password)."""
    redacted_url: str
    """The URL safe to print."""
    cluster: str
    tls: bool
    reconnect_min: float
    reconnect_max: float
    password: str | None

    def __repr__(self) -> str:
        return (
            f"RedisSettings(url={self.redacted_url!r}, cluster={self.cluster!r}, "
            f"tls={self.tls}, reconnect_min={self.reconnect_min}, "
            f"reconnect_max={self.reconnect_max})"
        )

    @property
    def channel(self) -> str:
        """The pub/sub channel of this cluster."""
        return channel_name(self.cluster)


def channel_name(cluster: str) -> str:
    """``ratchet:{cluster}:wakeup``."""
    return f"ratchet:{cluster}:wakeup"


def redact_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``; never raises."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            netloc = parts.netloc
            if "@" in netloc:  # "redis://secret@host" (a bare credential) also hides it
                netloc = f"{_REDACTED}@{netloc.rsplit('@', 1)[1]}"
                return urlunsplit(parts._replace(netloc=netloc))
            return url
        user = parts.username or ""
        host = parts.netloc.rsplit("@", 1)[1]
        return urlunsplit(parts._replace(netloc=f"{user}:{_REDACTED}@{host}"))
    except Exception:
        return "<unparsable redis URL>"


def _float_param(name: str, value: str, redacted: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not number > 0:
        raise ConfigurationError(f"{name} must be a positive number of seconds in {redacted}")
    return number


def parse_url(
    url: str,
    *,
    cluster: str | None = None,
    reconnect_min: float | None = None,
    reconnect_max: float | None = None,
) -> RedisSettings:
    """Read a ``redis://`` / ``rediss://`` coordinator URL.

    ``?cluster=NAME`` picks the channel (a ``cluster`` argument must agree with it);
    ``reconnect_min`` / ``reconnect_max`` bound the reconnection backoff in seconds; any other
    query parameter is passed on to redis-py (``ssl_ca_certs``, ``socket_timeout``, ...).

    :raises ConfigurationError: not a Redis URL, or a bad parameter (the message is redacted).
    """
    redacted = redact_url(url)
    try:
        parts = urlsplit(url)
        _ = parts.port  # validates the port
    except ValueError:
        raise ConfigurationError(f"not a valid Redis URL: {redacted}") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ConfigurationError(f"the Redis coordinator needs a redis(s):// URL, got {redacted}")
    if not parts.hostname:
        raise ConfigurationError(f"the Redis URL names no host: {redacted}")
    own: dict[str, str] = {}
    passed: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in _OWN_QUERY:
            if key in own and own[key] != value:
                raise ConfigurationError(f"{key} is given twice in {redacted}")
            own[key] = value
        else:
            passed.append((key, value))
    name = own.get("cluster")
    if name is not None and cluster is not None and name != cluster:
        raise ConfigurationError(
            f"cluster {cluster!r} disagrees with cluster={name!r} in the URL {redacted}"
        )
    name = cluster if cluster is not None else (name if name is not None else DEFAULT_CLUSTER)
    if not _CLUSTER_RE.match(name):
        raise ConfigurationError(
            f"cluster name {name!r} must be 1-100 letters, digits or '_.:-' ({redacted})"
        )
    high = (
        reconnect_max
        if reconnect_max is not None
        else _float_param("reconnect_max", own.get("reconnect_max", "5"), redacted)
    )
    low = (
        reconnect_min
        if reconnect_min is not None
        else _float_param("reconnect_min", own["reconnect_min"], redacted)
        if "reconnect_min" in own
        else min(0.1, high)  # a small reconnect_max alone lowers the default minimum
    )
    if not 0 < low <= high:
        raise ConfigurationError(f"need 0 < reconnect_min <= reconnect_max ({redacted})")
    clean = urlunsplit(
        parts._replace(scheme=scheme, query=urlencode(passed, safe="/", quote_via=quote))
    )
    password = unquote(parts.password) if parts.password is not None else None
    userinfo = parts.netloc.rsplit("@", 1)[0] if "@" in parts.netloc else None
    if password is None and userinfo and ":" not in userinfo:
        # redis://secret@host: redis-py reads the lone credential as the password
        password = unquote(userinfo)
    return RedisSettings(
        url=clean,
        redacted_url=redact_url(clean),
        cluster=name,
        tls=scheme == "rediss",
        reconnect_min=low,
        reconnect_max=high,
        password=password,
    )


def encode_hint(hint: WakeupHint, instance: str) -> str:
    """The wire form of a hint (JSON)."""
    return json.dumps(
        {
            "v": MESSAGE_VERSION,
            "priority": int(hint.priority),
            "origin": hint.origin_node,
            "target": hint.target,
            "instance": instance,
        },
        separators=(",", ":"),
    )


def decode_hint(data: bytes | str) -> tuple[WakeupHint, str]:
    """``(hint, sender instance)`` from the wire form.

    :raises ValueError: not a hint.
    """
    obj = json.loads(data)
    if not isinstance(obj, dict):
        raise ValueError("a hint is a JSON object")
    priority = JobPriority(int(obj["priority"]))
    origin = obj.get("origin")
    target = obj.get("target")
    instance = obj.get("instance")
    if not isinstance(origin, str) or not isinstance(instance, str):
        raise ValueError("origin and instance must be strings")
    if target is not None and not isinstance(target, str):
        raise ValueError("target must be a string or null")
    return WakeupHint(priority, origin, target), instance


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


class RedisClusterCoordinator:
    """Carries wakeup hints between processes through Redis pub/sub.

    :param url: ``redis://[[user]:password@]host[:port][/db][?cluster=name]`` or ``rediss://``
        for TLS. Other query parameters go to redis-py.
    :param cluster: channel name part; must agree with ``?cluster=`` when both are given.
    :param socket_timeout: seconds a Redis command may take before it counts as failed.
    :param connect_timeout: seconds a connection attempt may take.
    :param keepalive: seconds of silence after which the subscriber PINGs Redis; no answer within
        ``socket_timeout`` more means the connection is dead and is replaced.
    :param max_pending: most distinct (origin, target) hints waiting for the publisher; further
        ones are dropped and counted (a queued hint already wakes every node).
    :param startup_wait: how long the constructor waits for the first subscription attempt to
        finish (it never fails because Redis is down: the coordinator then keeps retrying).
    """

    name = "redis"
    cross_process = True
    """Hints reach other processes (the contract suite checks self-delivery only then)."""

    def __init__(
        self,
        url: str,
        *,
        cluster: str | None = None,
        socket_timeout: float = 0.5,
        connect_timeout: float = 1.0,
        keepalive: float = 10.0,
        max_pending: int = 256,
        startup_wait: float = 2.0,
        reconnect_min: float | None = None,
        reconnect_max: float | None = None,
    ) -> None:
        self.settings = parse_url(
            url, cluster=cluster, reconnect_min=reconnect_min, reconnect_max=reconnect_max
        )
        if max_pending < 1:
            raise ConfigurationError("max_pending must be at least 1")
        self.instance_id = f"{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.channel = self.settings.channel
        self._keepalive = keepalive
        self._socket_timeout = socket_timeout
        self._max_pending = max_pending
        try:
            self._pool = redis.ConnectionPool.from_url(
                self.settings.url,
                **{
                    "socket_timeout": socket_timeout,
                    "socket_connect_timeout": connect_timeout,
                    "socket_keepalive": True,
                    "retry": Retry(NoBackoff(), 0),
                    "client_name": "ratchet-wakeup",
                },
            )
        except Exception as exc:
            raise ConfigurationError(
                f"bad Redis URL {self.settings.redacted_url}: {self._scrub(exc)}"
            ) from None
        self._client = redis.Redis(connection_pool=self._pool)
        self._counters = _Counters()
        self._lock = threading.Lock()
        self._listeners: list[Callable[[WakeupHint], None]] = []
        # publish queue: (origin, target) -> highest pending priority; insertion-ordered
        self._pending: dict[tuple[str, str | None], JobPriority] = {}
        self._pending_ready = threading.Condition(self._lock)
        self._closed = threading.Event()
        self._first_attempt = threading.Event()
        self._connected = threading.Event()
        self._state = CoordinatorState.CONNECTING
        self._sub_outage_since: float | None = None
        self._pub_outage = False
        self._pubsub: Any = None
        self._subscriber = threading.Thread(
            target=self._subscribe_loop, name="ratchet-redis-subscriber", daemon=True
        )
        self._publisher = threading.Thread(
            target=self._publish_loop, name="ratchet-redis-publisher", daemon=True
        )
        self._pid = os.getpid()
        _live.add(self)
        self._subscriber.start()
        self._publisher.start()
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
        self._deliver(hint)
        try:
            key = (hint.origin_node, hint.target)
            priority = JobPriority(hint.priority)
        except (AttributeError, TypeError, ValueError):
            log.debug("ignored a malformed hint %r", hint)
            return
        with self._lock:
            if not self._publisher.is_alive() and not self._closed.is_set():
                self._start_publisher()  # first hint in a forked child
            queued = self._pending.get(key)
            if queued is None and len(self._pending) >= self._max_pending:
                self._counters.add("dropped")
                return
            if queued is None or priority > queued:
                self._pending[key] = priority
            self._pending_ready.notify()

    def add_listener(self, listener: Callable[[WakeupHint], None]) -> None:
        """Call ``listener`` for every hint: local ones on the caller's thread, others on ours."""
        with self._lock:
            if not self._closed.is_set():
                self._listeners.append(listener)

    def close(self) -> None:
        """Stop both threads (joined) and close every connection. Idempotent, never raises."""
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            self._state = CoordinatorState.CLOSED
            self._listeners.clear()
            self._pending.clear()
            self._pending_ready.notify_all()
            pubsub = self._pubsub
        _interrupt(pubsub)
        for thread in (self._publisher, self._subscriber):
            if thread is not threading.current_thread():
                thread.join(timeout=5.0)
                if thread.is_alive():  # pragma: no cover - a hung socket beyond its timeouts
                    log.warning("redis coordinator thread %s did not stop in time", thread.name)
        try:
            self._client.close()
            self._pool.disconnect()
        except Exception as exc:  # pragma: no cover - defensive
            log.debug("closing the Redis pool failed: %s", self._scrub(exc))
        self._connected.clear()

    def __repr__(self) -> str:
        return (
            f"<RedisClusterCoordinator {self.settings.redacted_url} "
            f"cluster={self.settings.cluster!r} state={self._state.value}>"
        )

    # ------------------------------------------------------------------ internals
    def _start_publisher(self) -> None:
        self._publisher = threading.Thread(
            target=self._publish_loop, name="ratchet-redis-publisher", daemon=True
        )
        self._publisher.start()

    def _after_fork_in_child(self) -> None:
        """Make a copy inherited through ``fork()`` usable: publish-only, fresh locks.

        The parent's threads did not come along and its locks may have been held at the fork.
        The child publishes (its first hint starts a publisher thread; redis-py opens new
        connections) but does not subscribe: its listeners belong to the parent's workers.
        """
        if os.getpid() == self._pid:
            return
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._pending_ready = threading.Condition(self._lock)
        self._counters = _Counters()
        self._pending = {}
        self._listeners = []
        self._pubsub = None  # the parent's socket: never shut it down from here
        self._connected = threading.Event()
        self._first_attempt = threading.Event()
        self._pub_outage = False
        if not self._closed.is_set():
            self._state = CoordinatorState.CLOSED  # no subscription in this process

    def _scrub(self, exc: BaseException | str) -> str:
        """``Type: message`` of an exception (or a text) with the password removed."""
        text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        secret = self.settings.password
        if secret:
            text = text.replace(secret, _REDACTED)
            quoted = quote(secret, safe="")
            if quoted != secret:
                text = text.replace(quoted, _REDACTED)
        return text

    def _deliver(self, hint: WakeupHint) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(hint)
            except Exception:
                log.exception("wakeup listener failed")

    # -- publisher -----------------------------------------------------------------------------
    def _publish_loop(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closed.is_set():
                    self._pending_ready.wait()
                if self._closed.is_set():
                    return
                batch = [
                    encode_hint(WakeupHint(priority, origin, target), self.instance_id)
                    for (origin, target), priority in self._pending.items()
                ]
                self._pending.clear()
            self._publish(batch)

    def _publish(self, batch: list[str]) -> None:
        try:
            if len(batch) == 1:
                self._client.publish(self.channel, batch[0])
            else:
                pipe = self._client.pipeline(transaction=False)
                for message in batch:
                    pipe.publish(self.channel, message)
                pipe.execute()
        except Exception as exc:
            self._counters.add("publish_errors", len(batch))
            if self._closed.is_set():
                return
            with self._lock:
                first = not self._pub_outage
                self._pub_outage = True
                subscriber_knows = self._state is CoordinatorState.RECONNECTING
            if first and not subscriber_knows:
                log.warning(
                    "could not publish a wakeup to %s (%s); polling will still find the job, "
                    "further failures are not logged until publishing works again",
                    self.settings.redacted_url,
                    self._scrub(exc),
                )
            return
        self._counters.add("published", len(batch))
        if self._pub_outage:
            with self._lock:
                self._pub_outage = False
            log.debug("publishing wakeups to %s works again", self.settings.redacted_url)

    # -- subscriber ----------------------------------------------------------------------------
    def _subscribe_loop(self) -> None:
        failures = 0
        while not self._closed.is_set():
            try:
                self._listen()  # returns only when closed
                return
            except Exception as exc:
                self._drop_pubsub()
                if self._closed.is_set():
                    return
                if self._state is CoordinatorState.CONNECTED:
                    failures = 0  # a fresh outage starts the backoff over
                failures += 1
                self._counters.add("connect_failures")
                self._on_outage(exc)
            finally:
                self._first_attempt.set()
            step = self.settings.reconnect_min * 2 ** min(failures - 1, 30)
            delay = min(self.settings.reconnect_max, step)
            delay = random.uniform(delay / 2, delay)  # jitter: nodes do not reconnect in lockstep
            if self._closed.wait(delay):
                return

    def _listen(self) -> None:
        pubsub: Any = self._client.pubsub(ignore_subscribe_messages=False)  # type: ignore[no-untyped-call]
        with self._lock:
            if self._closed.is_set():
                pubsub.close()
                return
            self._pubsub = pubsub
        pubsub.subscribe(self.channel)
        deadline = time.monotonic() + self._socket_timeout + 1.0
        while True:  # wait for Redis to confirm the subscription
            message = pubsub.get_message(timeout=0.1)
            if message is not None and message.get("type") == "subscribe":
                break
            if self._closed.is_set():
                return
            if time.monotonic() > deadline:
                raise TimeoutError("Redis did not confirm the subscription in time")
        self._on_connected()
        last_seen = time.monotonic()
        ping_sent: float | None = None
        while not self._closed.is_set():
            message = pubsub.get_message(timeout=0.2)
            now = time.monotonic()
            if message is None:
                if ping_sent is not None and now - ping_sent > self._socket_timeout + 1.0:
                    raise TimeoutError("Redis did not answer a keepalive PING")
                if ping_sent is None and now - last_seen > self._keepalive:
                    pubsub.ping()
                    ping_sent = now
                continue
            last_seen = now
            ping_sent = None
            if message.get("type") == "message":
                self._on_message(message.get("data"))

    def _on_message(self, data: Any) -> None:
        try:
            hint, instance = decode_hint(data)
        except (ValueError, KeyError, TypeError):
            self._counters.add("malformed")
            log.debug("ignored a malformed message on %s", self.channel)
            return
        if instance == self.instance_id:
            self._counters.add("ignored_own")
            return
        self._counters.add("received")
        self._deliver(hint)

    def _on_connected(self) -> None:
        # Counters and log lines first: whoever waits for CONNECTED then sees them too.
        with self._lock:
            if self._closed.is_set():
                return
            previous = self._state
            since, self._sub_outage_since = self._sub_outage_since, None
        if previous is CoordinatorState.RECONNECTING:
            outage = time.monotonic() - since if since is not None else 0.0
            log.info(
                "wakeups via %s (cluster %r) work again after %.1f s",
                self.settings.redacted_url,
                self.settings.cluster,
                outage,
            )
            self._counters.add("reconnects")
        else:
            log.debug("subscribed to %s on %s", self.channel, self.settings.redacted_url)
        with self._lock:
            if self._closed.is_set():
                return
            self._state = CoordinatorState.CONNECTED
        self._connected.set()
        self._first_attempt.set()

    def _on_outage(self, exc: BaseException) -> None:
        with self._lock:
            if self._closed.is_set():
                return
            first = self._sub_outage_since is None
            if first:
                self._sub_outage_since = time.monotonic()
            was = self._state
            self._state = CoordinatorState.RECONNECTING
        self._connected.clear()
        if first:
            connecting = was is CoordinatorState.CONNECTING
            what = "cannot reach" if connecting else "lost its connection to"
            log.warning(
                "wakeup coordinator %s %s (%s); retrying with backoff up to %.1f s, polling "
                "still finds every job meanwhile",
                what,
                self.settings.redacted_url,
                self._scrub(exc),
                self.settings.reconnect_max,
            )

    def _drop_pubsub(self) -> None:
        with self._lock:
            pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(Exception):  # closing a broken socket
                pubsub.close()


#: Every coordinator not yet garbage-collected, for the fork handler below.
_live: weakref.WeakSet[RedisClusterCoordinator] = weakref.WeakSet()


def _reinit_in_child() -> None:
    for coordinator in list(_live):
        coordinator._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_in_child)


def _interrupt(pubsub: Any) -> None:
    """Wake a subscriber blocked reading ``pubsub`` (best effort: shut its socket down).

    Without this the subscriber still notices ``close()`` within its 0.2 s read timeout.
    """
    sock = getattr(getattr(pubsub, "connection", None), "_sock", None)
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
