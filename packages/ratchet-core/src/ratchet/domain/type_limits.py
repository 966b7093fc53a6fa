"""Per execution type limits (pure): a start rate per minute and a concurrency cap per target.

An *execution type* is a job target (``module:qualname``): every job that calls the same function
is of one type. A :class:`TypeLimit` bounds, across the whole cluster, how many attempts of the
type may start in any 60-second window and how many may execute at once. An attempt over either
bound is deferred without consuming a retry, until the moment the bound would let it start
(:func:`decide`). The store keeps the counts (one locked limit row per type, the starts of the last
minute and the attempts executing); this module decides.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from ratchet.domain.errors import InvalidJobOptions

RATE_WINDOW = timedelta(minutes=1)
DEFAULT_LIMIT_DELAY = timedelta(seconds=5)
MAX_TYPE_NAME = 512


class InvalidTypeLimit(InvalidJobOptions):
    """A per execution type limit is malformed: a negative or non-integer bound, no bound at
    all, a bad target name, or a non-positive delay."""


def _bound(value: object, what: str, target: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidTypeLimit(f"{what} of {target!r} must be an integer >= 0, got {value!r}")
    return value


@dataclass(frozen=True)
class TypeLimit:
    """Bounds of one execution type (``target``: ``module:qualname``), cluster-wide.

    ``rate_per_minute``: attempts that may start in any 60 s window (0 holds all back; None: no
    rate bound). ``max_concurrent``: attempts that may execute at once (0 holds all back; None:
    no cap). ``retry_delay``: how long an attempt held back by the cap waits (a rate-limited one
    waits exactly until the window lets it start).
    """

    target: str
    rate_per_minute: int | None = None
    max_concurrent: int | None = None
    retry_delay: timedelta = DEFAULT_LIMIT_DELAY

    def __post_init__(self) -> None:
        if not isinstance(self.target, str) or ":" not in self.target.strip():
            raise InvalidTypeLimit(
                f"an execution type is a job target 'module:qualname', got {self.target!r}"
            )
        target = self.target.strip()
        if len(target) > MAX_TYPE_NAME or not target.isprintable():
            raise InvalidTypeLimit(f"target {target[:40]!r}... is not a storable job target")
        object.__setattr__(self, "target", target)
        _bound(self.rate_per_minute, "rate_per_minute", target)
        _bound(self.max_concurrent, "max_concurrent", target)
        if self.rate_per_minute is None and self.max_concurrent is None:
            raise InvalidTypeLimit(
                f"the limit of {target!r} bounds nothing: give rate_per_minute, max_concurrent "
                "or both (remove the limit to make the type unlimited)"
            )
        if not isinstance(self.retry_delay, timedelta) or self.retry_delay <= timedelta(0):
            raise InvalidTypeLimit(
                f"retry_delay of {target!r} must be a positive timedelta, got {self.retry_delay!r}"
            )


@dataclass(frozen=True)
class TypeDecision:
    """Whether an attempt may start now, and if not until when it waits and why."""

    admitted: bool
    retry_at: datetime | None = None
    reason: str | None = None


def decide(
    limit: TypeLimit | None,
    now: datetime,
    *,
    recent_starts: Iterable[datetime],
    executing: int,
) -> TypeDecision:
    """May one more attempt of ``limit``'s type start at ``now``?

    ``recent_starts``: when the attempts of the type admitted so far started (only those after
    ``now - 60 s`` count); ``executing``: how many of them still execute. Refused for the rate,
    the attempt waits until the oldest start that keeps the window full leaves it; for the cap,
    ``retry_delay``. A type without a limit is always admitted.
    """
    if limit is None:
        return TypeDecision(True)
    cap = limit.max_concurrent
    if cap is not None and executing >= cap:
        return TypeDecision(
            False,
            now + limit.retry_delay,
            f"{limit.target} at its concurrency limit ({executing}/{cap})",
        )
    rate = limit.rate_per_minute
    if rate is None:
        return TypeDecision(True)
    window = sorted(t for t in recent_starts if now - t < RATE_WINDOW)
    if len(window) < rate:
        return TypeDecision(True)
    if rate == 0:
        return TypeDecision(
            False, now + limit.retry_delay, f"{limit.target} is held back (rate 0/min)"
        )
    # The window holds ``len(window)`` starts; one more fits once all but ``rate - 1`` of them
    # left it, that is when the ``len - rate + 1``-th oldest is 60 s old.
    frees_at = window[len(window) - rate] + RATE_WINDOW
    return TypeDecision(
        False,
        max(frees_at, now + timedelta(microseconds=1)),
        f"{limit.target} at its rate limit ({len(window)}/{rate} per minute)",
    )
