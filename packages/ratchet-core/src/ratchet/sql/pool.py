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


_CHECKED: weakref.WeakSet[Any] = weakref.WeakSet()


def has_socket_check(engine: Engine) -> bool:
    """Whether ``engine``'s pool checks connections on checkout (see the module docstring)."""
    return engine.pool in _CHECKED


def install_socket_check(engine: Engine, socket_of: SocketOf) -> None:
    """Check pooled connections on checkout by their socket, pinging only if it is readable."""
    _CHECKED.add(engine.pool)

    @event.listens_for(engine, "checkout")
    def _check(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        try:
            fd = socket_of(dbapi_conn)
            if fd is not None and not select.select([fd], [], [], 0)[0]:
                return  # nothing pending: the session is as the server left it
        except Exception:
            fd = None
        if fd is not None and _ping(engine, dbapi_conn):
            return
        log.info("pooled connection is gone (server restarted or closed it); reconnecting")
        raise exc.InvalidatePoolError()


def _ping(engine: Engine, dbapi_conn: Any) -> bool:
    """A real round trip (something was waiting on the socket: a notice, or the goodbye)."""
    try:
        return bool(engine.dialect.do_ping(dbapi_conn))
    except Exception:
        return False
