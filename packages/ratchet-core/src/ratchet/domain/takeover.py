"""Takeover policies and the schedule-to-start deadline (pure).

A stalled attempt (no progress past its stall deadline, or its node died) is *taken over* by
another node. What the taker does is the job's :class:`TakeoverPolicy`. The schedule-to-start
deadline (the watcher's T14, off unless a job sets it) bounds how long a job may wait, once due,
before its first start. The watcher applies both (:func:`ratchet.domain.watcher.classify`).
"""

from __future__ import annotations

import enum
from datetime import datetime, timedelta

from ratchet.domain.errors import InvalidJobOptions, RatchetError

MAX_SCHEDULE_TO_START = timedelta(days=365)


class JobStartDeadlineMissed(RatchetError):
    """The job waited past its schedule-to-start deadline without starting: it failed without
    running (no retry: raise the deadline, add workers, or retry it by hand)."""

    __ratchet_do_not_retry__ = True


class TakeoverPolicy(enum.StrEnum):
    """What a takeover of a stalled attempt does."""

    RESUME = "RESUME"
    """The taker runs the job again with its last checkpoint (``ctx.checkpoint``): the default.
    The stalled attempt does not count as a failed attempt."""
    RESTART = "RESTART"
    """The taker runs the job from scratch: the checkpoint is dropped and the stalled attempt
    counts as a failed one (the job must be idempotent)."""
    FAIL = "FAIL"
    """Nobody takes it over: once it is eligible for a takeover, the stalled attempt fails
    through the retry policy (a fresh retry while retries remain, else the dead-letter queue)."""


def takeover_policy(value: object) -> TakeoverPolicy:
    """``value`` as a :class:`TakeoverPolicy` (a member, or its name in any case).

    :raises InvalidJobOptions: anything else.
    """
    if isinstance(value, TakeoverPolicy):
        return value
    if isinstance(value, str):
        try:
            return TakeoverPolicy(value.strip().upper())
        except ValueError:
            pass
    raise InvalidJobOptions(
        f"takeover policy must be one of {', '.join(p.value for p in TakeoverPolicy)} "
        f"(or a TakeoverPolicy), got {value!r}"
    )


def schedule_to_start(value: object) -> timedelta:
    """``value`` if it is a valid schedule-to-start deadline: a positive timedelta of at most a
    year.

    :raises InvalidJobOptions: not a timedelta, zero, negative, or longer than a year.
    """
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise InvalidJobOptions(f"schedule_to_start must be a positive timedelta, got {value!r}")
    if value > MAX_SCHEDULE_TO_START:
        raise InvalidJobOptions(f"schedule_to_start must be at most 365 days, got {value}")
    return value


def start_by(due: datetime, deadline: timedelta | None) -> datetime | None:
    """When a job due at ``due`` must have started (None: it has no deadline)."""
    return None if deadline is None else due + deadline


def missed_start(deadline_at: datetime | None, now: datetime) -> bool:
    """T14: whether a job that never started and must start by ``deadline_at`` is overdue."""
    return deadline_at is not None and now >= deadline_at
