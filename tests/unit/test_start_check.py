"""StartCheck: one store read confirms every attempt that starts at about the same time."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence

from ratchet.domain.errors import StoreUnavailable
from ratchet.engine.start_check import StartCheck


def wait_for(condition: object, timeout: float = 5.0) -> None:
    """Wait (bounded) until ``condition()`` holds: an observable state, not a fixed delay."""
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.001)


class GatedReads:
    """A store read that blocks until released and records what it was asked."""

    def __init__(self, owned: set[uuid.UUID], fail_first: bool = False) -> None:
        self.owned = owned
        self.asked: list[list[uuid.UUID]] = []
        self.release = threading.Event()
        self.fail_first = fail_first

    def __call__(self, jobs: Sequence[tuple[uuid.UUID, int]]) -> set[uuid.UUID]:
        self.asked.append([job_id for job_id, _ in jobs])
        self.release.wait(5)
        if self.fail_first and len(self.asked) == 1:
            raise StoreUnavailable("database unavailable: connection refused")
        return {job_id for job_id, _ in jobs if job_id in self.owned}


def confirm_all(
    check: StartCheck, reads: GatedReads, ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, object]:
    """Confirm ``ids`` from one thread each: the first one's read is held open until every
    other attempt has queued behind it."""
    results: dict[uuid.UUID, object] = {}

    def one(job_id: uuid.UUID) -> None:
        try:
            results[job_id] = check.confirm(job_id, 1)
        except StoreUnavailable as exc:
            results[job_id] = exc

    threads = [threading.Thread(target=one, args=(job_id,)) for job_id in ids]
    threads[0].start()
    wait_for(lambda: len(reads.asked) == 1)
    for thread in threads[1:]:
        thread.start()
    wait_for(lambda: check.waiting == len(ids) - 1)
    reads.release.set()
    for thread in threads:
        thread.join(5)
        assert not thread.is_alive()
    return results


def test_attempts_queued_behind_a_read_share_the_next_one() -> None:
    ids = [uuid.uuid4() for _ in range(10)]
    owned = set(ids[::2])
    reads = GatedReads(owned)
    check = StartCheck(reads)
    results = confirm_all(check, reads, ids)
    assert results == {job_id: job_id in owned for job_id in ids}
    asked = reads.asked
    assert asked[0] == [ids[0]]
    assert sorted(asked[1], key=str) == sorted(ids[1:], key=str)  # nine attempts, one read
    assert check.reads == 2
    assert check.waiting == 0


def test_a_failed_read_fails_the_attempts_it_served_and_the_next_read_works() -> None:
    ids = [uuid.uuid4() for _ in range(4)]
    reads = GatedReads(set(ids), fail_first=True)
    check = StartCheck(reads)
    results = confirm_all(check, reads, ids)
    assert isinstance(results[ids[0]], StoreUnavailable)
    assert all(results[job_id] is True for job_id in ids[1:])
    assert check.confirm(ids[0], 1) is True  # nobody is left holding the reader's role


def test_a_lone_attempt_reads_for_itself() -> None:
    job_id = uuid.uuid4()
    reads = GatedReads(set())
    reads.release.set()
    check = StartCheck(reads)
    assert check.confirm(job_id, 1) is False
    reads.owned.add(job_id)
    assert check.confirm(job_id, 1) is True
    assert reads.asked == [[job_id], [job_id]]
