"""Conformance suite of the :class:`~ratchet.ports.QueueGaugeStore` capability (metrics gauges).

Subclass :class:`QueueGaugeStoreContract` where the ``store`` and ``clock`` fixtures exist (as for
:class:`~ratchet.testing.store_contract.StoreContract`). A store without the capability skips
every test as N/A.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from ratchet.domain.lifecycle import JobPriority, JobStatus
from ratchet.domain.model import OutcomeKind
from ratchet.ports import QueueGaugeStore
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import BOOST, NODE, new_job, outcome


class QueueGaugeStoreContract:
    """Queue depth by status and priority, and the oldest due job. Needs ``store``, ``clock``."""

    @pytest.fixture
    def gauges(self, store: Any) -> QueueGaugeStore:
        cap = store.capability(QueueGaugeStore)
        if cap is None:
            pytest.skip("N/A: the store has no QueueGaugeStore capability")
        return cap  # type: ignore[no-any-return]

    def test_an_empty_queue_has_no_depth_and_no_oldest_job(
        self, gauges: QueueGaugeStore, clock: FakeClock
    ) -> None:
        answer = gauges.queue_gauges(now=clock.now())
        assert answer.depths == {}
        assert answer.oldest_due is None

    def test_depth_counts_live_jobs_by_status_and_priority(
        self, store: Any, gauges: QueueGaugeStore, clock: FakeClock
    ) -> None:
        high = [new_job(clock, priority=JobPriority.HIGH) for _ in range(3)]
        normal = [new_job(clock) for _ in range(2)]
        store.insert_jobs([*high, *normal], now=clock.now())
        claimed = store.claim(NODE, 2, now=clock.now(), boost_interval=BOOST)
        assert len(claimed) == 2
        store.record_outcomes(
            NODE, [outcome(claimed[0], OutcomeKind.SUCCEEDED, clock)], now=clock.now()
        )
        depths = gauges.queue_gauges(now=clock.now()).depths
        pending, running = JobStatus.PENDING.value, JobStatus.RUNNING.value
        assert depths == {
            (pending, int(JobPriority.HIGH)): 1,
            (running, int(JobPriority.HIGH)): 1,
            (pending, int(JobPriority.NORMAL)): 2,
        }, "the claim took the two HIGH jobs; the finished one left the queue"

    def test_the_oldest_due_job_ignores_future_and_running_jobs(
        self, store: Any, gauges: QueueGaugeStore, clock: FakeClock
    ) -> None:
        first = new_job(clock)
        store.insert_jobs([first], now=clock.now())
        clock.advance(10)
        second = new_job(clock)
        future = new_job(clock, scheduled_time=clock.now() + timedelta(hours=1))
        store.insert_jobs([second, future], now=clock.now())
        assert gauges.queue_gauges(now=clock.now()).oldest_due == first.scheduled_time
        [claimed] = store.claim(NODE, 1, now=clock.now(), boost_interval=BOOST)
        assert claimed.job_id == first.job_id
        assert gauges.queue_gauges(now=clock.now()).oldest_due == second.scheduled_time
