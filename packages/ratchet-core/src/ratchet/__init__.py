"""Ratchet for Python: a persistent, database-backed job scheduler.

>>> from ratchet import Ratchet, JobPriority            # doctest: +SKIP
>>> app = Ratchet("sqlite:///jobs.db", allowed_modules=["myapp"])
>>> app.enqueue(myapp.jobs.send_welcome, 42).with_priority(JobPriority.HIGH).submit()
"""

from __future__ import annotations

import pluggy

hookimpl = pluggy.HookimplMarker("ratchet")

from ratchet.domain.errors import (  # noqa: E402
    ClassPolicyViolation,
    ConfigurationError,
    DuplicateBusinessKeyError,
    DuplicateIdempotencyKeyError,
    FencedOut,
    InvalidJobOptions,
    InvalidJobTarget,
    JobNotFound,
    MissingClassPolicy,
    PayloadTooLargeError,
    RatchetError,
    ResultTooLargeError,
    StoreUnavailable,
    UnknownJobTarget,
    UnknownStoreError,
    UnserializableArgument,
)
from ratchet.domain.lifecycle import JobPriority, JobStatus  # noqa: E402
from ratchet.domain.model import JobFilter  # noqa: E402
from ratchet.domain.options import BackoffPolicy, JobOptions  # noqa: E402
from ratchet.domain.retry import DoNotRetry, RetryPolicy, do_not_retry  # noqa: E402
from ratchet.engine.app import Ratchet  # noqa: E402
from ratchet.engine.builder import JobBuilder, JobHandle, UnsubmittedJobWarning  # noqa: E402
from ratchet.engine.context import JobContext  # noqa: E402
from ratchet.events import EventKind, JobEvent  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "BackoffPolicy",
    "ClassPolicyViolation",
    "ConfigurationError",
    "DoNotRetry",
    "DuplicateBusinessKeyError",
    "DuplicateIdempotencyKeyError",
    "EventKind",
    "FencedOut",
    "InvalidJobOptions",
    "InvalidJobTarget",
    "JobBuilder",
    "JobContext",
    "JobEvent",
    "JobFilter",
    "JobHandle",
    "JobNotFound",
    "JobOptions",
    "JobPriority",
    "JobStatus",
    "MissingClassPolicy",
    "PayloadTooLargeError",
    "Ratchet",
    "RatchetError",
    "ResultTooLargeError",
    "RetryPolicy",
    "StoreUnavailable",
    "UnknownJobTarget",
    "UnknownStoreError",
    "UnserializableArgument",
    "UnsubmittedJobWarning",
    "do_not_retry",
    "hookimpl",
]
