"""Jobs submitted in a SQLAlchemy ``Session``'s transaction, for any framework."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from ratchet.engine.app import Ratchet
    from ratchet.engine.builder import JobBuilder, JobHandle


@dataclass(frozen=True)
class SessionJobs:
    """Submits jobs in ``session``'s transaction: they exist once it commits and never if it
    rolls back. The session must be bound to the database of ``app``'s store."""

    app: Ratchet
    session: Session

    def enqueue(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> JobHandle:
        """Submit ``fn(*args, **kwargs)`` as a job due now."""
        return self.app.enqueue(fn, *args, **kwargs).submit(connection=self.session)

    def submit(self, builder: JobBuilder) -> JobHandle:
        """Submit a builder made with ``app.enqueue`` / ``app.schedule`` and its options."""
        return builder.submit(connection=self.session)
