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
    TIMED_OUT = "execution_timed_out"
    """An attempt ran past its deadline or stopped on its cancellation request (``data``:
    ``executionTimeout``, ``elapsed``, ``attempt``). FAILED and RETRYING/DEAD_LETTERED follow."""
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
    # -- liveness and the watcher (docs/clustering.md) -----------------------------------------
    NODE_DEAD = "node_dead"
    """A silent node incarnation was marked DEAD (``data``: node; no job)."""
    STALLED = "job_stalled"
    """The watcher made jobs TIMED_OUT or put reservations back (``data``: stalled, orphaned,
    revoked counts; no job)."""
    TAKEN_OVER = "job_taken_over"
    """This node took a TIMED_OUT job over (``data``: epoch, takeovers)."""
    REVIVED = "job_revived"
    """The owner's progress brought its TIMED_OUT job back to RUNNING (``data``: epoch)."""
    BULK_CANCELLED = "bulk_cancelled"
    BULK_RETRIED = "bulk_retried"
    BREAKER_STATE_CHANGED = "breaker_state_changed"
    """A circuit breaker changed state; ``data``: service, old, new (no job)."""
    # -- batches, chains, workflows, callbacks and signals (docs/workflows.md) ----------------
    CALLBACK_FAILED = "job_callback_failed"
    """An ``on_success`` / ``on_failure`` callback or a batch progress hook raised; the job's
    outcome stands (``data``: callback, target, error)."""
    BATCH_COMPLETED = "batch_completed"
    """Every child of a batch ended (exactly once; ``data``: total, completed, failed)."""
    BATCH_CHUNK_FAILED = "batch_chunk_failed"
    """A streaming batch chunk could not be read or inserted; the batch is canceled."""
    CHAIN_STARTED = "chain_started"
    CHAIN_COMPLETED = "chain_completed"
    CHAIN_FAILED = "chain_failed"
    """A chain step failed for good; its downstream steps are canceled (``data``: step, error)."""
    WORKFLOW_BRANCH_TRIGGERED = "workflow_branch_triggered"
    """A branch's condition held and its job was released (``data``: parent, condition)."""
    WORKFLOW_CONDITION_FAILED = "workflow_condition_failed"
    """A predicate raised or could not be imported; its branch does not fire."""
    SIGNAL_WAITING = "signal_waiting"
    SIGNALED = "signaled"
    BULK_SIGNALED = "bulk_signaled"
    """Jobs waiting on a signal key were released (``data``: key, count; no job)."""
    SIGNAL_TIMED_OUT = "signal_timed_out"
    """A signal wait timed out (``data``: attempt, retry, error)."""


@dataclass(frozen=True)
class JobEvent:
    """One event. ``job_id`` is None for bulk events, which carry ``count`` in ``data``."""

    kind: EventKind
    job_id: uuid.UUID | None
    at: datetime
    node_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
