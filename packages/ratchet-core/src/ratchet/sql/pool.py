"""Check pooled connections that sat idle, and only those.

SQLAlchemy's ``pool_pre_ping`` sends a round trip before *every* checkout; a busy worker checks
out a connection for every claim and every outcome batch, so that doubles its round trips. A
connection that was in use a moment ago is as good as a ping, and a server that died since is
caught by the statement itself (the store maps the error to ``StoreUnavailable`` and the worker
backs off and reconnects). So a connection is pinged on checkout only after it sat idle in the
pool for ``idle_seconds``: the case where a restart or a network drop goes unnoticed.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import event, exc
from sqlalchemy.engine import Engine

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
