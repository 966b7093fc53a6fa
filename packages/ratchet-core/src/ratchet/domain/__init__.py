"""The pure domain of Ratchet: statuses, options, policies and values.

Nothing here performs I/O, reads a clock, or imports pluggy or SQLAlchemy; a test proves it.
"""

from __future__ import annotations

from ratchet.domain.lifecycle import (
    LIVE_STATUSES,
    TERMINAL_STATUSES,
    TRANSITIONS,
    IllegalTransition,
    JobPriority,
    JobStatus,
    check_transition,
    is_allowed,
)
from ratchet.domain.options import BackoffPolicy, JobOptions
from ratchet.domain.retry import DoNotRetry, RetryDecision, RetryPolicy, decide_retry, do_not_retry

__all__ = [
    "LIVE_STATUSES",
    "TERMINAL_STATUSES",
    "TRANSITIONS",
    "BackoffPolicy",
    "DoNotRetry",
    "IllegalTransition",
    "JobOptions",
    "JobPriority",
    "JobStatus",
    "RetryDecision",
    "RetryPolicy",
    "check_transition",
    "decide_retry",
    "do_not_retry",
    "is_allowed",
]
