"""Callbacks that wait for a caller's SQLAlchemy transaction to end (``TransactionalStore``).

``submit(connection=...)`` writes in the caller's transaction, so what follows the submission
(events, wakeups) must wait for the caller's commit and never happen if it rolls back. The
caller's object is a ``Connection`` or an ORM ``Session``; listeners on its ``commit`` /
``rollback`` events (``after_commit`` / ``after_rollback`` for a Session) drain what is pending
for it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session

Callback = Callable[[], None]


class CallerTransactions:
    """Pending callbacks per caller connection or session, for one store.

    One pair of listeners per object drains a pending list kept for that object (listeners
    cannot be removed while SQLAlchemy dispatches them); the list is held weakly by the object,
    so it goes with it. Not ``Connection.info``: that belongs to the pooled DBAPI connection and
    outlives the Connection and its listeners.
    """

    def __init__(self) -> None:
        self._pending: weakref.WeakKeyDictionary[Any, list[tuple[Callback, Callback | None]]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def after_commit(
        self, connection: Any, callback: Callback, on_rollback: Callback | None = None
    ) -> None:
        """Call ``callback`` once the transaction open on ``connection`` commits; if it rolls
        back instead, forget it (and call ``on_rollback``). Each runs at most once, in the
        order registered, on the thread that ends the transaction."""
        with self._lock:
            pending = self._pending.get(connection)
            if pending is None:
                pending = self._pending[connection] = []
                _listen(connection, pending)
            pending.append((callback, on_rollback))


def _listen(connection: Any, pending: list[tuple[Callback, Callback | None]]) -> None:
    def on_commit(*args: Any) -> None:
        taken = list(pending)
        pending.clear()
        for committed, _dropped in taken:
            committed()

    def on_rollback(*args: Any) -> None:
        taken = list(pending)
        pending.clear()
        for _committed, dropped in taken:
            if dropped is not None:
                dropped()

    is_session = isinstance(connection, Session)
    event.listen(connection, "after_commit" if is_session else "commit", on_commit)
    event.listen(connection, "after_rollback" if is_session else "rollback", on_rollback)
