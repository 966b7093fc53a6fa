"""Callbacks that wait for a caller's SQLAlchemy transaction to end (``TransactionalStore``).

``submit(connection=...)`` writes in the caller's transaction, so what follows the submission
(events, wakeups) must wait for the caller's commit and never happen if it rolls back. The
caller's object is a ``Connection`` or an ORM ``Session``; listeners on its ``commit`` /
``rollback`` events (``after_commit`` / ``after_rollback`` for a Session) drain what is pending
for it.

A transaction that another framework owns (Django's ``transaction.atomic()``) is joined through an
:class:`ExternalTransaction`: the SQLAlchemy connection that writes on that framework's database
connection, and the framework's own after-commit hook.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

Callback = Callable[[], None]


@dataclass(frozen=True)
class ExternalTransaction:
    """A transaction owned by another framework that ``submit(connection=...)`` joins.

    ``connection`` writes in that transaction (the framework commits or rolls it back, never
    SQLAlchemy); ``on_commit`` registers a callback the framework calls after its commit and
    drops on a rollback; ``on_rollback``, when the framework has such a hook, likewise.
    """

    connection: Connection
    on_commit: Callable[[Callback], None]
    on_rollback: Callable[[Callback], None] | None = None


def caller_connection(caller: Any) -> Connection:
    """The SQLAlchemy ``Connection`` a submission that joins ``caller`` writes on (a
    ``Connection``, an ORM ``Session`` or an :class:`ExternalTransaction`)."""
    if isinstance(caller, Session):
        return caller.connection()
    if isinstance(caller, ExternalTransaction):
        return caller.connection
    return caller  # type: ignore[no-any-return]


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
        if isinstance(connection, ExternalTransaction):
            connection.on_commit(callback)
            if on_rollback is not None and connection.on_rollback is not None:
                connection.on_rollback(on_rollback)
            return
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
