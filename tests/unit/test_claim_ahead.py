"""Claiming ahead of the threads: the run rate, the slots ahead it gives, and the slot table
that applies them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from timeout_harness import claimed_job

from ratchet.config import WorkerConfig
from ratchet.domain.batching import AHEAD_BUDGET, MAX_AHEAD, RATE_SPAN, RunRate, claim_ahead
from ratchet.domain.errors import ConfigurationError
from ratchet.engine.slots import SlotTable

rates = st.floats(min_value=0, max_value=1e7, allow_nan=False)
budgets = st.floats(min_value=0, max_value=10, allow_nan=False)


@given(rates, budgets, st.integers(min_value=0, max_value=10_000))
def test_the_slots_ahead_never_exceed_the_limit(rate: float, budget: float, limit: int) -> None:
    assert 0 <= claim_ahead(rate, budget, limit) <= limit


@given(rates, rates, budgets)
def test_faster_runs_never_get_fewer_slots_ahead(a: float, b: float, budget: float) -> None:
    slower, faster = sorted((a, b))
    assert claim_ahead(slower, budget) <= claim_ahead(faster, budget)


@given(rates)
def test_a_job_claimed_ahead_waits_about_the_budget(rate: float) -> None:
    ahead = claim_ahead(rate)
    if ahead < MAX_AHEAD:  # below the limit: what the runs get through in the budget
        assert ahead <= rate * AHEAD_BUDGET < ahead + 1


@given(rates)
def test_no_rate_or_no_budget_means_no_slots_ahead(rate: float) -> None:
    assert claim_ahead(None) == 0
    assert claim_ahead(rate, 0.0) == 0


def test_a_rate_is_measured_over_spans_of_at_least_the_minimum() -> None:
    rate = RunRate(weight=0.5)
    rate.observe(10, RATE_SPAN / 2)  # too short alone: pooled
    assert rate.per_second is None
    rate.observe(10, RATE_SPAN / 2)
    assert rate.per_second == pytest.approx(20 / RATE_SPAN)
    rate.observe(0, 1.0)  # an idle second halves it (weight 0.5)
    assert rate.per_second == pytest.approx(10 / RATE_SPAN)


def test_a_clock_that_steps_back_counts_as_no_time() -> None:
    rate = RunRate()
    rate.observe(5, -3.0)
    assert rate.per_second is None
    rate.observe(5, 0.1)
    assert rate.per_second == pytest.approx(100.0)


@pytest.mark.parametrize("weight", [0.0, 1.5])
def test_a_rate_needs_a_weight_in_zero_to_one(weight: float) -> None:
    with pytest.raises(ValueError, match="weight"):
        RunRate(weight=weight)


def test_a_negative_claim_ahead_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="claim_ahead must not be negative"):
        WorkerConfig(claim_ahead=timedelta(milliseconds=-1))
    assert WorkerConfig().claim_ahead == timedelta(milliseconds=50)


def _end_runs(slots: SlotTable, count: int) -> None:
    for _ in range(count):
        job = claimed_job()
        slots.claimed([job])
        slots.run_ended(job, outcome=False)


def test_fast_runs_give_the_table_slots_ahead_of_its_threads() -> None:
    slots = SlotTable(4, claim_size=200, ahead_budget=AHEAD_BUDGET)
    assert slots.pace(10.0) == 0  # no rate yet: only the threads
    assert (slots.capacity(), slots.free(), slots.wake_at) == (4, 4, 2)
    _end_runs(slots, 400)  # 4,000 runs a second
    assert slots.pace(10.1) == 200
    assert (slots.capacity(), slots.free(), slots.wake_at) == (204, 204, 100)
    slots.claimed([])  # a poll that found nothing: only the threads until one finds work
    assert (slots.capacity(), slots.free()) == (4, 4)


def test_slow_runs_and_a_zero_budget_keep_the_table_at_its_threads() -> None:
    slow = SlotTable(64, claim_size=200, ahead_budget=AHEAD_BUDGET)
    off = SlotTable(64, claim_size=200, ahead_budget=0.0)
    for slots in (slow, off):
        slots.pace(0.0)
    _end_runs(slow, 10)  # 10 runs a second: none ahead
    _end_runs(off, 400)
    assert slow.pace(1.0) == 0 and slow.capacity() == 64
    assert off.pace(1.0) == 0 and off.capacity() == 64


def test_the_slots_ahead_shrink_when_the_runs_stop_ending() -> None:
    slots = SlotTable(2, claim_size=200, ahead_budget=AHEAD_BUDGET)
    slots.pace(0.0)
    _end_runs(slots, 1000)
    first = slots.pace(0.1)
    later = [slots.pace(0.1 + i) for i in range(1, 20)]  # idle seconds
    assert first == MAX_AHEAD
    assert later == sorted(later, reverse=True) and later[-1] < first // 10


def test_a_run_with_an_outcome_counts_once_the_outcome_is_written() -> None:
    slots = SlotTable(4, write_ahead=4, claim_size=200, ahead_budget=AHEAD_BUDGET)
    slots.pace(0.0)
    jobs = [claimed_job() for _ in range(400)]
    slots.claimed(jobs)
    for job in jobs:
        slots.run_ended(job, outcome=True)
    assert slots.pace(0.1) == 0  # a stalled writer: the runs ended, nothing is written
    slots.written(400)
    assert slots.pace(0.2) == 50  # 4,000 a second, a quarter of the way from 0
