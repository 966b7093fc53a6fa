"""Batches, chains, workflow conditions and signals as values (pure: no I/O, no imports of
user code; a resolver for stored ``module:qualname`` references is passed in).

Condition types (docs/workflows.md): SUCCESS, FAILURE, CUSTOM (predicate on :class:`JobResult`),
RESULT_VALUE (predicate on the parent's decoded return value), BATCH_SUCCESS, BATCH_FAILURE,
BATCH_SUCCESS_RATE, BATCH_FAILURE_COUNT and BATCH_CUSTOM (predicate on :class:`BatchContext`).
"""

from __future__ import annotations

import enum
import json
import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ratchet.domain.errors import ClassPolicyViolation, InvalidJobOptions, RatchetError

#: Longest signal key (printable ASCII), as the ``signal_key`` column holds.
MAX_SIGNAL_KEY_LENGTH = 255


class JobType(enum.StrEnum):
    """The role of a job in a flow (persisted; NULL in the database means SINGLE)."""

    SINGLE = "SINGLE"
    BATCH_PARENT = "BATCH_PARENT"
    BATCH_CHILD = "BATCH_CHILD"
    CHAIN_STEP = "CHAIN_STEP"
    WORKFLOW_BRANCH = "WORKFLOW_BRANCH"


class ConditionType(enum.StrEnum):
    """The nine workflow condition types."""

    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    CUSTOM = "CUSTOM"
    RESULT_VALUE = "RESULT_VALUE"
    BATCH_SUCCESS = "BATCH_SUCCESS"
    BATCH_FAILURE = "BATCH_FAILURE"
    BATCH_SUCCESS_RATE = "BATCH_SUCCESS_RATE"
    BATCH_FAILURE_COUNT = "BATCH_FAILURE_COUNT"
    BATCH_CUSTOM = "BATCH_CUSTOM"

    @property
    def is_batch(self) -> bool:
        """Whether the condition reads a :class:`BatchContext` (only valid on a batch)."""
        return self.value.startswith("BATCH_")


class WorkflowError(RatchetError):
    """A workflow, batch or signal operation could not be carried out."""


class SignalTimeoutError(RatchetError):
    """A job waiting for a signal was not signalled before its timeout.

    It goes through the normal retry decision (``@do_not_retry`` is not set): with retries left
    the job waits for the signal again, otherwise it fails (the DLQ).
    """


class JobFailedError(RatchetError):
    """The recorded error of a failed job, as handed to ``on_failure`` callbacks.

    :ivar job_id: the job that failed.
    :ivar description: the stored error text (``module.Type: message``).
    """

    def __init__(self, job_id: object, description: str | None) -> None:
        super().__init__(description or "the job failed")
        self.job_id = job_id
        self.description = description or ""

    @property
    def error_type(self) -> str:
        """The exception type recorded in the description (``module.Type``)."""
        return self.description.partition(":")[0]


@dataclass(frozen=True)
class WorkflowCondition:
    """When a branch fires. Build one with the class methods (``success()``, ...).

    ``expression`` is the stored form: a ``module:qualname`` reference for CUSTOM, RESULT_VALUE
    and BATCH_CUSTOM, a number for BATCH_SUCCESS_RATE / BATCH_FAILURE_COUNT, else None.
    Lower ``priority`` is evaluated first; equal priorities keep definition order.
    """

    type: ConditionType
    expression: str | float | int | None = None
    priority: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.priority, int) or isinstance(self.priority, bool):
            raise InvalidJobOptions(f"condition priority must be an int, got {self.priority!r}")
        t = self.type
        if t is ConditionType.BATCH_SUCCESS_RATE:
            rate = self.expression
            if (
                not isinstance(rate, (int, float))
                or isinstance(rate, bool)
                or not math.isfinite(rate)
                or not 0.0 <= rate <= 1.0
            ):
                raise InvalidJobOptions(f"success rate must be within 0.0..1.0, got {rate!r}")
        elif t is ConditionType.BATCH_FAILURE_COUNT:
            n = self.expression
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise InvalidJobOptions(f"failure count must be an int >= 0, got {n!r}")
        elif t in (
            ConditionType.CUSTOM,
            ConditionType.RESULT_VALUE,
            ConditionType.BATCH_CUSTOM,
        ) and (not isinstance(self.expression, str) or ":" not in self.expression):
            raise InvalidJobOptions(
                f"{t.value} needs a stored predicate reference, got {self.expression!r}"
            )

    # -- factories (predicates are passed already stored, as ``module:qualname``) -----------
    @classmethod
    def success(cls, priority: int = 0) -> WorkflowCondition:
        """The parent succeeded."""
        return cls(ConditionType.SUCCESS, None, priority)

    @classmethod
    def failure(cls, priority: int = 0) -> WorkflowCondition:
        """The parent failed for good (after its retries)."""
        return cls(ConditionType.FAILURE, None, priority)

    @classmethod
    def batch_success(cls, priority: int = 0) -> WorkflowCondition:
        """Every child of the batch succeeded."""
        return cls(ConditionType.BATCH_SUCCESS, None, priority)

    @classmethod
    def batch_failure(cls, priority: int = 0) -> WorkflowCondition:
        """At least one child of the batch failed (or was canceled)."""
        return cls(ConditionType.BATCH_FAILURE, None, priority)

    @classmethod
    def success_rate(cls, rate: float, priority: int = 0) -> WorkflowCondition:
        """``BatchContext.success_rate >= rate`` once the batch completed."""
        return cls(ConditionType.BATCH_SUCCESS_RATE, rate, priority)

    @classmethod
    def failure_count(cls, n: int, priority: int = 0) -> WorkflowCondition:
        """The batch's failed children reached ``n``: ``failed >= n`` (see docs/workflows.md)."""
        return cls(ConditionType.BATCH_FAILURE_COUNT, n, priority)

    def to_json(self) -> str | None:
        """The stored ``condition_expression``."""
        return None if self.expression is None else json.dumps(self.expression)

    @classmethod
    def from_row(cls, type_: str, expression: str | None, priority: int) -> WorkflowCondition:
        """Inverse of :meth:`to_json` with the stored type and priority."""
        value = None if expression is None else json.loads(expression)
        return cls(ConditionType(type_), value, priority)


@dataclass(frozen=True)
class JobResult:
    """How a parent job ended, as predicates see it.

    ``value`` is the decoded JSON result (None on failure); ``error`` the recorded error text
    (None on success).
    """

    job_id: Any
    success: bool
    value: Any = None
    error: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def is_success(self) -> bool:
        return self.success

    @property
    def is_failure(self) -> bool:
        return not self.success

    @property
    def execution_time_ms(self) -> int | None:
        """Duration of the last attempt in milliseconds (None when unknown)."""
        if self.started_at is None or self.finished_at is None:
            return None
        return int((self.finished_at - self.started_at).total_seconds() * 1000)

    @property
    def execution_time_ms_or_zero(self) -> int:
        return self.execution_time_ms or 0


@dataclass(frozen=True)
class BatchContext:
    """Progress of a batch. ``completed`` counts children that succeeded, ``failed`` those that
    failed for good or were canceled; ``total`` grows while a streaming batch is still reading
    (``sealed`` is False until the stream ended)."""

    batch_id: Any
    name: str
    total: int
    completed: int
    failed: int
    sealed: bool = True

    @property
    def processed(self) -> int:
        """Children that reached a terminal status."""
        return self.completed + self.failed

    @property
    def percent_done(self) -> float:
        """0..100 (100 for an empty sealed batch)."""
        if self.total == 0:
            return 100.0 if self.sealed else 0.0
        return 100.0 * self.processed / self.total

    @property
    def success_rate(self) -> float:
        """Successes over processed children, 0.0..1.0 (1.0 before any child ended)."""
        return 1.0 if self.processed == 0 else self.completed / self.processed

    @property
    def is_complete(self) -> bool:
        """Every child ended and no more children can come."""
        return self.sealed and self.processed >= self.total

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_id": str(self.batch_id),
            "name": self.name,
            "total": self.total,
            "completed": self.completed,
            "failed": self.failed,
        }


class SignalOutcome(enum.StrEnum):
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"


@dataclass(frozen=True)
class SignalDecision:
    """An approval or rejection delivered to a waiting job. A rejection still releases the job:
    the job decides what to do (``JobContext.signal()`` returns the decision)."""

    outcome: SignalOutcome
    reason: str | None = None
    payload: Any = None

    @classmethod
    def approved(cls, reason: str | None = None, payload: Any = None) -> SignalDecision:
        return cls(SignalOutcome.APPROVED, reason, payload)

    @classmethod
    def rejected(cls, reason: str | None = None, payload: Any = None) -> SignalDecision:
        return cls(SignalOutcome.REJECTED, reason, payload)

    @property
    def is_approved(self) -> bool:
        return self.outcome is SignalOutcome.APPROVED

    @property
    def is_rejected(self) -> bool:
        return self.outcome is SignalOutcome.REJECTED

    @property
    def rejection_reason(self) -> str | None:
        return self.reason if self.is_rejected else None


def validate_signal_key(key: str) -> str:
    """Trim and check a signal key: 1..255 printable ASCII characters.

    :raises InvalidJobOptions: not a string, blank, too long or not printable ASCII.
    """
    if not isinstance(key, str):
        raise InvalidJobOptions(f"signal key must be a string, got {type(key).__name__}")
    trimmed = key.strip()
    if not trimmed:
        raise InvalidJobOptions("signal key must not be blank")
    if len(trimmed) > MAX_SIGNAL_KEY_LENGTH:
        raise InvalidJobOptions(
            f"signal key is {len(trimmed)} characters; at most {MAX_SIGNAL_KEY_LENGTH} allowed"
        )
    if any(not " " <= c <= "~" for c in trimmed):
        raise InvalidJobOptions("signal key must be printable ASCII (U+0020..U+007E)")
    return trimmed


Resolver = Callable[[str], Callable[..., Any]]
"""Turns a stored ``module:qualname`` predicate reference into the callable."""

EnumClassResolver = Callable[[str], type[enum.Enum]]
"""Turns a stored enum class reference into the class."""


def refuse_reference(ref: str) -> Any:
    """A resolver for writers that were given none: refuses every reference, imports nothing.

    :raises ClassPolicyViolation: always.
    """
    raise ClassPolicyViolation(
        f"the stored reference {ref} was not resolved: no resolver under a class policy was "
        "passed to this write; it was not imported"
    )


def _as_stored(text: str | None) -> str | None:
    """The stored text as it is (results stored unencrypted)."""
    return text


@dataclass(frozen=True)
class FlowResolver:
    """The code a write that ends jobs may run while it evaluates branch conditions.

    The engine builds it under its class policy and passes it, as an argument, to each store
    call that can end a job (the store never resolves a stored reference on its own). The
    default refuses every reference: predicates then count as not matched and results holding
    enum members are seen undecoded.
    """

    predicate: Resolver = refuse_reference
    """A CUSTOM, RESULT_VALUE or BATCH_CUSTOM predicate reference -> the callable."""
    enum: EnumClassResolver = refuse_reference
    """An enum class named in a parent's stored result -> the class (to decode the value that
    predicates see)."""
    reveal: Callable[[str | None], str | None] = _as_stored
    """A parent's stored result -> its plain JSON (opens an encrypted result; raises when it
    cannot, and the predicates then see the stored text)."""


class EffectKind(enum.StrEnum):
    """What the caller must do after the transaction that ended jobs committed."""

    ON_SUCCESS = "on_success"
    ON_FAILURE = "on_failure"
    BATCH_PROGRESS = "batch_progress"
    BATCH_COMPLETED = "batch_completed"
    CHAIN_COMPLETED = "chain_completed"
    CHAIN_FAILED = "chain_failed"
    BRANCH_TRIGGERED = "branch_triggered"
    CONDITION_FAILED = "condition_failed"
    RELEASED = "released"
    SIGNAL_TIMED_OUT = "signal_timed_out"


@dataclass(frozen=True)
class FlowEffect:
    """One after-commit action, returned by the store call whose write caused it.

    ``source`` is the job whose write caused it (the outcome's job for cascades).
    """

    kind: EffectKind
    job_id: uuid.UUID | None
    source: uuid.UUID | None
    target: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    batch: BatchContext | None = None


@dataclass(frozen=True)
class StoredCondition:
    """A condition row: the branch job it guards and its place in evaluation order."""

    child_job_id: Any
    condition: WorkflowCondition
    definition_order: int
    first_match: bool = False
    description: str | None = None


def evaluate(
    condition: WorkflowCondition,
    result: JobResult,
    batch: BatchContext | None,
    resolve: Resolver,
) -> bool:
    """Whether ``condition`` holds for a parent that ended with ``result``.

    Batch conditions are False on a non-batch parent. Predicates must return a bool-like value;
    exceptions propagate (the caller logs them and treats the branch as not matched).
    """
    t = condition.type
    if t is ConditionType.SUCCESS:
        return result.success
    if t is ConditionType.FAILURE:
        return not result.success
    if t is ConditionType.CUSTOM:
        return bool(resolve(str(condition.expression))(result))
    if t is ConditionType.RESULT_VALUE:
        return result.success and bool(resolve(str(condition.expression))(result.value))
    if batch is None:
        return False
    if t is ConditionType.BATCH_SUCCESS:
        return batch.failed == 0
    if t is ConditionType.BATCH_FAILURE:
        return batch.failed > 0
    if t is ConditionType.BATCH_SUCCESS_RATE:
        return batch.success_rate >= float(condition.expression or 0.0)
    if t is ConditionType.BATCH_FAILURE_COUNT:
        return batch.failed >= int(condition.expression or 0)
    return bool(resolve(str(condition.expression))(batch))  # BATCH_CUSTOM


def evaluation_order(conditions: Sequence[StoredCondition]) -> list[StoredCondition]:
    """Priority (lower first), then definition order."""
    return sorted(conditions, key=lambda c: (c.condition.priority, c.definition_order))


def select_branches(
    conditions: Sequence[StoredCondition],
    result: JobResult,
    batch: BatchContext | None,
    resolve: Resolver,
    on_error: Callable[[StoredCondition, Exception], None] | None = None,
) -> tuple[list[StoredCondition], list[StoredCondition]]:
    """Split branches into (fire, skip): fan-out by default, only the first match when the
    parent was built with ``first_match``. A raising predicate counts as not matched."""
    fire: list[StoredCondition] = []
    skip: list[StoredCondition] = []
    for stored in evaluation_order(conditions):
        if fire and stored.first_match:
            skip.append(stored)
            continue
        try:
            matched = evaluate(stored.condition, result, batch, resolve)
        except Exception as exc:
            if on_error is not None:
                on_error(stored, exc)
            matched = False
        (fire if matched else skip).append(stored)
    return fire, skip
