"""Retry decisions and backoff (pure): what happens to an attempt that raised."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

from ratchet.domain.options import MAX_BACKOFF, BackoffPolicy

_E = TypeVar("_E", bound=type[BaseException])
_MARK = "__ratchet_do_not_retry__"


def do_not_retry(exc_type: _E) -> _E:
    """Class decorator: an exception of this type (or a subclass) sends the job to the DLQ."""
    setattr(exc_type, _MARK, True)
    return exc_type


class DoNotRetry(Exception):
    """Base class alternative to :func:`do_not_retry`: raise a subclass to skip retries."""


setattr(DoNotRetry, _MARK, True)


def is_do_not_retry(exc: BaseException) -> bool:
    """True when the exception's class or any class in its MRO is marked do-not-retry."""
    return any(vars(klass).get(_MARK, False) for klass in type(exc).__mro__)


class RetryPolicy(Protocol):
    """A pluggable policy consulted after ``@do_not_retry`` and before ``max_retries``."""

    def should_retry(self, attempt: int, exc: BaseException) -> bool:
        """Whether a failure on this (1-based) attempt may be retried at all."""
        ...

    def delay(self, attempt: int) -> timedelta | None:
        """A delay overriding the job's backoff, or None to use the backoff."""
        ...


class DefaultRetryPolicy:
    """Always allows a retry and leaves the delay to the job's backoff."""

    def should_retry(self, attempt: int, exc: BaseException) -> bool:
        return True

    def delay(self, attempt: int) -> timedelta | None:
        return None


def backoff_delay(policy: BackoffPolicy, base: timedelta, attempt: int) -> timedelta:
    """Delay before the retry that follows failed attempt number ``attempt`` (1-based).

    NONE is zero, FIXED is ``base``, EXPONENTIAL is ``base * 2**(attempt-1)``; every delay is capped
    at 24 hours.
    """
    if attempt < 1:
        raise ValueError(f"attempt is 1-based, got {attempt}")
    if policy is BackoffPolicy.NONE:
        return timedelta(0)
    if policy is BackoffPolicy.FIXED:
        return min(base, MAX_BACKOFF)
    if base <= timedelta(0):
        return timedelta(0)
    exponent = min(attempt - 1, 40)  # 2**40 microseconds already exceed 24 hours
    if 2**exponent > MAX_BACKOFF // base:
        return MAX_BACKOFF
    return base * (1 << exponent)


@dataclass(frozen=True)
class RetryDecision:
    """What to do with a failed attempt: retry at ``retry_at``, or dead-letter."""

    retry: bool
    retry_at: datetime | None
    reason: str

    @property
    def dead_letter(self) -> bool:
        return not self.retry


def decide_retry(
    *,
    attempt: int,
    max_retries: int,
    exc: BaseException,
    now: datetime,
    backoff: BackoffPolicy,
    backoff_base: timedelta,
    policy: RetryPolicy | None = None,
) -> RetryDecision:
    """Decide the fate of a failed attempt (1-based ``attempt`` counts this failure).

    Order: ``@do_not_retry`` anywhere in the exception's MRO -> DLQ; the retry policy's
    ``should_retry`` -> DLQ when False; ``attempt <= max_retries`` -> retry; else DLQ.
    """
    if is_do_not_retry(exc):
        return RetryDecision(False, None, f"{type(exc).__name__} is marked do-not-retry")
    policy = policy or DefaultRetryPolicy()
    if not policy.should_retry(attempt, exc):
        return RetryDecision(False, None, "the retry policy refused a retry")
    if attempt > max_retries:
        return RetryDecision(False, None, f"attempt {attempt} exhausted max_retries={max_retries}")
    custom = policy.delay(attempt)
    use_custom = custom is not None and custom > timedelta(0)
    delay = (
        custom
        if use_custom and custom is not None
        else backoff_delay(backoff, backoff_base, attempt)
    )
    return RetryDecision(True, now + delay, f"retry {attempt} of {max_retries}")
