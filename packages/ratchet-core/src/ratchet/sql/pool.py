"""Checkout checks of pooled connections that cost no round trip while a connection is healthy.

SQLAlchemy's ``pool_pre_ping`` sends a round trip before *every* checkout; a busy worker checks
out a connection for every claim and every outcome batch, and a single submit is one
transaction, so that adds a round trip to each. Two cheaper checks:

- :func:`install_socket_check` (PostgreSQL): a pooled connection sits idle between checkouts, so
  nothing should be waiting on its socket. When the server ends the session (a restart, a
  shutdown, an idle timeout, a killed backend) it sends a last message and closes the socket,
  which makes it readable. The check looks at the socket without blocking and pings for real only
  when something is there; a failed ping invalidates the pool, as ``pool_pre_ping`` does.
- :func:`ping_when_idle` (any driver): ping only a connection that sat idle in the pool for a
  while. One in use a moment ago is as good as a ping; a server that died since is caught by the
  statement itself (``StoreUnavailable``; the worker backs off and the pool reconnects).

And the pool itself, :class:`ShrinkingQueuePool`: one per store, closing connections beyond the
first that nobody needed for 30 s, and waiting a moment for that first one before opening a second,
so that an idle process holds one.
"""

from __future__ import annotations

import logging
import select
import time
import weakref
from collections.abc import Callable
from typing import Any

from sqlalchemy import event, exc
from sqlalchemy.engine import Engine
from sqlalchemy.pool import ConnectionPoolEntry, QueuePool
from sqlalchemy.util import queue as sqla_queue

log = logging.getLogger("ratchet.store")

#: Idle time after which a pooled connection is pinged before use.
DEFAULT_IDLE_PING_SECONDS = 1.0

_CHECKED_IN = "ratchet_checked_in"


def ping_when_idle(engine: Engine, idle_seconds: float = DEFAULT_IDLE_PING_SECONDS) -> None:
    """Ping a connection on checkout when it sat idle for ``idle_seconds`` or more.

    A failed ping that the dialect recognises as a disconnect raises ``DisconnectionError``,
    which makes the pool discard the connection and open a fresh one.
    """
    dialect = engine.dialect

    @event.listens_for(engine, "checkin")
    def _checked_in(dbapi_connection: Any, record: Any) -> None:
        if record is not None:
            record.info[_CHECKED_IN] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        since = record.info.get(_CHECKED_IN)
        if since is None or time.monotonic() - since < idle_seconds:
            return  # new, or in use a moment ago
        try:
            dialect.do_ping(dbapi_connection)
        except Exception as error:
            if dialect.is_disconnect(error, dbapi_connection, None):  # type: ignore[arg-type]
                raise exc.DisconnectionError(f"pooled connection is gone: {error}") from error
            raise


#: Returns the socket's file descriptor, or None when the connection is known to be unusable.
SocketOf = Callable[[Any], "int | None"]


#: The pools whose connections are checked by their socket, each with its ``socket_of``.
_CHECKED: weakref.WeakKeyDictionary[Any, SocketOf] = weakref.WeakKeyDictionary()


def has_socket_check(engine: Engine) -> bool:
    """Whether ``engine``'s pool checks connections on checkout (see the module docstring)."""
    return engine.pool in _CHECKED


def _quiet(socket_of: SocketOf, dbapi_conn: Any) -> bool | None:
    """True: nothing waits on the connection's socket; False: something does (a notice, or
    the server's goodbye); None: its socket cannot be had."""
    try:
        fd = socket_of(dbapi_conn)
        if fd is None:
            return None
        return not select.select([fd], [], [], 0)[0]
    except Exception:
        return None


def install_socket_check(engine: Engine, socket_of: SocketOf) -> None:
    """Check pooled connections on checkout by their socket, pinging only if it is readable."""
    _CHECKED[engine.pool] = socket_of

    @event.listens_for(engine, "checkout")
    def _check(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        quiet = _quiet(socket_of, dbapi_conn)
        if quiet:
            return  # nothing pending: the session is as the server left it
        if quiet is not None and _ping(engine, dbapi_conn):
            return
        log.info("pooled connection is gone (server restarted or closed it); reconnecting")
        raise exc.InvalidatePoolError()


def _check_in(record: Any) -> None:
    """Return a pool entry taken without a checkout (SQLAlchemy's own check-in: the checkin
    events, then the pool's return)."""
    record.checkin(_fairy_was_created=False)


def _ping(engine: Engine, dbapi_conn: Any) -> bool:
    """A real round trip (something was waiting on the socket: a notice, or the goodbye)."""
    try:
        return bool(engine.dialect.do_ping(dbapi_conn))
    except Exception:
        return False


#: Seconds a surplus pooled connection may sit idle before the pool closes it.
DEFAULT_IDLE_TIMEOUT = 30.0

#: Seconds a checkout waits for the resting connection before the pool opens another.
DEFAULT_GROW_AFTER = 0.05

_IDLE_SINCE = "ratchet_idle_since"


class ShrinkingQueuePool(QueuePool):
    """A LIFO :class:`~sqlalchemy.pool.QueuePool` that closes connections nobody needed lately.

    Connections are handed out most recently returned first, so under light load the same one
    serves every checkout and the others sit at the bottom of the queue. When a connection comes
    back, those at the bottom that have been idle for ``pool_idle_timeout`` seconds are closed,
    keeping ``pool_keep_idle`` (default one) open: an idle worker process shrinks to a single
    connection, a busy one keeps what its threads use at the same time (up to ``pool_size``,
    plus ``max_overflow`` opened for bursts and closed as they return). Always LIFO
    (``use_lifo`` is accepted, as ``create_engine`` passes it, and ignored).

    A process at rest still has several threads that touch the store now and then (heartbeat,
    recurring occurrences, the poller); when two of them meet, a plain pool would open a second
    connection and keep it for the idle timeout. Here a checkout that finds the pool holding
    only its ``pool_keep_idle`` connections, all in use, first waits up to ``pool_grow_after``
    seconds (default 0.05) for one to come back: a resting process's statements take a
    millisecond, so it stays at one connection, and so does a busy one whose statements come
    back within the wait (``0`` turns the wait off).

    A connection the server refuses to open (its connection limit reached) while this pool
    holds others does not fail the checkout: it waits for one of its own to come back, up to
    the pool's ``timeout``, and raises the refusal only if none does.
    """

    def __init__(
        self,
        creator: Any,
        pool_size: int = 5,
        max_overflow: int = 10,
        timeout: float = 30.0,
        use_lifo: bool = True,
        pool_idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        pool_keep_idle: int = 1,
        pool_grow_after: float = DEFAULT_GROW_AFTER,
        **kw: Any,
    ) -> None:
        super().__init__(
            creator,
            pool_size=pool_size,
            max_overflow=max_overflow,
            timeout=timeout,
            use_lifo=True,
            **kw,
        )
        self.idle_timeout = pool_idle_timeout
        self.keep_idle = pool_keep_idle
        self.grow_after = pool_grow_after
        self.closed_idle = 0
        """How many idle connections this pool closed."""
        self.waiting_to_grow = 0
        """Checkouts now waiting for a resting connection to come back."""
        self.grew_after_wait = 0
        """Checkouts that waited ``grow_after`` in vain and opened a connection."""
        self.waited_after_refusal = 0
        """Checkouts that waited for a connection of their own after the server refused
        another."""

    refused: Callable[[BaseException], bool] = staticmethod(lambda error: False)
    """Whether an error opening a connection is the server refusing it for its connection
    limit (the store sets it from its dialect; by default no error is)."""

    @property
    def max_overflow(self) -> int:
        """Connections opened beyond ``size()`` under load (closed as they come back)."""
        return self._max_overflow

    clock: Callable[[], float] = staticmethod(time.monotonic)
    """Seconds of a monotonic clock (tests replace it)."""

    def _do_get(self) -> ConnectionPoolEntry:
        if self.grow_after > 0 and self._at_resting_size():
            self.waiting_to_grow += 1
            try:
                return self._pool.get(True, self.grow_after)
            except sqla_queue.Empty:
                self.grew_after_wait += 1
            finally:
                self.waiting_to_grow -= 1
        opened = self._opened()
        try:
            return super()._do_get()
        except Exception as error:
            if opened <= 0 or not self.refused(error):
                raise
            self.waited_after_refusal += 1
            try:
                return self._pool.get(True, self._timeout)
            except sqla_queue.Empty:
                pass
            raise

    def _opened(self) -> int:
        """Connections this pool has open, idle or in use."""
        return int(self._pool.maxsize + self._overflow)

    def _at_resting_size(self) -> bool:
        """Every connection is in use, there are only the resting ones, and more may open."""
        opened = self._opened()
        return (
            self._pool.empty()
            and opened <= self.keep_idle
            and opened > 0
            and (self._max_overflow < 0 or opened < self._pool.maxsize + self._max_overflow)
        )

    def _do_return_conn(self, record: ConnectionPoolEntry) -> None:
        record.info[_IDLE_SINCE] = self.clock()
        super()._do_return_conn(record)
        self._close_idle()

    def _close_idle(self) -> None:
        """Close the connections at the bottom of the queue idle for ``idle_timeout``."""
        queue: Any = self._pool  # sqlalchemy.util.queue.Queue: a deque under a mutex
        stale: list[ConnectionPoolEntry] = []
        limit = self.clock() - self.idle_timeout
        with queue.mutex:
            entries = queue.queue  # a deque; LIFO: the least recently returned come first
            while len(entries) > self.keep_idle and entries[0].info.get(_IDLE_SINCE, 0) <= limit:
                stale.append(entries.popleft())
        for record in stale:
            try:
                record.close()
            finally:
                self._dec_overflow()
                self.closed_idle += 1

    def lease_idle(self) -> ConnectionPoolEntry | None:
        """The entry of the connection on top of the idle ones, taken without SQLAlchemy's
        checkout (no proxy object, no checkout and checkin events, no reset by the pool), for a
        caller that runs one statement on it and hands it back with :meth:`give_back`.

        It is the same connection a checkout would get, checked the same way: its socket must
        be quiet (the socket check, :func:`install_socket_check`), and one due for recycling
        or invalidated with the pool is reopened. None, and the caller checks out as usual,
        when no connection is idle, when one needs more than that look (a readable socket, a
        reconnect that fails), or when this pool has no socket check or listeners besides it
        that would miss their events.
        """
        socket_of = _CHECKED.get(self)
        dispatch: Any = self.dispatch
        if socket_of is None or len(dispatch.checkout) != 1 or dispatch.checkin or dispatch.reset:
            return None
        try:
            record: Any = self._pool.get(False)
        except sqla_queue.Empty:
            return None
        if record.dbapi_connection is None or not _quiet(socket_of, record.dbapi_connection):
            self._pool.put(record, False)  # the usual checkout reconnects or pings
            return None
        try:
            record.get_connection()  # reopens one due for recycling or invalidated
        except Exception:
            _check_in(record)
            return None
        leased: ConnectionPoolEntry = record
        return leased

    def give_back(self, record: ConnectionPoolEntry, *, idle: bool = False) -> None:
        """Return an entry taken by :meth:`lease_idle`: rolled back (as the pool resets a
        returned connection; invalidated if that fails) and back on top of the idle ones.
        ``idle``: the caller knows no transaction is open on it (its statement ran in
        autocommit and returned), so there is nothing to roll back."""
        connection: Any = record.dbapi_connection
        if connection is not None and not idle:
            try:
                self._dialect.do_rollback(connection)
            except Exception as error:
                record.invalidate(error)
        _check_in(record)

    def resized(self, pool_size: int, max_overflow: int) -> ShrinkingQueuePool:
        """A new, empty pool like this one (events included) with other sizes."""
        sizes = (self._pool.maxsize, self._max_overflow)
        self._pool.maxsize, self._max_overflow = pool_size, max_overflow
        try:
            return self.recreate()
        finally:
            self._pool.maxsize, self._max_overflow = sizes

    def recreate(self) -> ShrinkingQueuePool:
        fresh = super().recreate()
        assert isinstance(fresh, ShrinkingQueuePool)
        fresh.idle_timeout = self.idle_timeout
        fresh.keep_idle = self.keep_idle
        fresh.grow_after = self.grow_after
        fresh.clock = self.clock
        fresh.refused = self.refused
        if self in _CHECKED:  # the checkout check's listener came along with the events
            _CHECKED[fresh] = _CHECKED[self]
        return fresh
