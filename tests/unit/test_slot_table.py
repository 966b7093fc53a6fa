"""The slot table's accounting: runs, unwritten outcomes within and past the write-ahead, and
when a change wakes the producer."""

from __future__ import annotations

import threading
import time

from timeout_harness import claimed_job

from ratchet.domain.model import ClaimedJob
from ratchet.engine.slots import SlotTable


def jobs(n: int) -> list[ClaimedJob]:
    return [claimed_job(timeout=None) for _ in range(n)]


def test_without_write_ahead_a_slot_is_held_until_its_outcome_is_written() -> None:
    table = SlotTable(2)
    batch = jobs(2)
    table.claimed(batch)
    assert table.free() == 0
    assert table.run_ended(batch[0], outcome=True) is False
    assert table.free() == 0
    assert table.written(1) is True
    assert table.free() == 1


def test_outcomes_within_the_write_ahead_hold_no_slot_and_those_past_it_do() -> None:
    table = SlotTable(2, write_ahead=2, claim_size=2)
    first, second = jobs(2), jobs(2)
    table.claimed(first)
    for job in first:
        table.run_ended(job, outcome=True)
    assert table.free() == 2, "two unwritten outcomes fit the write-ahead"
    table.claimed(second)
    table.run_ended(second[0], outcome=True)
    assert table.free() == 0, "the third unwritten outcome holds its slot"
    table.run_ended(second[1], outcome=True)
    assert table.free() == 0
    table.written(2)
    assert table.free() == 2


def test_a_run_that_ends_wakes_the_producer_once_half_a_claim_is_free() -> None:
    table = SlotTable(8, write_ahead=8, claim_size=50)
    assert table.wake_at == 4
    batch = jobs(8)
    table.claimed(batch)
    wakes = [table.run_ended(job, outcome=True) for job in batch]
    assert wakes == [False, False, False, True, False, False, False, False]


def test_a_run_without_an_outcome_always_wakes_a_producer_that_found_work() -> None:
    table = SlotTable(8, write_ahead=8, claim_size=50)
    batch = jobs(2)
    table.claimed(batch)
    assert table.run_ended(batch[0], outcome=False) is True
    table.claimed([])
    assert table.run_ended(batch[1], outcome=False) is False, "the last poll found nothing"


def test_a_write_wakes_the_producer_only_when_a_slot_is_free() -> None:
    table = SlotTable(1, write_ahead=1, claim_size=1)
    first, second = jobs(1), jobs(1)
    table.claimed(first)
    table.run_ended(first[0], outcome=True)
    table.claimed(second)
    assert table.written(1) is False, "the second job still runs in the only slot"
    assert table.run_ended(second[0], outcome=True) is True
    assert table.written(1) is True


def test_gather_returns_once_a_run_ending_brings_half_a_claim_free() -> None:
    table = SlotTable(4, write_ahead=4, claim_size=4)
    batch = jobs(4)
    table.claimed(batch)
    table.run_ended(batch[0], outcome=True)
    ender = threading.Timer(0.05, table.run_ended, (batch[1],), {"outcome": True})
    ender.start()
    started = time.monotonic()
    assert table.gather(30) == 2
    assert time.monotonic() - started < 10, "gather returned when the run ended, not at 30 s"
    ender.join()


def test_gather_waits_no_longer_than_its_timeout_or_for_no_runs() -> None:
    table = SlotTable(4, write_ahead=4, claim_size=4)
    batch = jobs(4)
    table.claimed(batch)
    table.run_ended(batch[0], outcome=True)
    assert table.gather(0.01) == 1, "the other runs did not end in time"
    for job in batch[1:]:
        table.release(job)
    started = time.monotonic()
    assert table.gather(30) == 4
    assert time.monotonic() - started < 10, "with no run in flight there is nothing to wait for"
