"""StartCheck: one store read confirms a whole claimed batch just before it starts."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence

import pytest

from ratchet.domain.errors import StoreUnavailable
from ratchet.engine.start_check import Key, StartCheck


class Reads:
    """A store read over a set of owned jobs that records what it was asked; ``gate`` (when
    set) holds each read open until released."""

    def __init__(self, owned: set[Key], gate: threading.Event | None = None) -> None:
        self.owned = owned
        self.asked: list[list[Key]] = []
        self.gate = gate
        self.entered = threading.Event()
        self.fail = False

    def __call__(self, jobs: Sequence[Key]) -> set[Key]:
        self.asked.append(list(jobs))
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(5)
        if self.fail:
            raise StoreUnavailable("database unavailable: connection refused")
        return self.owned & set(jobs)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def keys(n: int) -> list[Key]:
    return [(uuid.uuid4().int, 1) for _ in range(n)]


def test_jobs_starting_right_after_their_claim_start_on_the_claims_answer() -> None:
    batch = keys(4)
    reads = Reads(set())
    clock = Clock()
    check = StartCheck(reads, max_age=0.05, monotonic=clock)
    check.expect(batch)
    clock.now += 0.05
    assert all(check.confirm(key) for key in batch)
    assert reads.asked == []
    assert check.pending == 0


def test_attempts_starting_late_read_again_together() -> None:
    batch = keys(3)
    canceled = batch[1]
    reads = Reads(set(batch) - {canceled})
    clock = Clock()
    check = StartCheck(reads, max_age=0.05, monotonic=clock)
    check.expect(batch)
    clock.now += 0.06
    assert check.confirm(batch[0]) is True
    assert check.confirm(batch[1]) is False  # canceled since the claim: never runs
    assert check.confirm(batch[2]) is True
    assert [set(a) for a in reads.asked] == [set(batch)]  # one read for the three


def test_an_attempt_without_an_answer_reads_for_itself() -> None:
    [key] = keys(1)
    reads = Reads(set())
    check = StartCheck(reads)
    assert check.confirm(key) is False
    reads.owned.add(key)
    assert check.confirm(key) is True
    assert reads.asked == [[key], [key]]


def test_an_attempt_waits_for_the_read_in_flight_that_covers_it() -> None:
    batch = keys(2)
    gate = threading.Event()
    reads = Reads({batch[1]}, gate)
    clock = Clock()
    check = StartCheck(reads, monotonic=clock)
    check.expect(batch)
    clock.now += 1
    results: dict[Key, bool] = {}
    first = threading.Thread(target=lambda: results.update({batch[0]: check.confirm(batch[0])}))
    first.start()
    assert reads.entered.wait(5)
    second = threading.Thread(target=lambda: results.update({batch[1]: check.confirm(batch[1])}))
    second.start()
    second.join(0.05)
    assert second.is_alive(), "the second attempt must wait for the read in flight"
    gate.set()
    first.join(5)
    second.join(5)
    assert results == {batch[0]: False, batch[1]: True}
    assert [set(a) for a in reads.asked] == [set(batch)]


def test_a_failed_read_fails_its_reader_and_the_others_read_again() -> None:
    batch = keys(3)
    reads = Reads(set(batch))
    reads.fail = True
    clock = Clock()
    check = StartCheck(reads, monotonic=clock)
    check.expect(batch)
    clock.now += 1
    with pytest.raises(StoreUnavailable):
        check.confirm(batch[0])
    reads.fail = False
    assert check.confirm(batch[1]) is True
    assert check.confirm(batch[2]) is True
    assert [set(a) for a in reads.asked] == [set(batch), {batch[1], batch[2]}]  # 2nd: both


def test_discard_forgets_an_attempt_that_ended() -> None:
    batch = keys(2)
    check = StartCheck(Reads(set(batch)))
    check.expect(batch)
    check.discard(batch[1])
    assert check.confirm(batch[0])
    assert check.pending == 0


def test_after_forget_all_a_fresh_claim_is_read_again() -> None:
    batch = keys(3)
    reads = Reads({batch[0]})  # the drain handed the others back
    clock = Clock()
    check = StartCheck(reads, max_age=0.05, monotonic=clock)
    check.expect(batch)
    check.forget_all()
    assert [check.confirm(key) for key in batch] == [True, False, False]
    assert len(reads.asked) == 3  # each reads for itself: no answer is left to share
