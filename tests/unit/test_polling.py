"""Adaptive polling strategy: unit tests of each rule and properties over arbitrary feeds."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet.domain.errors import ConfigurationError
from ratchet.domain.polling import (
    AdaptivePollingStrategy,
    InvalidPollingConfig,
    PollDelay,
    PollingConfig,
    PollMode,
)

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)
MS = timedelta(milliseconds=1)


def empty(strategy: AdaptivePollingStrategy, at: datetime, utilisation: float = 0.0) -> PollDelay:
    return strategy.on_poll(at, 0, 10, utilisation)


# --------------------------------------------------------------------------- configuration


def test_defaults_are_the_documented_constants() -> None:
    cfg = PollingConfig()
    assert cfg.burst_delay == timedelta(milliseconds=500)
    assert (cfg.min_delay, cfg.max_delay) == (timedelta(seconds=2), timedelta(seconds=30))
    assert cfg.deep_idle_delay == timedelta(seconds=60)
    assert cfg.deep_idle_threshold == timedelta(minutes=5)
    assert (cfg.window, cfg.full_batch_streak, cfg.full_batch_divisor) == (10, 3, 4.0)
    assert cfg.idle_threshold == 3
    assert cfg.normal_floor == timedelta(milliseconds=500)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_delay": timedelta(seconds=31)},
        {"max_delay": timedelta(seconds=1)},
        {"min_delay": timedelta(0)},
        {"burst_delay": timedelta(0)},
        {"burst_delay": -S},
        {"deep_idle_threshold": timedelta(0)},
        {"deep_idle_delay": timedelta(seconds=10)},
        {"burst_delay": timedelta(seconds=61)},
        {"max_delay": 30},
        {"window": 0},
        {"window": True},
        {"full_batch_streak": 0},
        {"full_batch_streak": 11},
        {"idle_threshold": 0},
        {"idle_threshold": 2.0},
        {"full_batch_divisor": 0.5},
        {"full_batch_divisor": math.nan},
        {"utilisation_weight": -0.1},
        {"utilisation_weight": math.inf},
    ],
)
def test_invalid_config_is_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidPollingConfig) as info:
        PollingConfig(**kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, ConfigurationError)


def test_min_equal_to_max_is_allowed() -> None:
    PollingConfig(min_delay=timedelta(seconds=5), max_delay=timedelta(seconds=5))


@pytest.mark.parametrize(
    ("claimed", "batch_size", "utilisation"),
    [(-1, 10, 0.0), (0, 0, 0.0), (True, 10, 0.0), (1, 10, math.nan), (1, 10, math.inf)],
)
def test_invalid_poll_arguments_are_refused(
    claimed: int, batch_size: int, utilisation: float
) -> None:
    with pytest.raises(ValueError):
        AdaptivePollingStrategy().on_poll(T0, claimed, batch_size, utilisation)


# --------------------------------------------------------------------------- unit rules


def test_starts_in_normal_mode() -> None:
    strategy = AdaptivePollingStrategy()
    assert strategy.mode is PollMode.NORMAL
    assert strategy.idle_for(T0) == timedelta(0)


@pytest.mark.parametrize(
    ("utilisation", "expected"),
    [(0.0, 2 * S), (0.5, 3 * S), (1.0, 4 * S), (-3.0, 2 * S), (7.0, 4 * S)],
)
def test_found_work_polls_at_min_delay_scaled_by_load(
    utilisation: float, expected: timedelta
) -> None:
    decision = AdaptivePollingStrategy().on_poll(T0, 3, 10, utilisation)
    assert decision == PollDelay(expected, PollMode.NORMAL, decision.reason)


def test_empty_polls_back_off_exponentially_after_the_idle_threshold() -> None:
    strategy = AdaptivePollingStrategy()
    strategy.on_poll(T0, 5, 10, 0.0)
    delays = [empty(strategy, T0 + i * S).delay for i in range(1, 10)]
    assert delays == [2 * S, 2 * S, 2 * S, 4 * S, 8 * S, 16 * S, 30 * S, 30 * S, 30 * S]
    assert strategy.consecutive_empty == 9
    assert strategy.mode is PollMode.NORMAL


def test_backoff_never_overflows_after_very_many_empty_polls() -> None:
    strategy = AdaptivePollingStrategy()
    for _ in range(500):
        decision = empty(strategy, T0)  # same instant: never deep idle
    assert decision.delay == 30 * S


def test_full_batch_streak_makes_polling_four_times_faster() -> None:
    strategy = AdaptivePollingStrategy()
    assert strategy.on_poll(T0, 10, 10, 0.0).delay == 2 * S
    assert strategy.on_poll(T0, 10, 10, 0.0).delay == 2 * S
    third = strategy.on_poll(T0, 12, 10, 0.0)
    assert third.delay == timedelta(milliseconds=500)
    assert "full batches" in third.reason
    assert strategy.full_batch_run == 3
    # the load factor still applies on top of the streak
    assert strategy.on_poll(T0, 10, 10, 1.0).delay == timedelta(seconds=1)
    # a partial batch ends the streak
    assert strategy.on_poll(T0, 9, 10, 0.0).delay == 2 * S
    assert strategy.full_batch_run == 0


def test_window_keeps_the_last_ten_polls() -> None:
    strategy = AdaptivePollingStrategy()
    for i in range(25):
        strategy.on_poll(T0 + i * S, i, 100, 0.0)
    assert [r.claimed for r in strategy.window] == list(range(15, 25))


def test_wakeup_enters_burst_until_idle_threshold_empty_polls() -> None:
    strategy = AdaptivePollingStrategy()
    burst = timedelta(milliseconds=500)
    assert strategy.on_wakeup(T0) == PollDelay(burst, PollMode.BURST, "wakeup: burst polling")
    assert strategy.mode is PollMode.BURST
    assert strategy.window == ()  # a wakeup is not a poll
    assert strategy.on_poll(T0, 4, 10, 1.0).delay == burst  # work found: stays in burst
    assert empty(strategy, T0).mode is PollMode.BURST
    assert empty(strategy, T0).mode is PollMode.BURST
    assert strategy.on_poll(T0, 1, 10, 0.0).mode is PollMode.BURST  # resets the empty run
    assert empty(strategy, T0).mode is PollMode.BURST
    assert empty(strategy, T0).mode is PollMode.BURST
    leaving = empty(strategy, T0)  # third empty poll in a row: back to normal rules
    assert leaving == PollDelay(2 * S, PollMode.NORMAL, leaving.reason)
    assert empty(strategy, T0).delay == 4 * S


def test_deep_idle_after_five_idle_minutes_and_not_before() -> None:
    strategy = AdaptivePollingStrategy()
    strategy.on_poll(T0, 1, 10, 0.0)
    just_before = T0 + timedelta(minutes=5) - timedelta(microseconds=1)
    assert empty(strategy, just_before).mode is PollMode.NORMAL
    at = empty(strategy, T0 + timedelta(minutes=5))
    assert at == PollDelay(timedelta(seconds=60), PollMode.DEEP_IDLE, at.reason)
    assert strategy.mode is PollMode.DEEP_IDLE
    assert empty(strategy, T0 + timedelta(hours=3), utilisation=1.0).delay == 60 * S


def test_idle_clock_starts_at_the_first_poll() -> None:
    strategy = AdaptivePollingStrategy()
    empty(strategy, T0)
    assert empty(strategy, T0 + timedelta(minutes=4)).mode is PollMode.NORMAL
    assert empty(strategy, T0 + timedelta(minutes=5)).mode is PollMode.DEEP_IDLE


def test_a_poll_that_finds_work_leaves_deep_idle() -> None:
    strategy = AdaptivePollingStrategy()
    empty(strategy, T0)
    assert empty(strategy, T0 + timedelta(minutes=10)).mode is PollMode.DEEP_IDLE
    found = strategy.on_poll(T0 + timedelta(minutes=11), 1, 10, 0.0)
    assert found == PollDelay(2 * S, PollMode.NORMAL, found.reason)
    assert strategy.idle_for(T0 + timedelta(minutes=12)) == timedelta(minutes=1)


def test_wakeup_leaves_deep_idle_and_restarts_the_idle_clock() -> None:
    strategy = AdaptivePollingStrategy()
    empty(strategy, T0)
    assert empty(strategy, T0 + timedelta(minutes=6)).mode is PollMode.DEEP_IDLE
    woke = T0 + timedelta(minutes=7)
    assert strategy.on_wakeup(woke).mode is PollMode.BURST
    for _ in range(2):
        assert empty(strategy, woke + S).mode is PollMode.BURST
    assert empty(strategy, woke + 2 * S).mode is PollMode.NORMAL  # not straight back to deep idle
    assert empty(strategy, woke + timedelta(minutes=5)).mode is PollMode.DEEP_IDLE


def test_time_going_backwards_counts_as_no_idle_time() -> None:
    strategy = AdaptivePollingStrategy()
    strategy.on_poll(T0, 1, 10, 0.0)
    assert strategy.idle_for(T0 - timedelta(hours=1)) == timedelta(0)
    assert empty(strategy, T0 - timedelta(hours=1)).mode is PollMode.NORMAL


# --------------------------------------------------------------------------- properties


@st.composite
def configs(draw: st.DrawFn) -> PollingConfig:
    min_ms = draw(st.integers(1, 10_000))
    max_ms = min_ms + draw(st.integers(0, 60_000))
    deep_ms = max_ms + draw(st.integers(0, 120_000))
    window = draw(st.integers(1, 20))
    return PollingConfig(
        burst_delay=timedelta(milliseconds=draw(st.integers(1, deep_ms))),
        min_delay=timedelta(milliseconds=min_ms),
        max_delay=timedelta(milliseconds=max_ms),
        deep_idle_delay=timedelta(milliseconds=deep_ms),
        deep_idle_threshold=timedelta(milliseconds=draw(st.integers(1, 3_600_000))),
        window=window,
        full_batch_streak=draw(st.integers(1, window)),
        full_batch_divisor=draw(st.floats(1.0, 8.0)),
        idle_threshold=draw(st.integers(1, 6)),
        utilisation_weight=draw(st.floats(0.0, 3.0)),
    )


@dataclass(frozen=True)
class Poll:
    step: timedelta
    claimed: int
    batch_size: int
    utilisation: float


@dataclass(frozen=True)
class Wakeup:
    step: timedelta


Event = Poll | Wakeup

steps = st.integers(-60_000, 900_000).map(lambda ms: timedelta(milliseconds=ms))
polls = st.builds(
    Poll,
    step=steps,
    claimed=st.integers(0, 60),
    batch_size=st.integers(1, 50),
    utilisation=st.floats(-0.5, 1.5, allow_nan=False),
)
events = st.lists(st.one_of(polls, polls, polls, st.builds(Wakeup, step=steps)), max_size=60)
poll_only = st.lists(polls, max_size=40)


def replay(
    strategy: AdaptivePollingStrategy, feed: Sequence[Event], start: datetime = T0
) -> datetime:
    """Feed ``feed`` to ``strategy``; return the last ``now`` used."""
    now = start
    for event in feed:
        now += event.step
        if isinstance(event, Wakeup):
            strategy.on_wakeup(now)
        else:
            strategy.on_poll(now, event.claimed, event.batch_size, event.utilisation)
    return now


def assert_within_bounds(cfg: PollingConfig, decision: PollDelay) -> None:
    assert timedelta(0) <= decision.delay <= cfg.deep_idle_delay
    if decision.mode is PollMode.NORMAL:
        assert cfg.normal_floor <= decision.delay <= cfg.max_delay
    elif decision.mode is PollMode.BURST:
        assert decision.delay == cfg.burst_delay
    else:
        assert decision.delay == cfg.deep_idle_delay


@settings(max_examples=200)
@given(cfg=configs(), feed=events)
def test_every_delay_is_within_its_bounds(cfg: PollingConfig, feed: list[Event]) -> None:
    strategy = AdaptivePollingStrategy(cfg)
    now = T0
    for event in feed:
        now += event.step
        if isinstance(event, Wakeup):
            decision = strategy.on_wakeup(now)
        else:
            decision = strategy.on_poll(now, event.claimed, event.batch_size, event.utilisation)
        assert_within_bounds(cfg, decision)
        assert strategy.mode is decision.mode
        assert decision.reason


@settings(max_examples=200)
@given(cfg=configs(), feed=events, step=steps)
def test_a_wakeup_always_gives_burst_mode_and_the_burst_delay(
    cfg: PollingConfig, feed: list[Event], step: timedelta
) -> None:
    strategy = AdaptivePollingStrategy(cfg)
    now = replay(strategy, feed) + step
    decision = strategy.on_wakeup(now)
    assert decision.mode is PollMode.BURST
    assert decision.delay == cfg.burst_delay
    assert strategy.mode is PollMode.BURST


@settings(max_examples=100)
@given(cfg=configs(), steps_=st.lists(steps, min_size=1, max_size=20))
def test_a_wakeup_from_deep_idle_gives_burst(cfg: PollingConfig, steps_: list[timedelta]) -> None:
    strategy = AdaptivePollingStrategy(cfg)
    empty(strategy, T0)
    idle_at = T0 + cfg.deep_idle_threshold
    assert empty(strategy, idle_at).mode is PollMode.DEEP_IDLE
    now = idle_at
    for step in steps_:
        now += abs(step)
        assert empty(strategy, now).mode is PollMode.DEEP_IDLE
    decision = strategy.on_wakeup(now)
    assert (decision.mode, decision.delay) == (PollMode.BURST, cfg.burst_delay)


offsets = st.lists(
    st.integers(0, 3_600_000).map(lambda ms: timedelta(milliseconds=ms)), min_size=1, max_size=30
)


@settings(max_examples=200)
@given(cfg=configs(), prefix=poll_only, gaps=offsets, utilisation=st.floats(0.0, 1.0))
def test_deep_idle_is_reached_exactly_at_the_threshold_after_the_last_work(
    cfg: PollingConfig, prefix: list[Poll], gaps: list[timedelta], utilisation: float
) -> None:
    strategy = AdaptivePollingStrategy(cfg)
    anchor = replay(strategy, prefix) + S
    strategy.on_poll(anchor, 1, 5, utilisation)  # work found: the idle clock restarts here
    elapsed = timedelta(0)
    for gap in gaps:
        elapsed += gap
        decision = empty(strategy, anchor + elapsed, utilisation)
        expected = PollMode.DEEP_IDLE if elapsed >= cfg.deep_idle_threshold else PollMode.NORMAL
        assert decision.mode is expected, (elapsed, cfg.deep_idle_threshold)


@settings(max_examples=200)
@given(cfg=configs(), prefix=events, gaps=offsets)
def test_deep_idle_after_a_wakeup_needs_the_threshold_and_the_end_of_burst(
    cfg: PollingConfig, prefix: list[Event], gaps: list[timedelta]
) -> None:
    strategy = AdaptivePollingStrategy(cfg)
    woke = replay(strategy, prefix) + S
    strategy.on_wakeup(woke)
    elapsed = timedelta(0)
    for n, gap in enumerate(gaps, start=1):
        elapsed += gap
        decision = empty(strategy, woke + elapsed)
        if n < cfg.idle_threshold:
            assert decision.mode is PollMode.BURST
        elif elapsed >= cfg.deep_idle_threshold:
            assert decision.mode is PollMode.DEEP_IDLE
        else:
            assert decision.mode is PollMode.NORMAL


@settings(max_examples=200)
@given(
    cfg=configs(),
    prefix=events,
    batch_size=st.integers(2, 50),
    utilisation=st.floats(0.0, 1.0),
    streak=st.integers(0, 25),
)
def test_a_full_batch_streak_never_slows_polling(
    cfg: PollingConfig,
    prefix: list[Event],
    batch_size: int,
    utilisation: float,
    streak: int,
) -> None:
    with_streak = AdaptivePollingStrategy(cfg)
    without = AdaptivePollingStrategy(cfg)
    now = replay(with_streak, prefix)
    replay(without, prefix)
    for i in range(cfg.full_batch_streak + streak):
        at = now + i * MS
        fast = with_streak.on_poll(at, batch_size, batch_size, utilisation)
        slow = without.on_poll(at, batch_size - 1, batch_size, utilisation)
        assert fast.mode is slow.mode
        assert fast.delay <= slow.delay


def doublings_to_max(cfg: PollingConfig) -> int:
    return (
        math.ceil(math.log2(cfg.max_delay / cfg.min_delay)) if cfg.max_delay > cfg.min_delay else 0
    )


@settings(max_examples=200)
@given(cfg=configs(), prefix=events, utilisation=st.floats(0.0, 1.0), extra=st.integers(0, 5))
def test_backoff_is_monotone_until_the_max(
    cfg: PollingConfig, prefix: list[Event], utilisation: float, extra: int
) -> None:
    strategy = AdaptivePollingStrategy(cfg)
    now = replay(strategy, prefix) + S
    strategy.on_poll(now, 1, 10, utilisation)
    count = strategy.config.idle_threshold * 2 + doublings_to_max(cfg) + 1 + extra
    # the same instant throughout: the idle time stays zero, so deep idle is never reached
    decisions = [empty(strategy, now, utilisation) for _ in range(count)]
    normal = [d.delay for d in decisions if d.mode is PollMode.NORMAL]
    assert all(d.mode is not PollMode.DEEP_IDLE for d in decisions)
    assert normal == sorted(normal)
    assert normal[-1] == cfg.max_delay


@settings(max_examples=200)
@given(cfg=configs(), prefix=poll_only, utilisation=st.floats(0.0, 1.0), gaps=offsets)
def test_backoff_stays_monotone_through_deep_idle(
    cfg: PollingConfig, prefix: list[Poll], utilisation: float, gaps: list[timedelta]
) -> None:
    strategy = AdaptivePollingStrategy(cfg)
    now = replay(strategy, prefix) + S
    strategy.on_poll(now, 1, 10, utilisation)
    delays = []
    for gap in gaps:
        now += gap
        delays.append(empty(strategy, now, utilisation).delay)
    assert delays == sorted(delays)


def test_the_example_in_docs_polling_md_prints_what_the_page_shows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "polling.md").read_text("utf-8")
    code = re.search(r"^```python\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
    shown = re.search(r"^```text\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
    assert code and shown
    exec(compile(code.group(1), "docs/polling.md", "exec"), {"__name__": "docs_example"})
    assert capsys.readouterr().out == shown.group(1)
