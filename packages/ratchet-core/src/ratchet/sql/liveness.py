"""A checkout liveness check that costs no round trip while the connection is healthy.

SQLAlchemy's ``pool_pre_ping`` sends a query on every checkout: for one short transaction (a
single submit) that is one round trip in four. A pooled connection sits idle between checkouts,
so nothing should be waiting on its socket. When the server ends the session (a restart, a
shutdown, an idle timeout, a killed backend) it sends a last message and closes the socket, which
makes the socket readable. So the check looks at the socket without blocking, and only when
something is there pings for real; a failed ping invalidates the pool as ``pool_pre_ping`` does,
and SQLAlchemy checks out a fresh connection.
"""

from __future__ import annotations

import logging
import select
import weakref
from collections.abc import Callable
from typing import Any

from sqlalchemy import event, exc
from sqlalchemy.engine import Engine

log = logging.getLogger("ratchet.store")

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
