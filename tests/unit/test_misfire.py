"""Misfire policies: what a recurring master creates after downtime."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet.domain.errors import InvalidJobOptions
from ratchet.domain.misfire import (
    InvalidMisfirePolicy,
    MisfireDecision,
    MisfireKind,
    RecurringMisfirePolicy,
    plan_fires,
)
from ratchet.domain.quartz import CronExpression

UTC_ZONE = ZoneInfo("UTC")
NY = ZoneInfo("America/New_York")
EVERY_MINUTE = CronExpression.parse("0 * * * * ?")
EVERY_SECOND = CronExpression.parse("* * * * * ?")
T0 = datetime(2024, 1, 1, 12, 0, tzinfo=UTC_ZONE)
MINUTE = timedelta(minutes=1)

SKIP = RecurringMisfirePolicy.skip()
FIRE_ONCE = RecurringMisfirePolicy.fire_once()
CATCH_UP_11 = RecurringMisfirePolicy.catch_up(11)
CATCH_UP_1 = RecurringMisfirePolicy.catch_up(1)
CATCH_UP_5000 = RecurringMisfirePolicy.catch_up(5000)


def _minutes(*offsets: int) -> tuple[datetime, ...]:
    return tuple(T0 + k * MINUTE for k in offsets)


def _now_with_due(count: int) -> datetime:
    """`now` such that exactly `count` every-minute occurrences from T0 are due."""
    return T0 + (count - 1) * MINUTE + timedelta(seconds=30)


# (due occurrences at claim time, policy, expected fires as minute offsets from T0)
DOWNTIME: list[tuple[int, RecurringMisfirePolicy, tuple[int, ...]]] = [
    (0, SKIP, ()),
    (0, FIRE_ONCE, ()),
    (0, CATCH_UP_11, ()),
    (1, SKIP, (0,)),  # a single due occurrence is not a backlog
    (1, FIRE_ONCE, (0,)),
    (1, CATCH_UP_11, (0,)),
    (1, CATCH_UP_1, (0,)),
    (2, SKIP, ()),
    (2, FIRE_ONCE, (0,)),
    (2, CATCH_UP_11, (0, 1)),
    (2, CATCH_UP_1, (0,)),
    (1000, SKIP, ()),
    (1000, FIRE_ONCE, (0,)),
    (1000, CATCH_UP_11, tuple(range(11))),
    (1000, CATCH_UP_1, (0,)),
    (1000, CATCH_UP_5000, tuple(range(1000))),
]


@pytest.mark.parametrize(
    ("due", "policy", "fires"),
    DOWNTIME,
    ids=lambda v: str(v) if isinstance(v, (int, RecurringMisfirePolicy)) else f"{len(v)}fires",
)
def test_downtime(due: int, policy: RecurringMisfirePolicy, fires: tuple[int, ...]) -> None:
    now = _now_with_due(due)
    decision = plan_fires(EVERY_MINUTE, UTC_ZONE, T0, now, policy)
    assert decision.fire_times == _minutes(*fires)
    # The master resumes at the first fire strictly after now (T0 itself when nothing is due).
    assert decision.next_fire == T0 + max(due, 0) * MINUTE
    assert decision.next_fire is not None
    assert decision.next_fire > now


def test_occurrence_exactly_at_now_is_due() -> None:
    decision = plan_fires(EVERY_MINUTE, UTC_ZONE, T0, T0 + MINUTE, SKIP)
    assert decision == MisfireDecision((), T0 + 2 * MINUTE)
    decision = plan_fires(EVERY_MINUTE, UTC_ZONE, T0, T0, SKIP)
    assert decision == MisfireDecision((T0,), T0 + MINUTE)


@pytest.mark.parametrize(
    "policy",
    [SKIP, FIRE_ONCE, CATCH_UP_11, RecurringMisfirePolicy.catch_up(10**9)],
    ids=str,
)
def test_a_million_missed_seconds_is_cheap(policy: RecurringMisfirePolicy) -> None:
    now = T0 + timedelta(seconds=999_999, microseconds=500_000)  # 1,000,000 due
    started = time.perf_counter()
    decision = plan_fires(EVERY_SECOND, UTC_ZONE, T0, now, policy)
    assert time.perf_counter() - started < 2.0
    assert decision.next_fire == T0 + timedelta(seconds=1_000_000)
    expected = {
        MisfireKind.SKIP: 0,
        MisfireKind.FIRE_ONCE: 1,
        MisfireKind.CATCH_UP: min(policy.max_catch_up, 10_000),  # bounded by max_scan
    }[policy.kind]
    assert len(decision.fire_times) == expected
    assert decision.fire_times == tuple(
        T0 + timedelta(seconds=k) for k in range(len(decision.fire_times))
    )


def test_max_scan_bounds_catch_up() -> None:
    decision = plan_fires(EVERY_MINUTE, UTC_ZONE, T0, _now_with_due(50), CATCH_UP_5000, max_scan=7)
    assert decision.fire_times == _minutes(*range(7))
    assert decision.next_fire == T0 + 50 * MINUTE


def test_backlog_inside_a_fall_back_hour() -> None:
    # `now` is 01:20 EST (the second 01:xx pass), given in the schedule's own zone with fold=1.
    cron = CronExpression.parse("0 */15 * * * ?")
    next_fire = datetime(2024, 11, 3, 1, 15, tzinfo=NY)  # 01:15 EDT (fold=0)
    now = datetime(2024, 11, 3, 1, 20, tzinfo=NY, fold=1)
    decision = plan_fires(cron, NY, next_fire, now, CATCH_UP_11)
    assert [f.isoformat() for f in decision.fire_times] == [
        "2024-11-03T01:15:00-04:00",
        "2024-11-03T01:30:00-04:00",
        "2024-11-03T01:45:00-04:00",
    ]
    assert decision.next_fire is not None
    assert decision.next_fire.isoformat() == "2024-11-03T02:00:00-05:00"
    # Not yet due: 01:15 EDT is later than 01:10 EDT.
    early = plan_fires(cron, NY, next_fire, datetime(2024, 11, 3, 1, 10, tzinfo=NY), SKIP)
    assert early == MisfireDecision((), next_fire)


def test_schedule_that_ends() -> None:
    cron = CronExpression.parse("0 0 0 1 1 ? 2030-2031")
    first = datetime(2030, 1, 1, tzinfo=UTC_ZONE)
    decision = plan_fires(cron, UTC_ZONE, first, datetime(2040, 1, 1, tzinfo=UTC_ZONE), CATCH_UP_11)
    assert decision.fire_times == (first, datetime(2031, 1, 1, tzinfo=UTC_ZONE))
    assert decision.next_fire is None


def test_naive_datetimes_and_bad_max_scan_are_refused() -> None:
    with pytest.raises(ValueError, match="now"):
        plan_fires(EVERY_MINUTE, UTC_ZONE, T0, datetime(2024, 1, 1), SKIP)
    with pytest.raises(ValueError, match="next_fire"):
        plan_fires(EVERY_MINUTE, UTC_ZONE, datetime(2024, 1, 1), T0, SKIP)
    with pytest.raises(ValueError, match="max_scan"):
        plan_fires(EVERY_MINUTE, UTC_ZONE, T0, T0, SKIP, max_scan=0)


# --- the policy value -------------------------------------------------------------------


def test_default_is_catch_up_11() -> None:
    assert RecurringMisfirePolicy.default() == RecurringMisfirePolicy.catch_up(11)
    assert RecurringMisfirePolicy.catch_up() == RecurringMisfirePolicy.catch_up(11)
    assert RecurringMisfirePolicy.default().to_storage() == ("CATCH_UP", 11)


@pytest.mark.parametrize(
    ("policy", "stored"),
    [(SKIP, ("SKIP", 1)), (FIRE_ONCE, ("FIRE_ONCE", 1)), (CATCH_UP_11, ("CATCH_UP", 11))],
)
def test_storage_round_trip(policy: RecurringMisfirePolicy, stored: tuple[str, int]) -> None:
    assert policy.to_storage() == stored
    assert RecurringMisfirePolicy.from_storage(*stored) == policy


def test_from_storage_ignores_the_limit_of_skip_and_fire_once() -> None:
    assert RecurringMisfirePolicy.from_storage("SKIP", 11) == SKIP
    assert RecurringMisfirePolicy.from_storage("fire_once", 0) == FIRE_ONCE
    assert RecurringMisfirePolicy.from_storage("catch_up", 3) == RecurringMisfirePolicy.catch_up(3)


@pytest.mark.parametrize(("kind", "n"), [("NEVER", 1), ("", 1), ("CATCH_UP", 0), ("CATCH_UP", -2)])
def test_from_storage_refuses_bad_values(kind: str, n: int) -> None:
    with pytest.raises(InvalidMisfirePolicy):
        RecurringMisfirePolicy.from_storage(kind, n)


@pytest.mark.parametrize("n", [0, -1, True, 1.5, "3"])
def test_catch_up_needs_a_positive_int(n: object) -> None:
    with pytest.raises(InvalidMisfirePolicy) as caught:
        RecurringMisfirePolicy.catch_up(n)  # type: ignore[arg-type]
    assert isinstance(caught.value, InvalidJobOptions)
    assert isinstance(caught.value, ValueError)


def test_policies_are_frozen_values() -> None:
    assert {SKIP, RecurringMisfirePolicy.skip()} == {SKIP}
    assert str(CATCH_UP_11) == "CATCH_UP(11)"
    assert str(FIRE_ONCE) == "FIRE_ONCE"
    with pytest.raises(AttributeError):
        SKIP.kind = MisfireKind.CATCH_UP  # type: ignore[misc]


# --- properties -------------------------------------------------------------------------

CRONS = [
    CronExpression.parse(text)
    for text in ("0 * * * * ?", "*/7 * * * * ?", "0 */15 * * * ?", "0 0 * * * ?", "0 0 2 * * ?")
]
POLICIES = st.one_of(
    st.just(SKIP), st.just(FIRE_ONCE), st.integers(1, 30).map(RecurringMisfirePolicy.catch_up)
)


@settings(max_examples=200)
@given(
    cron=st.sampled_from(CRONS),
    zone=st.sampled_from([UTC_ZONE, NY, ZoneInfo("Australia/Lord_Howe")]),
    start=st.datetimes(datetime(2024, 1, 1), datetime(2025, 1, 1), timezones=st.just(UTC)),
    backlog=st.integers(0, 60),
    extra=st.floats(0, 0.999),
    policy=POLICIES,
)
def test_plan_follows_the_policy(
    cron: CronExpression,
    zone: ZoneInfo,
    start: datetime,
    backlog: int,
    extra: float,
    policy: RecurringMisfirePolicy,
) -> None:
    first = cron.next_after(start, zone)
    assert first is not None
    # The schedule's occurrences from `first`; `now` falls after `backlog` of them are due.
    series = [first]
    while len(series) < backlog + 1:
        following = cron.next_after(series[-1], zone)
        assert following is not None
        series.append(following)
    if backlog == 0:
        now = first - timedelta(seconds=1)
    else:
        gap = series[backlog].astimezone(UTC) - series[backlog - 1].astimezone(UTC)
        now = series[backlog - 1].astimezone(UTC) + gap * extra
    due = series[:backlog]

    decision = plan_fires(cron, zone, first, now, policy)

    instants = [f.astimezone(UTC) for f in decision.fire_times]
    assert instants == sorted(instants)
    assert all(i <= now for i in instants)
    assert decision.next_fire is not None
    assert decision.next_fire.astimezone(UTC) > now
    assert decision.next_fire == cron.next_after(now, zone)
    if backlog == 0:
        assert decision.fire_times == ()
        assert decision.next_fire == first
    elif backlog == 1:
        assert decision.fire_times == (first,)
    elif policy.kind is MisfireKind.SKIP:
        assert decision.fire_times == ()
    elif policy.kind is MisfireKind.FIRE_ONCE:
        assert decision.fire_times == (first,)
    else:
        assert list(decision.fire_times) == due[: policy.max_catch_up]
