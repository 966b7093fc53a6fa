"""``PostgresClusterCoordinator``: wakeup hints through PostgreSQL ``LISTEN`` / ``NOTIFY``.

A :class:`~ratchet.adapters.wakeups.BrokerCoordinator` (outbox, publisher and subscriber threads,
reconnection with backoff, keepalive, counters, logging, ``close`` and ``fork``) around a
:class:`PostgresTransport`, which only talks to PostgreSQL. Every node keeps one dedicated
listener connection (autocommit, ``LISTEN ratchet_wakeup``) whose socket the subscriber thread
waits on with ``select`` (plus a self-pipe, so that ``close`` returns at once); its keepalive is
a ``SELECT 1``. The publisher thread sends everything queued in one round trip
(``SELECT pg_notify(...), pg_notify(...)``) on a second, lazily opened connection: submitting
never waits for the database on the coordinator's account.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import pq, sql
from sqlalchemy.engine import make_url

from ratchet.adapters.wakeups import (
    RECONNECT_ORIGIN,
    BrokerCoordinator,
    CoordinatorState,
    CoordinatorStats,
    hint_jobs,
)
from ratchet.domain.lifecycle import JobPriority
from ratchet.ports import WakeupHint

__all__ = [
    "CHANNEL",
    "OUTBOX_LIMIT",
    "PUBLISH_BATCH",
    "RECONNECT_ORIGIN",
    "CoordinatorState",
    "CoordinatorStats",
    "PostgresClusterCoordinator",
    "PostgresTransport",
    "decode_hint",
    "encode_hint",
    "libpq_conninfo",
]

#: The notification channel every node listens on.
CHANNEL = "ratchet_wakeup"

#: Hints waiting for the publisher; beyond this further ones are dropped (and counted).
OUTBOX_LIMIT = 1000
#: Most notifications sent in one statement.
PUBLISH_BATCH = 100


def libpq_conninfo(url: str) -> str:
    """A libpq connection URI for a SQLAlchemy URL (``postgresql+psycopg://`` -> ``postgresql://``)."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    parsed = make_url(url)
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


#: NOTIFY payloads must stay below 8000 bytes; longer origins and targets are cut.
_MAX_FIELD = 1000


def encode_hint(hint: WakeupHint, sender: str = "") -> str:
    """The NOTIFY payload of a hint: compact JSON, ``s`` naming the sending coordinator."""
    body: dict[str, Any] = {"p": int(hint.priority), "o": hint.origin_node[:_MAX_FIELD]}
    if hint.target is not None:
        body["t"] = hint.target[:_MAX_FIELD]
    if hint.jobs != 1:
        body["n"] = hint.jobs
    if sender:
        body["s"] = sender
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def decode_hint(payload: str) -> tuple[WakeupHint, str]:
    """The hint and sender of a payload; anything unreadable becomes a plain NORMAL hint."""
    try:
        body = json.loads(payload)
        target = body.get("t")
        hint = WakeupHint(
            JobPriority(int(body["p"])),
            str(body.get("o", "?")),
            None if target is None else str(target),
            hint_jobs(body.get("n", 1)),
        )
        return hint, str(body.get("s", ""))
    except (ValueError, KeyError, TypeError, AttributeError):
        return WakeupHint(JobPriority.NORMAL, "?"), ""


class PostgresTransport:
    """PostgreSQL ``LISTEN`` / ``NOTIFY`` under a :class:`~ratchet.adapters.wakeups.BrokerCoordinator`."""

    errors: tuple[type[BaseException], ...] = (psycopg.Error, OSError)

    def __init__(self, conninfo: str, channel: str, connect_kwargs: Mapping[str, Any]) -> None:
        self.conninfo = conninfo
        self.channel = channel
        self.connect_kwargs = connect_kwargs
        self.where = f"{make_url(conninfo).render_as_string(hide_password=True)} channel={channel}"
        self.listener_pid: int | None = None
        """Backend process id of the latest listener connection."""
        self.sender: psycopg.Connection[Any] | None = None
        """The publishing connection (opened by the first publish)."""

    def connect(self) -> _PostgresListener:
        conn = psycopg.connect(self.conninfo, autocommit=True, **self.connect_kwargs)
        try:
            listener = _PostgresListener(conn, self.channel)
        except BaseException:
            conn.close()
            raise
        self.listener_pid = conn.info.backend_pid
        return listener

    def publish(self, messages: Sequence[str]) -> None:
        """Send ``messages`` in one statement, reconnecting once if the connection broke."""
        calls = sql.SQL(", ").join(
            sql.SQL("pg_notify({}, {})").format(sql.Literal(self.channel), sql.Placeholder())
            for _ in messages
        )
        stmt = sql.SQL("SELECT {}").format(calls)
        for attempt in (1, 2):
            try:
                if self.sender is None or self.sender.closed:
                    sender = psycopg.connect(self.conninfo, autocommit=True, **self.connect_kwargs)
                    # Each NOTIFY commits; a hint lost in a server crash costs nothing, so do
                    # not wait for the WAL flush (one disk flush less on the wakeup path).
                    sender.execute("SET synchronous_commit = off")
                    self.sender = sender
                self.sender.execute(stmt, messages)
                return
            except psycopg.Error:
                self.close()
                if attempt == 2:
                    raise

    def encode(self, hint: WakeupHint, sender: str) -> str:
        return encode_hint(hint, sender)

    def decode(self, message: str | bytes) -> tuple[WakeupHint, str]:
        return decode_hint(message if isinstance(message, str) else message.decode())

    def redact(self, text: str) -> str:
        return text  # libpq's messages name the server and the user, never the password

    def after_fork_in_child(self) -> None:
        self.sender = None  # the parent's session: dropping it here does not close it

    def close(self) -> None:
        sender, self.sender = self.sender, None
        if sender is not None:
            with contextlib.suppress(psycopg.Error):
                sender.close()


class _PostgresListener:
    """A connection that LISTENs, read with ``select`` next to a self-pipe for :meth:`interrupt`."""

    def __init__(self, conn: psycopg.Connection[Any], channel: str) -> None:
        self._conn = conn
        self._channel = channel
        # Notifications that arrive while a statement runs (LISTEN, the keepalive) land here.
        self._arrived: list[str] = []
        conn.add_notify_handler(lambda n: self._arrived.append(n.payload))
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)

    def listen(self) -> None:
        self._conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))

    def receive(self, timeout: float) -> list[str] | None:
        if self._arrived:
            arrived, self._arrived = self._arrived, []
            return arrived
        pgconn = self._conn.pgconn
        sock = pgconn.socket
        ready, _, _ = select.select([sock, self._wake_r], [], [], timeout)
        if sock not in ready:
            return None
        pgconn.consume_input()
        payloads = []
        while (pgn := pgconn.notifies()) is not None:
            payloads.append(pgn.extra.decode("utf-8", "replace"))
        if pgconn.status != pq.ConnStatus.OK:
            raise psycopg.OperationalError("listener connection is no longer usable")
        return payloads

    def ping(self) -> bool:
        self._conn.execute("SELECT 1")  # notifications arriving meanwhile go to the handler
        return True

    def interrupt(self) -> None:
        # A full pipe (OSError) means the reader is being woken anyway.
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def close(self) -> None:
        os.close(self._wake_r)
        os.close(self._wake_w)
        self._conn.close()


class PostgresClusterCoordinator(BrokerCoordinator[PostgresTransport]):
    """Carries :class:`~ratchet.ports.WakeupHint` s between nodes with ``LISTEN`` / ``NOTIFY``.

    A hint is delivered to this coordinator's own listeners at once (so a worker in the
    submitting process wakes without a round trip) and to every other coordinator on the
    channel through the database; its own echo from the database is dropped.

    :param url: the database (SQLAlchemy or libpq URL).
    :param channel: the notification channel.
    :param ping_interval: seconds of silence after which the listener checks its connection.
    :param initial_backoff: first reconnect delay, in seconds (doubling per failed attempt).
    :param max_backoff: cap of the reconnect backoff, in seconds.
    :param connect_kwargs: extra keyword arguments for :func:`psycopg.connect`.
    :param max_pending: most distinct (origin, target) hints waiting for the publisher.
    """

    name = "postgres"

    def __init__(
        self,
        url: str,
        *,
        channel: str = CHANNEL,
        ping_interval: float = 5.0,
        initial_backoff: float = 0.05,
        max_backoff: float = 5.0,
        connect_kwargs: Mapping[str, Any] | None = None,
        max_pending: int = OUTBOX_LIMIT,
    ) -> None:
        self.conninfo = libpq_conninfo(url)
        self.channel = channel
        self.ping_interval = ping_interval
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.connect_kwargs: dict[str, Any] = {
            "connect_timeout": 5,
            "application_name": "ratchet-listener",
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
            **(connect_kwargs or {}),
        }
        super().__init__(
            PostgresTransport(self.conninfo, channel, self.connect_kwargs),
            max_pending=max_pending,
            publish_batch=PUBLISH_BATCH,
            reconnect_min=min(initial_backoff, max_backoff),
            reconnect_max=max_backoff,
            keepalive=ping_interval,
            # Bounded: a connection attempt in progress gives up after connect_timeout.
            close_timeout=float(self.connect_kwargs.get("connect_timeout", 5)) + 1,
        )

    # The attributes this coordinator has always had, next to ``stats``.
    @property
    def instance(self) -> str:
        """Identifies this coordinator's notifications (to drop their echo)."""
        return self.instance_id

    @property
    def listener_pid(self) -> int | None:
        """Backend process id of the current listener connection (for tests and diagnostics)."""
        return self.transport.listener_pid

    @property
    def published(self) -> int:
        """Notifications sent."""
        return self.stats.published

    @property
    def publish_errors(self) -> int:
        """Notifications that could not be sent (dropped; polling finds the jobs)."""
        return self.stats.publish_errors

    @property
    def dropped(self) -> int:
        """Hints dropped because the outbox was full."""
        return self.stats.dropped

    @property
    def received(self) -> int:
        """How many notifications from other coordinators the listener received."""
        return self.stats.received

    @property
    def reconnects(self) -> int:
        """How many times the listener connection was re-established after an outage."""
        return self.stats.reconnects

    @property
    def connect_failures(self) -> int:
        """How many listener connection attempts failed (or connections were lost)."""
        return self.stats.connect_failures
