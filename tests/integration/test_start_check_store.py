"""The start check's store read through a real worker: keys go to the store as job ids and
come back as keys, so a late start is confirmed (or refused) by what the store holds."""

from __future__ import annotations

import sample_jobs

from ratchet import Ratchet


def test_a_late_start_reads_the_store_and_owns_only_its_own_epoch(app: Ratchet) -> None:
    for _ in range(2):
        app.enqueue(sample_jobs.noop).submit()
    worker = app.worker(concurrency=2, batch_size=2)
    claimed = worker.poll_once()
    assert len(claimed) == 2
    check = worker.start_check
    for job in claimed:  # as if the claim's answer had gone stale before the slots started
        check.discard(job.key)
    first, second = claimed
    stale = (second.job_id.int, second.epoch + 1)  # an epoch the store never gave this node
    assert check.confirm(first.key) is True
    assert check.confirm(stale) is False
    assert check.confirm(second.key) is True
    assert check.reads == 3  # each answered by the store, not by the claim
