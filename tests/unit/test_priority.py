"""Effective priority (age boost) and the claim order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from ratchet.domain.lifecycle import JobPriority
from ratchet.domain.priority import DEFAULT_BOOST_INTERVAL, claim_order_key, effective_priority

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
US = timedelta(microseconds=1)

waits = st.integers(0, 30 * 24 * 3600 * 10**6).map(lambda us: timedelta(microseconds=us))
intervals = st.integers(1, 24 * 3600 * 10**6).map(lambda us: timedelta(microseconds=us))
priorities = st.sampled_from(list(JobPriority))


def boost(wait: timedelta, interval: timedelta) -> int:
    """The reference formula, in whole microseconds: floor(wait / interval)."""
    return (wait // US) // (interval // US)


def test_default_interval_is_fifteen_minutes() -> None:
    assert timedelta(minutes=15) == DEFAULT_BOOST_INTERVAL


def test_boost_examples() -> None:
    interval = timedelta(minutes=15)
    assert effective_priority(1, NOW, NOW, interval) == 1
    assert effective_priority(1, NOW - 15 * MINUTE + US, NOW, interval) == 1
    assert effective_priority(1, NOW - 15 * MINUTE, NOW, interval) == 2
    assert effective_priority(1, NOW - 44 * MINUTE, NOW, interval) == 3
    assert effective_priority(1, NOW - 45 * MINUTE, NOW, interval) == 4


def test_a_job_not_yet_due_has_no_boost() -> None:
    assert effective_priority(2, NOW + timedelta(days=30), NOW, MINUTE) == 2


@given(priority=priorities, wait=waits, interval=intervals)
def test_boost_is_floor_of_wait_over_interval(
    priority: JobPriority, wait: timedelta, interval: timedelta
) -> None:
    assert effective_priority(priority, NOW - wait, NOW, interval) == priority + boost(
        wait, interval
    )


@given(
    priority=priorities,
    wait=waits,
    interval=st.integers(-3600, 0).map(lambda s: timedelta(seconds=s)),
)
def test_a_zero_or_negative_interval_disables_the_boost(
    priority: JobPriority, wait: timedelta, interval: timedelta
) -> None:
    assert effective_priority(priority, NOW - wait, NOW, interval) == priority


@given(wait=waits, more=waits, interval=intervals, priority=priorities)
def test_boost_never_decreases_with_waiting(
    wait: timedelta, more: timedelta, interval: timedelta, priority: JobPriority
) -> None:
    scheduled = NOW - wait
    assert effective_priority(priority, scheduled, NOW, interval) <= effective_priority(
        priority, scheduled, NOW + more, interval
    )


@given(low_wait=waits, high_wait=waits, interval=intervals)
def test_an_old_low_job_overtakes_a_new_high_job_exactly_when_the_formula_says(
    low_wait: timedelta, high_wait: timedelta, interval: timedelta
) -> None:
    low = (JobPriority.LOW, NOW - low_wait, "b-low")
    high = (JobPriority.HIGH, NOW - high_wait, "a-high")
    ordered = sorted([high, low], key=lambda j: claim_order_key(j[0], j[1], j[2], NOW, interval))
    low_eff = JobPriority.LOW + boost(low_wait, interval)
    high_eff = JobPriority.HIGH + boost(high_wait, interval)
    low_first = low_eff > high_eff or (low_eff == high_eff and low_wait > high_wait)
    assert (ordered[0] is low) is low_first


def test_low_overtakes_high_after_two_more_intervals_of_waiting() -> None:
    interval = timedelta(minutes=15)
    high = claim_order_key(JobPriority.HIGH, NOW, "h", NOW, interval)
    tied = claim_order_key(JobPriority.LOW, NOW - 30 * MINUTE, "l", NOW, interval)
    ahead = claim_order_key(JobPriority.LOW, NOW - 45 * MINUTE, "l", NOW, interval)
    behind = claim_order_key(JobPriority.LOW, NOW - 30 * MINUTE + US, "l", NOW, interval)
    assert tied < high  # same effective priority: the older job wins
    assert ahead < high
    assert high < behind


def test_claim_order_key_sort() -> None:
    interval = timedelta(minutes=15)
    jobs = [
        (JobPriority.NORMAL, NOW - MINUTE, "c"),
        (JobPriority.CRITICAL, NOW, "z"),
        (JobPriority.NORMAL, NOW - MINUTE, "a"),
        (JobPriority.NORMAL, NOW - 2 * MINUTE, "y"),
        (JobPriority.LOWEST, NOW - timedelta(hours=2), "x"),  # 0 + 8 = 8
        (JobPriority.HIGH, NOW + MINUTE, "f"),  # not due: no boost
    ]
    ordered = sorted(jobs, key=lambda j: claim_order_key(j[0], j[1], j[2], NOW, interval))
    assert [j[2] for j in ordered] == ["x", "z", "f", "y", "a", "c"]


jobs = st.lists(
    st.tuples(priorities, waits, st.text("abcdef", min_size=1, max_size=4)),
    min_size=1,
    max_size=12,
    unique_by=lambda j: j[2],
)


@given(jobs=jobs, interval=intervals)
def test_claim_order_is_effective_priority_desc_then_age_then_id(
    jobs: list[tuple[JobPriority, timedelta, str]], interval: timedelta
) -> None:
    keyed = sorted(jobs, key=lambda j: claim_order_key(j[0], NOW - j[1], j[2], NOW, interval))
    expected = sorted(jobs, key=lambda j: (-(j[0] + boost(j[1], interval)), -j[1], j[2]))
    assert keyed == expected
