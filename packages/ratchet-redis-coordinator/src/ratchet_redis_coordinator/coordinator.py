"""The Redis pub/sub wakeup coordinator.

Hints travel as small JSON messages on the channel ``ratchet:{cluster}:wakeup``.
:class:`RedisClusterCoordinator` is a :class:`~ratchet.adapters.wakeups.BrokerCoordinator`
(outbox, publisher and subscriber threads, reconnection with backoff and jitter, keepalive,
counters, logging, ``close`` and ``fork``) around a :class:`RedisTransport`, which only talks to
Redis: a dedicated connection SUBSCRIBEd to the channel (its keepalive is a PING answered by a
PONG), PUBLISH (pipelined for several hints), the wire form, and hiding the password.

The password of the URL never appears in logs, reprs or error messages.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ratchet.adapters.wakeups import (
    BrokerCoordinator,
    CoordinatorState,
    CoordinatorStats,
    hint_jobs,
)
from ratchet.domain.errors import ConfigurationError
from ratchet.domain.lifecycle import JobPriority
from ratchet.ports import WakeupHint

__all__ = [
    "CoordinatorState",
    "CoordinatorStats",
    "RedisClusterCoordinator",
    "RedisSettings",
    "RedisTransport",
    "channel_name",
    "decode_hint",
    "encode_hint",
    "parse_url",
    "redact_url",
]

SCHEMES: Final = ("redis", "rediss")
DEFAULT_CLUSTER: Final = "default"
MESSAGE_VERSION: Final = 1
_CLUSTER_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
#: Query parameters this coordinator reads itself; everything else goes to redis-py.
_OWN_QUERY: Final = frozenset({"cluster", "reconnect_min", "reconnect_max"})
_REDACTED: Final = "***"


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
            "jobs": hint.jobs,
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
    return WakeupHint(priority, origin, target, hint_jobs(obj.get("jobs", 1))), instance


class RedisTransport:
    """Redis pub/sub under a :class:`~ratchet.adapters.wakeups.BrokerCoordinator`."""

    errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)

    def __init__(
        self, settings: RedisSettings, *, socket_timeout: float, connect_timeout: float
    ) -> None:
        self.settings = settings
        self.channel = settings.channel
        self.where = f"{settings.redacted_url} cluster={settings.cluster!r}"
        self._confirm_timeout = socket_timeout + 1.0
        try:
            self._pool = redis.ConnectionPool.from_url(
                settings.url,
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
                f"bad Redis URL {settings.redacted_url}: {self.redact(f'{type(exc).__name__}: {exc}')}"
            ) from None
        self._client = redis.Redis(connection_pool=self._pool)

    def connect(self) -> _RedisSubscription:
        return _RedisSubscription(
            self._client.pubsub(ignore_subscribe_messages=False),  # type: ignore[no-untyped-call]
            self.channel,
            self._confirm_timeout,
        )

    def publish(self, messages: Sequence[str]) -> None:
        if len(messages) == 1:
            self._client.publish(self.channel, messages[0])
            return
        pipe = self._client.pipeline(transaction=False)
        for message in messages:
            pipe.publish(self.channel, message)
        pipe.execute()

    def encode(self, hint: WakeupHint, sender: str) -> str:
        return encode_hint(hint, sender)

    def decode(self, message: str | bytes) -> tuple[WakeupHint, str]:
        return decode_hint(message)

    def redact(self, text: str) -> str:
        """``text`` with the password (plain or URL-quoted) replaced by ``***``."""
        secret = self.settings.password
        if secret:
            text = text.replace(secret, _REDACTED)
            quoted = quote(secret, safe="")
            if quoted != secret:
                text = text.replace(quoted, _REDACTED)
        return text

    def after_fork_in_child(self) -> None:
        """Nothing to forget: redis-py's pool notices the new pid and opens fresh connections."""

    def close(self) -> None:
        self._client.close()
        self._pool.disconnect()


class _RedisSubscription:
    """A pub/sub connection SUBSCRIBEd to the wakeup channel."""

    def __init__(self, pubsub: Any, channel: str, confirm_timeout: float) -> None:
        self._pubsub = pubsub
        self._channel = channel
        self._confirm_timeout = confirm_timeout
        self._interrupted = False

    def listen(self) -> None:
        self._pubsub.subscribe(self._channel)
        deadline = time.monotonic() + self._confirm_timeout
        while not self._interrupted:  # wait for Redis to confirm the subscription
            message = self._pubsub.get_message(timeout=0.1)
            if message is not None and message.get("type") == "subscribe":
                return
            if time.monotonic() > deadline:
                raise TimeoutError("Redis did not confirm the subscription in time")

    def receive(self, timeout: float) -> list[bytes] | None:
        message = self._pubsub.get_message(timeout=timeout)
        if message is None:
            return None
        return [message.get("data")] if message.get("type") == "message" else []

    def ping(self) -> bool:
        self._pubsub.ping()
        return False  # the PONG arrives through receive()

    def interrupt(self) -> None:
        """Shut the socket down, so that a blocked read returns at once."""
        self._interrupted = True
        sock = getattr(getattr(self._pubsub, "connection", None), "_sock", None)
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._pubsub.close()


class RedisClusterCoordinator(BrokerCoordinator[RedisTransport]):
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
    :param reconnect_min: first reconnection delay in seconds (also ``?reconnect_min=``).
    :param reconnect_max: cap of the reconnection delay in seconds (also ``?reconnect_max=``).
    """

    name = "redis"

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
        self.channel = self.settings.channel
        super().__init__(
            RedisTransport(
                self.settings, socket_timeout=socket_timeout, connect_timeout=connect_timeout
            ),
            max_pending=max_pending,
            reconnect_min=self.settings.reconnect_min,
            reconnect_max=self.settings.reconnect_max,
            keepalive=keepalive,
            ping_timeout=socket_timeout + 1.0,
            startup_wait=startup_wait,
        )
