"""``PostgresClusterCoordinator``: wakeup hints through PostgreSQL ``LISTEN`` / ``NOTIFY``.

Every node keeps one dedicated listener connection (autocommit, ``LISTEN ratchet_wakeup``) read
by a background thread that waits on the socket with ``select`` (plus a self-pipe, so
:meth:`close` returns at once). ``notify_new_work`` delivers the hint to the node's own listeners
at once and queues it for a publisher thread, which sends everything queued in one round trip
(``SELECT pg_notify(...), pg_notify(...)``) on a second, lazily opened connection: submitting
never waits for the database on the coordinator's account. Hints are never needed for
correctness: a lost listener connection reconnects with capped exponential backoff while the
worker keeps polling, and after reconnecting the listeners get one hint because a wakeup may
have been missed during the outage.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import json
import logging
import os
import select
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg import pq, sql
from sqlalchemy.engine import make_url

from ratchet.domain.lifecycle import JobPriority
from ratchet.ports import WakeupHint

log = logging.getLogger("ratchet.coordinator.postgres")

#: The notification channel every node listens on.
CHANNEL = "ratchet_wakeup"
#: Origin of the hint delivered after the listener reconnected.
RECONNECT_ORIGIN = "<listener reconnected>"

#: Hints waiting for the publisher; beyond this the oldest are dropped (and counted).
OUTBOX_LIMIT = 1000
#: Most notifications sent in one statement.
PUBLISH_BATCH = 100

Listener = Callable[[WakeupHint], None]


class CoordinatorState(enum.StrEnum):
    """Where the listener connection stands."""

    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    CLOSED = "closed"


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
        )
        return hint, str(body.get("s", ""))
    except (ValueError, KeyError, TypeError, AttributeError):
        return WakeupHint(JobPriority.NORMAL, "?"), ""


class PostgresClusterCoordinator:
    """Carries :class:`~ratchet.ports.WakeupHint` s between nodes with ``LISTEN`` / ``NOTIFY``.

    A hint is delivered to this coordinator's own listeners at once (so a worker in the
    submitting process wakes without a round trip) and to every other coordinator on the
    channel through the database; its own echo from the database is dropped.

    :param url: the database (SQLAlchemy or libpq URL).
    :param channel: the notification channel.
    :param ping_interval: seconds of silence after which the listener checks its connection.
    :param max_backoff: cap of the reconnect backoff, in seconds.
    :param connect_kwargs: extra keyword arguments for :func:`psycopg.connect`.
    """

    name = "postgres"
    cross_process = True

    def __init__(
        self,
        url: str,
        *,
        channel: str = CHANNEL,
        ping_interval: float = 5.0,
        initial_backoff: float = 0.05,
        max_backoff: float = 5.0,
        connect_kwargs: Mapping[str, Any] | None = None,
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
        self.instance = uuid.uuid4().hex[:12]
        """Identifies this coordinator's notifications (to drop their echo)."""
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()
        self._outbox: collections.deque[str] = collections.deque()
        self._outbox_ready = threading.Condition(threading.Lock())
        self._sender: psycopg.Connection[Any] | None = None
        self.published = 0
        """Notifications sent."""
        self.publish_errors = 0
        """Notifications that could not be sent (dropped; polling finds the jobs)."""
        self.dropped = 0
        """Hints dropped because the outbox was full."""
        self._closed = threading.Event()
        self._connected = threading.Event()
        self._state = CoordinatorState.CONNECTING
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._pipe_lock = threading.Lock()
        self._pipe_open = True
        self.received = 0
        """How many notifications from other coordinators the listener received."""
        self.reconnects = 0
        """How many times the listener connection was re-established after a loss."""
        self.connect_failures = 0
        """How many listener connection attempts failed."""
        self.listener_pid: int | None = None
        """Backend process id of the current listener connection (for tests and diagnostics)."""
        self._thread = threading.Thread(
            target=self._listen_loop, name="ratchet-pg-listener", daemon=True
        )
        self._publisher = threading.Thread(
            target=self._publish_loop, name="ratchet-pg-notify", daemon=True
        )
        self._thread.start()
        self._publisher.start()

    # ------------------------------------------------------------------ public API
    @property
    def state(self) -> CoordinatorState:
        """``connecting``, ``connected``, ``reconnecting`` or ``closed``."""
        return self._state

    def wait_connected(self, timeout: float) -> bool:
        """Block until the listener is listening (True) or ``timeout`` seconds passed."""
        return self._connected.wait(timeout)

    def add_listener(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    @property
    def pending(self) -> int:
        """Hints queued for the publisher."""
        return len(self._outbox)

    def notify_new_work(self, hint: WakeupHint) -> None:
        """Wake local listeners now and queue a ``NOTIFY`` for the others. Never blocks or raises."""
        if self._closed.is_set():
            return
        self._deliver(hint)
        payload = encode_hint(hint, self.instance)
        with self._outbox_ready:
            if len(self._outbox) >= OUTBOX_LIMIT:
                self._outbox.popleft()
                self.dropped += 1
            self._outbox.append(payload)
            self._outbox_ready.notify()

    def close(self) -> None:
        """Stop listening and publishing, close both connections. Idempotent; returns promptly."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._state = CoordinatorState.CLOSED
        with self._pipe_lock:
            if self._pipe_open:
                # A full pipe (OSError) means the thread is being woken anyway.
                with contextlib.suppress(OSError):
                    os.write(self._wake_w, b"x")
        with self._outbox_ready:
            self._outbox_ready.notify_all()
        # Bounded: a connection attempt in progress gives up after connect_timeout.
        limit = float(self.connect_kwargs.get("connect_timeout", 5)) + 1
        for thread in (self._thread, self._publisher):
            if thread is not threading.current_thread():
                thread.join(timeout=limit)
        with self._lock:
            self._listeners.clear()

    def __enter__(self) -> PostgresClusterCoordinator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _drop_sender(self) -> None:
        sender, self._sender = self._sender, None
        if sender is not None:
            with contextlib.suppress(psycopg.Error):
                sender.close()

    def _publish_loop(self) -> None:
        outage_logged = False
        while True:
            with self._outbox_ready:
                while not self._outbox and not self._closed.is_set():
                    self._outbox_ready.wait()
                if self._closed.is_set():
                    break
                batch: list[str] = []
                while self._outbox and len(batch) < PUBLISH_BATCH:
                    payload = self._outbox.popleft()
                    if payload not in batch:  # one submission burst, one notification each
                        batch.append(payload)
            try:
                self._publish(batch)
                self.published += len(batch)
                if outage_logged:
                    log.warning("wakeup NOTIFY works again")
                    outage_logged = False
            except psycopg.Error as exc:
                self.publish_errors += len(batch)
                if not outage_logged:
                    log.warning("wakeup NOTIFY failed (%s); pollers will find the jobs", exc)
                    outage_logged = True
        self._drop_sender()

    def _publish(self, payloads: list[str]) -> None:
        """Send ``payloads`` in one statement, reconnecting once if the connection broke."""
        calls = sql.SQL(", ").join(
            sql.SQL("pg_notify({}, {})").format(sql.Literal(self.channel), sql.Placeholder())
            for _ in payloads
        )
        stmt = sql.SQL("SELECT {}").format(calls)
        for attempt in (1, 2):
            try:
                if self._sender is None or self._sender.closed:
                    sender = psycopg.connect(self.conninfo, autocommit=True, **self.connect_kwargs)
                    # Each NOTIFY commits; a hint lost in a server crash costs nothing, so do
                    # not wait for the WAL flush (one disk flush less on the wakeup path).
                    sender.execute("SET synchronous_commit = off")
                    self._sender = sender
                self._sender.execute(stmt, payloads)
                return
            except psycopg.Error:
                self._drop_sender()
                if attempt == 2 or self._closed.is_set():
                    raise

    def _dispatch(self, payload: str) -> None:
        hint, sender = decode_hint(payload)
        if sender == self.instance:
            return  # our own hint, already delivered locally
        self.received += 1
        self._deliver(hint)

    def _deliver(self, hint: WakeupHint) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(hint)
            except Exception:
                log.exception("wakeup listener failed")

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self.conninfo, autocommit=True, **self.connect_kwargs)
        try:
            conn.add_notify_handler(lambda n: self._dispatch(n.payload))
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        except BaseException:
            conn.close()
            raise
        return conn

    def _listen_loop(self) -> None:
        backoff = self.initial_backoff
        outage_logged = False
        ever_connected = False
        while not self._closed.is_set():
            try:
                conn = self._connect()
            except psycopg.Error as exc:
                self.connect_failures += 1
                if not self._closed.is_set():
                    self._state = CoordinatorState.RECONNECTING
                if not outage_logged:
                    log.warning(
                        "wakeup listener cannot connect (%s); retrying with backoff, polling "
                        "carries on",
                        exc,
                    )
                    outage_logged = True
                if self._closed.wait(backoff):
                    break
                backoff = min(backoff * 2, self.max_backoff)
                continue
            self.listener_pid = conn.info.backend_pid
            if ever_connected:
                self.reconnects += 1
            if outage_logged:
                log.warning("wakeup listener reconnected")
                outage_logged = False
            backoff = self.initial_backoff
            if not self._closed.is_set():
                self._state = CoordinatorState.CONNECTED
            self._connected.set()
            if ever_connected:
                # Wakeups sent while we were away are lost: let pollers look once.
                self._deliver(WakeupHint(JobPriority.NORMAL, RECONNECT_ORIGIN))
            ever_connected = True
            try:
                self._pump(conn)
            except psycopg.Error as exc:
                if not self._closed.is_set():
                    log.warning(
                        "wakeup listener connection lost (%s); reconnecting, polling carries on",
                        exc,
                    )
                    outage_logged = True
            finally:
                self._connected.clear()
                if not self._closed.is_set():
                    self._state = CoordinatorState.RECONNECTING
                with contextlib.suppress(psycopg.Error):
                    conn.close()
            if not self._closed.is_set() and outage_logged and self._closed.wait(backoff):
                break
        self._state = CoordinatorState.CLOSED
        with self._pipe_lock:
            self._pipe_open = False
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _pump(self, conn: psycopg.Connection[Any]) -> None:
        """Wait on the socket and deliver notifications until closed or the connection breaks."""
        pgconn = conn.pgconn
        sock = pgconn.socket
        last_traffic = time.monotonic()
        while not self._closed.is_set():
            ready, _, _ = select.select([sock, self._wake_r], [], [], self.ping_interval)
            if self._closed.is_set():
                return
            if sock in ready:
                pgconn.consume_input()
                while (pgn := pgconn.notifies()) is not None:
                    self._dispatch(pgn.extra.decode("utf-8", "replace"))
                if pgconn.status != pq.ConnStatus.OK:
                    raise psycopg.OperationalError("listener connection is no longer usable")
                last_traffic = time.monotonic()
            elif time.monotonic() - last_traffic >= self.ping_interval:
                conn.execute("SELECT 1")  # notifications arriving meanwhile go to the handler
                last_traffic = time.monotonic()
