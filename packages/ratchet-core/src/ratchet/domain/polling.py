"""Adaptive polling (pure): how long a worker waits before its next claim query.

The strategy is a small state machine fed by the worker after every poll
(:meth:`AdaptivePollingStrategy.on_poll`) and on every wakeup signal
(:meth:`AdaptivePollingStrategy.on_wakeup`). It never reads a clock, sleeps, starts threads or
does I/O: time only enters through the ``now`` arguments, so a test can replay any history.

Modes
=====

``BURST``
    Entered by a wakeup (a local submission of immediate work, or a cluster "new work" notice).
    Every decision in burst mode is exactly ``burst_delay`` (500 ms by default). Burst mode lasts
    until ``idle_threshold`` (3) *consecutive* polls after the wakeup found nothing; polls that
    find work reset that count, so burst lasts while work keeps arriving. The poll that completes
    the empty run leaves burst and is decided by the NORMAL rules below.
``NORMAL``
    The steady state, with delays in ``[min_delay / full_batch_divisor, max_delay]``.
``DEEP_IDLE``
    No work for ``deep_idle_threshold`` (5 min): every decision is ``deep_idle_delay`` (60 s)
    until a poll finds work (-> NORMAL) or a wakeup arrives (-> BURST).

Rules of :meth:`~AdaptivePollingStrategy.on_poll`, applied in this order
=========================================================================

1. *Record.* The result joins the rolling window of the last ``window`` (10) polls. A poll
   *found work* when ``claimed > 0``; it was a *full batch* when ``claimed >= batch_size``.
   A poll that found work resets the empty-poll counter and restarts the idle clock at ``now``;
   an empty poll increments the counter.
2. *Idle clock.* The idle clock starts at the first poll the strategy sees and restarts at every
   poll that found work and at every wakeup. ``idle = max(0, now - idle_since)``: a ``now``
   earlier than the clock's start counts as no idle time at all.
3. *Burst.* In BURST mode, while fewer than ``idle_threshold`` consecutive empty polls were seen
   since the wakeup, the decision is ``burst_delay``. Otherwise the mode becomes NORMAL and the
   rules continue.
4. *Deep idle.* An empty poll with ``idle >= deep_idle_threshold`` gives ``deep_idle_delay``
   (mode DEEP_IDLE). Deep idle is therefore reached exactly when the idle time reaches the
   threshold, never before. Any poll that found work leaves deep idle (rule 5).
5. *Normal.* The mode is NORMAL and the delay is computed in three steps:

   a. base: with ``k`` consecutive empty polls, ``base = min_delay`` while
      ``k <= idle_threshold``, else ``min(max_delay, min_delay * 2 ** (k - idle_threshold))``
      (exponential backoff that starts after ``idle_threshold`` empty polls). A poll that found
      work has ``k = 0``, so its base is ``min_delay``.
   b. full-batch streak: when the last ``full_batch_streak`` (3) polls of the window were all
      full batches, ``base = base / full_batch_divisor`` (4): there is a backlog, drain it fast.
   c. load: ``delay = base * (1 + utilisation_weight * utilisation)``, where ``utilisation`` is
      busy slots / total slots in ``[0, 1]``: a busy pool polls less often since it could not
      start what it claims anyway.

   The result is clamped to ``[min_delay / full_batch_divisor, max_delay]``.

Bounds. Every delay is within ``[0, deep_idle_delay]`` (the configuration guarantees
``burst_delay <= deep_idle_delay`` and ``max_delay <= deep_idle_delay``). The NORMAL floor is
``min_delay / full_batch_divisor`` (500 ms by default) and never zero: the worker does not need
a shorter delay, because it re-polls at once by itself whenever a job finishes and frees a slot.

Monotonicity. With a constant utilisation, a run of empty polls yields non-decreasing delays:
``min_delay`` for the first ``idle_threshold`` polls, then doubling up to ``max_delay``, then
``deep_idle_delay`` once the idle time reaches the threshold.

The defaults are the constants of the concept documentation (burst 500 ms, normal 2-30 s, deep
idle 60 s after 5 minutes). The ``ratchet.poller.*`` configuration keys may override them.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta

from ratchet.domain.errors import ConfigurationError
from ratchet.domain.quick_init import quick_init

__all__ = [
    "AdaptivePollingStrategy",
    "InvalidPollingConfig",
    "PollDelay",
    "PollMode",
    "PollResult",
    "PollingConfig",
]

#: Past this many doublings the backoff is at ``max_delay`` for any valid configuration
#: (2**64 microseconds is more than 500 000 years).
_MAX_DOUBLINGS = 64


class InvalidPollingConfig(ConfigurationError, ValueError):
    """A polling setting is out of range (for example ``min_delay > max_delay``)."""


class PollMode(enum.StrEnum):
    """The polling regime the strategy is in."""

    BURST = "BURST"
    """Right after a wakeup: poll every ``burst_delay``."""
    NORMAL = "NORMAL"
    """Steady state: ``min_delay / full_batch_divisor`` to ``max_delay``, adaptive."""
    DEEP_IDLE = "DEEP_IDLE"
    """Nothing found for ``deep_idle_threshold``: poll every ``deep_idle_delay``."""


@dataclass(frozen=True)
class PollingConfig:
    """Settings of :class:`AdaptivePollingStrategy`.

    :raises InvalidPollingConfig: a delay is not a positive ``timedelta``, ``min_delay >
        max_delay``, ``burst_delay`` or ``max_delay`` exceeds ``deep_idle_delay``, a count is
        not a positive int, ``full_batch_streak > window``, ``full_batch_divisor < 1`` or
        ``utilisation_weight < 0``.
    """

    burst_delay: timedelta = timedelta(milliseconds=500)
    min_delay: timedelta = timedelta(seconds=2)
    max_delay: timedelta = timedelta(seconds=30)
    deep_idle_delay: timedelta = timedelta(seconds=60)
    deep_idle_threshold: timedelta = timedelta(minutes=5)
    window: int = 10
    full_batch_streak: int = 3
    full_batch_divisor: float = 4.0
    idle_threshold: int = 3
    utilisation_weight: float = 1.0

    def __post_init__(self) -> None:
        for name in (
            "burst_delay",
            "min_delay",
            "max_delay",
            "deep_idle_delay",
            "deep_idle_threshold",
        ):
            value = getattr(self, name)
            if not isinstance(value, timedelta) or value <= timedelta(0):
                raise InvalidPollingConfig(f"{name} must be a positive timedelta, got {value!r}")
        for name in ("window", "full_batch_streak", "idle_threshold"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidPollingConfig(f"{name} must be an int >= 1, got {value!r}")
        if self.min_delay > self.max_delay:
            raise InvalidPollingConfig(
                f"min_delay ({self.min_delay}) must not exceed max_delay ({self.max_delay})"
            )
        if self.max_delay > self.deep_idle_delay:
            raise InvalidPollingConfig(
                f"max_delay ({self.max_delay}) must not exceed deep_idle_delay "
                f"({self.deep_idle_delay}); deep idle is the slowest mode"
            )
        if self.burst_delay > self.deep_idle_delay:
            raise InvalidPollingConfig(
                f"burst_delay ({self.burst_delay}) must not exceed deep_idle_delay "
                f"({self.deep_idle_delay})"
            )
        if self.full_batch_streak > self.window:
            raise InvalidPollingConfig(
                f"full_batch_streak ({self.full_batch_streak}) must fit in the window "
                f"({self.window})"
            )
        if not _is_real(self.full_batch_divisor) or self.full_batch_divisor < 1:
            raise InvalidPollingConfig(
                f"full_batch_divisor must be a number >= 1, got {self.full_batch_divisor!r}"
            )
        if not _is_real(self.utilisation_weight) or self.utilisation_weight < 0:
            raise InvalidPollingConfig(
                f"utilisation_weight must be a number >= 0, got {self.utilisation_weight!r}"
            )

    @property
    def normal_floor(self) -> timedelta:
        """The shortest NORMAL delay: ``min_delay / full_batch_divisor``."""
        return self.min_delay / self.full_batch_divisor


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@quick_init
@dataclass(frozen=True)
class PollDelay:
    """A decision: wait ``delay`` before the next poll, in ``mode``, because of ``reason``."""

    delay: timedelta
    mode: PollMode
    reason: str


@quick_init
@dataclass(frozen=True)
class PollResult:
    """One poll as remembered in the rolling window."""

    at: datetime
    claimed: int
    batch_size: int

    @property
    def found_work(self) -> bool:
        return self.claimed > 0

    @property
    def full(self) -> bool:
        return self.claimed >= self.batch_size


class AdaptivePollingStrategy:
    """The adaptive polling state machine; see the module docstring for the exact rules.

    Not thread-safe: one worker loop owns one strategy.
    """

    def __init__(self, config: PollingConfig | None = None) -> None:
        self._config = config if config is not None else PollingConfig()
        self._window: deque[PollResult] = deque(maxlen=self._config.window)
        self._mode = PollMode.NORMAL
        self._empty_run = 0
        self._idle_since: datetime | None = None

    @property
    def config(self) -> PollingConfig:
        return self._config

    @property
    def mode(self) -> PollMode:
        """The mode of the latest decision (NORMAL before the first one)."""
        return self._mode

    @property
    def window(self) -> tuple[PollResult, ...]:
        """The last ``config.window`` polls, oldest first."""
        return tuple(self._window)

    @property
    def consecutive_empty(self) -> int:
        """Polls in a row that found nothing (since the last one that found work or a wakeup)."""
        return self._empty_run

    @property
    def full_batch_run(self) -> int:
        """Full batches at the end of the window (at most ``config.window``)."""
        run = 0
        for result in reversed(self._window):
            if not result.full:
                break
            run += 1
        return run

    def idle_for(self, now: datetime) -> timedelta:
        """How long no work was found, as of ``now`` (zero before the first poll)."""
        if self._idle_since is None or now <= self._idle_since:
            return timedelta(0)
        return now - self._idle_since

    def on_wakeup(self, now: datetime) -> PollDelay:
        """A wakeup signal: leave any mode (deep idle included) for BURST at once.

        Restarts the idle clock and the empty-poll count; the decision is ``burst_delay``.
        """
        self._mode = PollMode.BURST
        self._empty_run = 0
        self._idle_since = now
        return PollDelay(self._config.burst_delay, PollMode.BURST, "wakeup: burst polling")

    def on_poll(
        self, now: datetime, claimed: int, batch_size: int, utilisation: float
    ) -> PollDelay:
        """Record a poll that claimed ``claimed`` of ``batch_size`` jobs and decide the next delay.

        ``utilisation`` is busy slots / total slots; values outside ``[0, 1]`` are clamped.

        :raises ValueError: ``claimed < 0``, ``batch_size < 1`` or ``utilisation`` is not finite.
        """
        if isinstance(claimed, bool) or not isinstance(claimed, int) or claimed < 0:
            raise ValueError(f"claimed must be an int >= 0, got {claimed!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if not _is_real(utilisation):
            raise ValueError(f"utilisation must be a finite number, got {utilisation!r}")
        load = min(1.0, max(0.0, float(utilisation)))
        cfg = self._config

        # 1-2. Record the result; keep the empty run and the idle clock.
        result = PollResult(now, claimed, batch_size)
        self._window.append(result)
        if result.found_work:
            self._empty_run = 0
            self._idle_since = now
        else:
            self._empty_run += 1
            if self._idle_since is None:
                self._idle_since = now

        # 3. Burst lasts until idle_threshold empty polls in a row.
        if self._mode is PollMode.BURST:
            if self._empty_run < cfg.idle_threshold:
                why = (
                    f"burst: claimed {claimed}"
                    if result.found_work
                    else f"burst: empty poll {self._empty_run} of {cfg.idle_threshold}"
                )
                return PollDelay(cfg.burst_delay, PollMode.BURST, why)
            self._mode = PollMode.NORMAL

        # 4. Deep idle once nothing was found for deep_idle_threshold.
        idle = self.idle_for(now)
        if not result.found_work and idle >= cfg.deep_idle_threshold:
            self._mode = PollMode.DEEP_IDLE
            return PollDelay(
                cfg.deep_idle_delay, PollMode.DEEP_IDLE, f"deep idle: no work for {idle}"
            )

        # 5. Normal mode.
        self._mode = PollMode.NORMAL
        reasons: list[str] = []
        base = cfg.min_delay
        doublings = self._empty_run - cfg.idle_threshold
        if doublings > 0:
            factor = 2.0 ** min(doublings, _MAX_DOUBLINGS)
            base = (
                cfg.max_delay
                if factor >= cfg.max_delay / cfg.min_delay
                else min(cfg.max_delay, cfg.min_delay * factor)
            )
            reasons.append(f"backoff after {self._empty_run} empty polls")
        elif result.found_work:
            reasons.append(f"claimed {claimed} of {batch_size}")
        else:
            reasons.append(f"empty poll {self._empty_run} of {cfg.idle_threshold} before backoff")
        if self.full_batch_run >= cfg.full_batch_streak:
            base = base / cfg.full_batch_divisor
            reasons.append(f"{self.full_batch_run} full batches in a row")
        delay = base * (1.0 + cfg.utilisation_weight * load)
        if load > 0:
            reasons.append(f"utilisation {load:.0%}")
        delay = max(cfg.normal_floor, min(cfg.max_delay, delay))
        return PollDelay(delay, PollMode.NORMAL, "; ".join(reasons))
