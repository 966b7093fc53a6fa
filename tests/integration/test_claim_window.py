"""The poller's batching window: a poll with fewer free slots than half a claim waits for the
runs in flight, longer when the jobs run long."""

from __future__ import annotations

import pytest
import sample_jobs

from ratchet import Ratchet
from ratchet.domain.batching import WINDOW_SHARE
from ratchet.engine.producer import CLAIM_GATHER_SECONDS


@pytest.mark.parametrize(
    ("mean_run", "window"),
    [(None, CLAIM_GATHER_SECONDS), (0.001, CLAIM_GATHER_SECONDS), (1.0, WINDOW_SHARE)],
)
def test_a_short_poll_waits_a_window_sized_by_the_run_times(
    app: Ratchet, monkeypatch: pytest.MonkeyPatch, mean_run: float | None, window: float
) -> None:
    for i in range(4):
        app.enqueue(sample_jobs.record, i).submit()
    worker = app.worker(concurrency=4, batch_size=4)
    assert len(worker.poll_once()) == 4
    worker.slots.release(worker.slots.occupying_jobs()[0])  # one run ended, three in flight
    assert worker.slots.free() == 1 < worker.slots.wake_at == 2
    worker.slots.run_times.mean = mean_run
    waited: list[float] = []

    def gather(timeout: float) -> int:
        waited.append(timeout)
        return worker.slots.free()

    monkeypatch.setattr(worker.slots, "gather", gather)
    worker.poll_once()
    assert waited == [pytest.approx(window)]
