"""Batching windows: the running mean of run times, the window it gives, and how the outcome
writer and the poller use it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from timeout_harness import claimed_job

from ratchet.domain.batching import MAX_WINDOW, MIN_WINDOW, WINDOW_SHARE, RunTimes, gather_window
from ratchet.domain.model import Outcome, OutcomeKind
from ratchet.engine.completer import Completer
from ratchet.engine.slots import SlotTable

seconds = st.floats(min_value=0, max_value=1e6, allow_nan=False)
floors = st.floats(min_value=0, max_value=1, allow_nan=False)


@given(seconds, floors)
def test_a_window_lies_between_its_floor_and_the_longest_window(mean: float, floor: float) -> None:
    window = gather_window(mean, floor)
    assert floor <= window <= max(floor, MAX_WINDOW)


@given(seconds, seconds, floors)
def test_longer_runs_never_get_a_shorter_window(a: float, b: float, floor: float) -> None:
    shorter, longer = sorted((a, b))
    assert gather_window(shorter, floor) <= gather_window(longer, floor)


@given(floors)
def test_short_jobs_and_a_worker_that_ran_nothing_get_the_floor(floor: float) -> None:
    assert gather_window(None, floor) == floor
    assert gather_window(MIN_WINDOW / WINDOW_SHARE * 0.99, floor) == floor


def test_a_window_is_a_share_of_a_run_up_to_the_longest() -> None:
    assert gather_window(1.0) == pytest.approx(WINDOW_SHARE)
    assert gather_window(3600.0) == MAX_WINDOW
    assert gather_window(0.001) == 0.0  # no-op jobs: no wait


def test_the_mean_starts_at_the_first_batch_and_moves_by_its_weight() -> None:
    times = RunTimes(weight=0.5)
    assert times.mean is None
    times.observe([])
    assert times.mean is None
    times.observe([1.0, 3.0])
    assert times.mean == 2.0
    times.observe([4.0])
    assert times.mean == 3.0
    times.observe([-5.0, 1.0])  # a clock that stepped back counts as zero
    assert times.mean == 1.75


@given(st.lists(st.lists(seconds, min_size=1, max_size=5), min_size=1, max_size=20))
def test_the_mean_stays_within_the_times_seen(batches: list[list[float]]) -> None:
    times = RunTimes()
    for batch in batches:
        times.observe(batch)
    seen = [t for batch in batches for t in batch]
    assert times.mean is not None
    assert min(seen) * (1 - 1e-9) <= times.mean <= max(seen) * (1 + 1e-9)


def test_a_weight_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="weight"):
        RunTimes(weight=0)


# -- the outcome writer ---------------------------------------------------------------------
T0 = datetime(2026, 12, 4, tzinfo=UTC)


def outcome(run_seconds: float) -> Outcome:
    return Outcome(
        uuid.uuid4(),
        1,
        1,
        OutcomeKind.SUCCEEDED,
        T0,
        T0 + timedelta(seconds=run_seconds),
    )


class Writer:
    """A completer on a real slot table, whose batching window is recorded instead of slept:
    ``during`` outcomes arrive while it waits."""

    def __init__(self, in_flight: int, during: int = 0, run_seconds: float = 1.0) -> None:
        self.slots = SlotTable(64, write_ahead=64, claim_size=100)
        self.slots.claimed([claimed_job(timeout=None) for _ in range(in_flight)])
        self.waits: list[float] = []
        self.during = [outcome(run_seconds) for _ in range(during)]
        worker: Any = SimpleNamespace(slots=self.slots)
        self.completer = Completer(worker, 256, sleep=self._sleep)

    def _sleep(self, window: float) -> None:
        self.waits.append(window)
        for late in self.during:
            self.completer.put(late)


def test_a_small_batch_waits_one_window_for_the_runs_in_flight() -> None:
    writer = Writer(in_flight=3, during=3)
    batch = writer.completer.take_batch(outcome(1.0))
    assert len(batch) == 4, "the outcomes that came within the window joined the batch"
    assert writer.waits == [pytest.approx(WINDOW_SHARE)]


def test_a_run_that_ends_alone_is_written_at_once() -> None:
    writer = Writer(in_flight=0, during=3)
    assert len(writer.completer.take_batch(outcome(1.0))) == 1
    assert writer.waits == []


def test_no_op_jobs_are_written_without_a_window() -> None:
    writer = Writer(in_flight=3, during=3, run_seconds=0.0001)
    assert len(writer.completer.take_batch(outcome(0.0001))) == 1
    assert writer.waits == []


def test_half_a_claim_is_written_without_a_window() -> None:
    writer = Writer(in_flight=3, during=3)
    for _ in range(writer.slots.wake_at - 1):
        writer.completer.put(outcome(1.0))
    assert len(writer.completer.take_batch(outcome(1.0))) == writer.slots.wake_at
    assert writer.waits == []


def test_a_stop_request_ends_the_batch_without_a_window_and_stays_queued() -> None:
    writer = Writer(in_flight=3, during=3)
    writer.completer._queue.put(None)
    assert len(writer.completer.take_batch(outcome(1.0))) == 1
    assert writer.waits == []
    assert writer.completer._queue.get_nowait() is None
