"""Job statuses, priorities and the transition table (docs/lifecycle.md).

The table is data: every store write names its source and target status and is checked
against :data:`TRANSITIONS`, so an illegal move fails loudly instead of corrupting a job.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


class JobStatus(enum.StrEnum):
    """Where a job is in its life. Persisted by name."""

    PENDING = "PENDING"
    """Waiting; claimable once its scheduled time has come."""
    QUEUED = "QUEUED"
    """Claimed by a node and waiting there for a free slot."""
    RUNNING = "RUNNING"
    """Executing on its owner node."""
    TIMED_OUT = "TIMED_OUT"
    """Its owner stopped making progress; it may revive it, or another node take it over."""
    WAITING = "WAITING"
    """Waiting for an external signal."""
    PAUSED = "PAUSED"
    """Paused by an operator; remembers the status it came from."""
    SUCCEEDED = "SUCCEEDED"
    """Finished normally. Terminal."""
    FAILED = "FAILED"
    """Failed for good: the dead-letter queue. Terminal (an operator may retry it)."""
    CANCELED = "CANCELED"
    """Canceled. Terminal."""

    @property
    def is_terminal(self) -> bool:
        """True for SUCCEEDED, FAILED and CANCELED."""
        return self in TERMINAL_STATUSES

    @property
    def is_live(self) -> bool:
        """True while the job has a row in the hot queue table."""
        return self not in TERMINAL_STATUSES


TERMINAL_STATUSES: frozenset[JobStatus] = frozenset(
    {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED}
)
LIVE_STATUSES: frozenset[JobStatus] = frozenset(JobStatus) - TERMINAL_STATUSES


class JobPriority(enum.IntEnum):
    """Base priority of a job. The ordinals are persisted: never reorder them."""

    LOWEST = 0
    LOW = 1
    NORMAL = 2
    HIGH = 3
    CRITICAL = 4


_S = JobStatus

#: Every allowed (source, target) move. A retry is RUNNING -> PENDING; an operator's retry of a
#: dead-lettered job is FAILED -> PENDING. Creation is modelled as a move from ``None``. The owner
#: of a TIMED_OUT job may still finish it during its grace (TIMED_OUT -> SUCCEEDED). A job that
#: misses its schedule-to-start deadline fails without running (PENDING -> FAILED).
TRANSITIONS: frozenset[tuple[JobStatus | None, JobStatus]] = frozenset(
    {
        (None, _S.PENDING),
        (None, _S.WAITING),
        (_S.PENDING, _S.QUEUED),
        (_S.PENDING, _S.RUNNING),
        (_S.PENDING, _S.PAUSED),
        (_S.PENDING, _S.CANCELED),
        (_S.PENDING, _S.FAILED),
        (_S.QUEUED, _S.RUNNING),
        (_S.QUEUED, _S.PENDING),
        (_S.QUEUED, _S.CANCELED),
        (_S.RUNNING, _S.SUCCEEDED),
        (_S.RUNNING, _S.FAILED),
        (_S.RUNNING, _S.PENDING),
        (_S.RUNNING, _S.TIMED_OUT),
        (_S.RUNNING, _S.CANCELED),
        (_S.TIMED_OUT, _S.RUNNING),
        (_S.TIMED_OUT, _S.SUCCEEDED),
        (_S.TIMED_OUT, _S.PENDING),
        (_S.TIMED_OUT, _S.FAILED),
        (_S.TIMED_OUT, _S.CANCELED),
        (_S.WAITING, _S.PENDING),
        (_S.WAITING, _S.FAILED),
        (_S.WAITING, _S.CANCELED),
        (_S.PAUSED, _S.PENDING),
        (_S.PAUSED, _S.CANCELED),
        (_S.FAILED, _S.PENDING),
    }
)


class IllegalTransition(ValueError):
    """A move that the transition table does not allow."""

    def __init__(self, source: JobStatus | None, target: JobStatus) -> None:
        name = source.value if source is not None else "(new)"
        super().__init__(f"illegal job status transition {name} -> {target.value}")
        self.source = source
        self.target = target


def is_allowed(source: JobStatus | None, target: JobStatus) -> bool:
    """Whether the table allows moving from ``source`` to ``target``."""
    return (source, target) in TRANSITIONS


def check_transition(source: JobStatus | None, target: JobStatus) -> None:
    """Raise :class:`IllegalTransition` unless the move is allowed."""
    if not is_allowed(source, target):
        raise IllegalTransition(source, target)


def sources_of(
    target: JobStatus, among: Iterable[JobStatus] | None = None
) -> tuple[JobStatus, ...]:
    """The statuses a job may move to ``target`` from (optionally limited to ``among``).

    Stores use this to build the ``status IN (...)`` guard of a conditional update.
    """
    allowed = {s for (s, t) in TRANSITIONS if t is target and s is not None}
    if among is not None:
        allowed &= set(among)
    return tuple(sorted(allowed, key=lambda s: s.value))
