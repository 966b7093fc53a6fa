"""Job lifecycle events, delivered to observer hooks and listeners after commit."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class EventKind(enum.StrEnum):
    """What happened to a job."""

    SUBMITTED = "submitted"
    STARTED = "started"
    COMPLETED = "completed"
    FAILED = "failed"
    """Any failed attempt (a retry or the DLQ follows)."""
    RETRYING = "retrying"
    DEAD_LETTERED = "dead_lettered"
    RESCHEDULED = "rescheduled"
    CANCELLED = "cancelled"
    PAUSED = "paused"
    RESUMED = "resumed"
    RETRIED_BY_OPERATOR = "retried_by_operator"
    REPLACED = "replaced"
    FENCED_OUT = "fenced_out"
    RECOVERED = "recovered"
    """A job of a dead node went back to PENDING."""
    BULK_CANCELLED = "bulk_cancelled"
    BULK_RETRIED = "bulk_retried"
    BREAKER_STATE_CHANGED = "breaker_state_changed"
    """A circuit breaker changed state; ``data``: service, old, new (no job)."""


@dataclass(frozen=True)
class JobEvent:
    """One event. ``job_id`` is None for bulk events, which carry ``count`` in ``data``."""

    kind: EventKind
    job_id: uuid.UUID | None
    at: datetime
    node_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
