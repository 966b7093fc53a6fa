"""Batching windows (pure): how long a worker lets a claim or an outcome write wait for more.

A worker claims jobs into its free slots and writes outcomes as runs end. The runs of one claim
that end close together, written one by one, cost a statement each, and the slots they free one
by one make claims of a job or two; waiting a moment lets them travel together. What a moment
is worth depends on how long the jobs run: a window that is a small share of a run delays a job
by at most that share of its own time. :func:`gather_window` decides it from :class:`RunTimes`,
the worker's running mean of its attempts' run times.

The same reasoning sizes the claims of a worker whose jobs end fast: its threads free up so
quickly that claims of no more jobs than there are threads make many small claims and outcome
writes. :func:`claim_ahead` lets it hold more claimed jobs than threads, as many as its threads
get through in a short budget (:class:`RunRate` measures how many runs end per second), so the
extra jobs wait for a thread that short time on average. Nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Sequence

WINDOW_SHARE = 0.02
"""The share of the mean run time a window lasts (jobs of 1 s: 20 ms)."""

MAX_WINDOW = 0.05
"""The longest window, however long the jobs run (seconds)."""

MIN_WINDOW = 0.0005
"""A window shorter than this is not worth a wait (seconds): jobs under 25 ms get none."""


def _checked_weight(weight: float) -> float:
    """``weight``, an exponentially weighted mean's share of each new value, if in (0, 1]."""
    if not 0 < weight <= 1:
        raise ValueError(f"weight must be in (0, 1], got {weight}")
    return weight


def _folded(mean: float | None, value: float, weight: float) -> float:
    """``mean`` moved ``weight`` of the way to ``value`` (``value`` itself for the first)."""
    return value if mean is None else mean + weight * (value - mean)


class RunTimes:
    """An exponentially weighted mean of attempts' run times (seconds), fed a batch at a time."""

    def __init__(self, weight: float = 0.25) -> None:
        self.weight = _checked_weight(weight)
        self.mean: float | None = None
        """None until the first batch."""

    def observe(self, seconds: Sequence[float]) -> None:
        """Fold one batch of run times into the mean (the batch's mean counts once; negative
        times, from a clock that stepped back, count as zero)."""
        if not seconds:
            return
        batch = sum(max(0.0, s) for s in seconds) / len(seconds)
        self.mean = _folded(self.mean, batch, self.weight)


def gather_window(mean_run: float | None, floor: float = 0.0) -> float:
    """Seconds a claim or an outcome write may wait for the runs in flight: ``WINDOW_SHARE`` of
    the mean run time, at most ``MAX_WINDOW``, and ``floor`` when that is longer or the window
    would be under ``MIN_WINDOW`` (or nothing ran yet)."""
    if mean_run is None:
        return floor
    window = min(MAX_WINDOW, WINDOW_SHARE * mean_run)
    if window < MIN_WINDOW:
        return floor
    return max(floor, window)


AHEAD_BUDGET = 0.05
"""How long, on average, the jobs claimed beyond a worker's threads wait for one (seconds)."""

MAX_AHEAD = 500
"""The most jobs a worker holds beyond its threads, however fast its runs end."""

RATE_SPAN = 0.05
"""The shortest span a run rate is measured over (seconds): shorter ones are pooled."""


class RunRate:
    """Runs ended per second: an exponentially weighted mean over spans of at least ``span``
    seconds (shorter spans are pooled until they are that long)."""

    def __init__(self, weight: float = 0.25, span: float = RATE_SPAN) -> None:
        if span <= 0:
            raise ValueError(f"span must be positive, got {span}")
        self.weight = _checked_weight(weight)
        self.span = span
        self.per_second: float | None = None
        """None until the first full span."""
        self._count = 0
        self._seconds = 0.0

    def observe(self, ended: int, seconds: float) -> None:
        """``ended`` runs ended over the last ``seconds`` (a negative span, from a clock that
        stepped back, counts as none)."""
        self._count += max(0, ended)
        self._seconds += max(0.0, seconds)
        if self._seconds < self.span:
            return
        self.per_second = _folded(self.per_second, self._count / self._seconds, self.weight)
        self._count, self._seconds = 0, 0.0


def claim_ahead(
    per_second: float | None, budget: float = AHEAD_BUDGET, limit: int = MAX_AHEAD
) -> int:
    """Jobs a worker may hold claimed beyond its threads: what its runs get through in
    ``budget`` seconds at ``per_second`` (at most ``limit``; none before a rate is known or
    with no budget). By Little's law a job claimed ahead then waits about ``budget`` for a
    thread."""
    if per_second is None or budget <= 0 or per_second <= 0:
        return 0
    return min(limit, int(per_second * budget))
