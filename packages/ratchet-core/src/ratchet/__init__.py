"""Ratchet for Python: a persistent, database-backed job scheduler.

>>> from ratchet import Ratchet, JobPriority            # doctest: +SKIP
>>> app = Ratchet("sqlite:///jobs.db", allowed_modules=["myapp"])
>>> app.enqueue(myapp.jobs.send_welcome, 42).with_priority(JobPriority.HIGH).submit()

Only the pure domain is imported eagerly; the engine (SQLAlchemy) and pluggy load on first use of
a name that needs them, so ``import ratchet.domain`` stays free of I/O libraries.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ratchet._distribution import check_core
from ratchet.domain.authorization import AuthorizationRequest, JobAction, OwnerOnly, PermitAll
from ratchet.domain.breaker import BreakerProfile, BreakerState, CircuitOpenError, circuit_breaker
from ratchet.domain.errors import (
    ClassPolicyViolation,
    ConfigurationError,
    ConnectionLimitReached,
    DuplicateBusinessKeyError,
    DuplicateIdempotencyKeyError,
    EncryptionKeyNotFound,
    EncryptionUnavailable,
    FencedOut,
    InvalidJobArguments,
    InvalidJobOptions,
    InvalidJobTarget,
    InvalidPrincipal,
    JobNotFound,
    JobTimeoutError,
    LifecycleHookError,
    MissingClassPolicy,
    NotAuthorized,
    OutcomeNotStorable,
    PayloadDecodeError,
    PayloadDecryptionError,
    PayloadTooLargeError,
    RatchetError,
    ResultTooLargeError,
    SchemaNotReady,
    StoreUnavailable,
    TamperedEnvelope,
    UnknownJobTarget,
    UnknownStoreError,
    UnserializableArgument,
    UnsupportedEnvelopeVersion,
)
from ratchet.domain.lifecycle import JobPriority, JobStatus
from ratchet.domain.masking import MaskingPolicy
from ratchet.domain.misfire import RecurringMisfirePolicy
from ratchet.domain.model import JobFilter
from ratchet.domain.options import BackoffPolicy, JobOptions
from ratchet.domain.quartz import InvalidCronExpression, UnknownTimeZone
from ratchet.domain.recurring import RecurringRecord, RecurringStatus
from ratchet.domain.resources import ResourceLimit
from ratchet.domain.retention import DeadLetterFilter, JobLogLimits, RetentionSettings
from ratchet.domain.retry import DoNotRetry, RetryPolicy, do_not_retry
from ratchet.domain.workflow import (
    BatchContext,
    ConditionType,
    JobFailedError,
    JobResult,
    SignalDecision,
    SignalTimeoutError,
    WorkflowCondition,
)

if TYPE_CHECKING:
    import pluggy

    from ratchet.engine.app import Ratchet
    from ratchet.engine.batches import BatchChunkError, BatchHandle, StreamingBatchContext
    from ratchet.engine.builder import JobBuilder, JobHandle, UnsubmittedJobWarning
    from ratchet.engine.context import CancellationRequestedException, JobContext
    from ratchet.engine.recurring import RecurringHandle, RecurringJobBuilder
    from ratchet.events import EventKind, JobEvent

    hookimpl: pluggy.HookimplMarker

__version__ = "0.2.0"

# Fail here, in one line, if the installed ratchet-core is another project's or another version.
check_core(__version__)

_LAZY = {
    "Ratchet": "ratchet.engine.app",
    "JobBuilder": "ratchet.engine.builder",
    "JobHandle": "ratchet.engine.builder",
    "UnsubmittedJobWarning": "ratchet.engine.builder",
    "RecurringHandle": "ratchet.engine.recurring",
    "RecurringJobBuilder": "ratchet.engine.recurring",
    "JobContext": "ratchet.engine.context",
    "BatchChunkError": "ratchet.engine.batches",
    "BatchHandle": "ratchet.engine.batches",
    "StreamingBatchContext": "ratchet.engine.batches",
    "CancellationRequestedException": "ratchet.engine.context",
    "EventKind": "ratchet.events",
    "JobEvent": "ratchet.events",
}


def __getattr__(name: str) -> Any:
    if name == "hookimpl":
        import pluggy

        value: Any = pluggy.HookimplMarker("ratchet")
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'ratchet' has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = [
    "AuthorizationRequest",
    "BackoffPolicy",
    "BatchChunkError",
    "BatchContext",
    "BatchHandle",
    "BreakerProfile",
    "BreakerState",
    "CancellationRequestedException",
    "CircuitOpenError",
    "ClassPolicyViolation",
    "ConditionType",
    "ConfigurationError",
    "ConnectionLimitReached",
    "DeadLetterFilter",
    "DoNotRetry",
    "DuplicateBusinessKeyError",
    "DuplicateIdempotencyKeyError",
    "EncryptionKeyNotFound",
    "EncryptionUnavailable",
    "EventKind",
    "FencedOut",
    "InvalidCronExpression",
    "InvalidJobArguments",
    "InvalidJobOptions",
    "InvalidJobTarget",
    "InvalidPrincipal",
    "JobAction",
    "JobBuilder",
    "JobContext",
    "JobEvent",
    "JobFailedError",
    "JobFilter",
    "JobHandle",
    "JobLogLimits",
    "JobNotFound",
    "JobOptions",
    "JobPriority",
    "JobResult",
    "JobStatus",
    "JobTimeoutError",
    "LifecycleHookError",
    "MaskingPolicy",
    "MissingClassPolicy",
    "NotAuthorized",
    "OutcomeNotStorable",
    "OwnerOnly",
    "PayloadDecodeError",
    "PayloadDecryptionError",
    "PayloadTooLargeError",
    "PermitAll",
    "Ratchet",
    "RatchetError",
    "RecurringHandle",
    "RecurringJobBuilder",
    "RecurringMisfirePolicy",
    "RecurringRecord",
    "RecurringStatus",
    "ResourceLimit",
    "ResultTooLargeError",
    "RetentionSettings",
    "RetryPolicy",
    "SchemaNotReady",
    "SignalDecision",
    "SignalTimeoutError",
    "StoreUnavailable",
    "StreamingBatchContext",
    "TamperedEnvelope",
    "UnknownJobTarget",
    "UnknownStoreError",
    "UnknownTimeZone",
    "UnserializableArgument",
    "UnsubmittedJobWarning",
    "UnsupportedEnvelopeVersion",
    "WorkflowCondition",
    "circuit_breaker",
    "do_not_retry",
    "hookimpl",
]
