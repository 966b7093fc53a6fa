"""The watchdog's plan for one attempt (pure): when to warn, request a stop, and interrupt.

docs/timeouts.md: the deadline is the attempt's start plus the job's timeout, or the
default SLA when the job has none. Up to three steps happen before or at it:

1. ``SOFT_WARNING`` at ``soft_timeout_percent`` of the timeout: a warning is logged;
2. ``CANCELLATION_REQUEST`` at deadline - ``cancellation_grace``: the attempt's cancellation
   request is set (skipped when the grace is zero or not shorter than the timeout);
3. ``DEADLINE``: if the attempt still runs, the request is set (if not yet) and it is interrupted.

When the grace is longer than the soft-warning margin, step 2 comes before step 1.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from datetime import datetime, timedelta

from ratchet.domain.errors import ConfigurationError
from ratchet.domain.quick_init import quick_init

DEFAULT_SLA = timedelta(minutes=30)
DEFAULT_SOFT_TIMEOUT_PERCENT = 80


class WatchdogStep(enum.IntEnum):
    """What the watchdog does at one point of an attempt (ties run in this order)."""

    SOFT_WARNING = 1
    CANCELLATION_REQUEST = 2
    DEADLINE = 3


@dataclass(frozen=True)
class TimeoutSettings:
    """The node-wide knobs of the watchdog."""

    default_sla: timedelta = DEFAULT_SLA
    """The timeout of a job that has none of its own."""
    soft_timeout_percent: int = DEFAULT_SOFT_TIMEOUT_PERCENT
    """Where the soft warning falls, in percent of the timeout (1..99)."""
    cancellation_grace: timedelta = timedelta(0)
    """How long before the deadline the cancellation request is set (0: only at the deadline)."""

    def __post_init__(self) -> None:
        if self.default_sla <= timedelta(0):
            raise ConfigurationError(f"default_sla must be positive, got {self.default_sla}")
        if not 1 <= self.soft_timeout_percent <= 99:
            raise ConfigurationError(
                f"soft_timeout_percent must be within 1..99, got {self.soft_timeout_percent}"
            )
        if self.cancellation_grace < timedelta(0):
            raise ConfigurationError(
                f"cancellation_grace must not be negative, got {self.cancellation_grace}"
            )

    def timeout_for(self, job_timeout: timedelta | None) -> timedelta:
        """The effective timeout: the job's own, else the default SLA."""
        return job_timeout if job_timeout is not None else self.default_sla


@quick_init
@dataclass(frozen=True)
class AttemptPlan:
    """When each watchdog step of one attempt falls due, in the order they happen."""

    started: datetime
    timeout: timedelta
    deadline: datetime
    offsets: tuple[tuple[timedelta, WatchdogStep], ...]
    """When each step falls due, from ``started``, in order."""
    first_due: datetime
    """When the first step falls due."""

    @functools.cached_property
    def steps(self) -> tuple[tuple[datetime, WatchdogStep], ...]:
        """Each step and when it falls due, in order (computed when first asked: an attempt
        that ends before its first step never needs more than ``first_due``)."""
        return tuple([(self.started + at, step) for at, step in self.offsets])

    def due_at(self, step: WatchdogStep) -> datetime | None:
        """When ``step`` falls due, or None if the plan skips it."""
        return next((when for when, s in self.steps if s is step), None)


def plan_attempt(
    started: datetime, job_timeout: timedelta | None, settings: TimeoutSettings
) -> AttemptPlan:
    """The watchdog steps of an attempt that started at ``started``."""
    timeout = settings.timeout_for(job_timeout)
    offsets = step_offsets(timeout, settings.soft_timeout_percent, settings.cancellation_grace)
    return AttemptPlan(started, timeout, started + timeout, offsets, started + offsets[0][0])


@functools.lru_cache(maxsize=256)
def step_offsets(
    timeout: timedelta, soft_timeout_percent: int, grace: timedelta
) -> tuple[tuple[timedelta, WatchdogStep], ...]:
    """When each step falls due, from the attempt's start, in order (the same for every
    attempt with this timeout: cached, as every attempt asks)."""
    steps = [
        (timeout * soft_timeout_percent / 100, WatchdogStep.SOFT_WARNING),
        (timeout, WatchdogStep.DEADLINE),
    ]
    if timedelta(0) < grace < timeout:
        steps.append((timeout - grace, WatchdogStep.CANCELLATION_REQUEST))
    steps.sort()
    return tuple(steps)
