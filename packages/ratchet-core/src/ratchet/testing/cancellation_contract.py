"""Conformance suite of the :class:`~ratchet.ports.CancellationStore` capability.

``cancel_job(id, interrupt=True)``: the job is canceled at once, and the node running it finds a
request for that attempt. Subclass :class:`CancellationStoreContract` where the ``store`` and
``clock`` fixtures exist (as for :class:`~ratchet.testing.store_contract.StoreContract`). A store
without the capability skips every test as N/A.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.model import ClaimedJob, OutcomeKind
from ratchet.ids import uuid7
from ratchet.ports import CancellationStore, CancelRequest
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import BOOST, NODE, OTHER, new_job, outcome


class CancellationStoreContract:
    """Interrupting cancellations reach the owner node exactly once. Needs ``store``, ``clock``."""

    @pytest.fixture
    def cancels(self, store: Any) -> CancellationStore:
        cap = store.capability(CancellationStore)
        if cap is None:
            pytest.skip("N/A: the store has no CancellationStore capability")
        return cap  # type: ignore[no-any-return]

    def running(self, store: Any, clock: FakeClock, node: str = NODE) -> ClaimedJob:
        job = new_job(clock)
        store.insert_jobs([job], now=clock.now())
        claimed: list[ClaimedJob] = store.claim(node, 1, now=clock.now(), boost_interval=BOOST)
        assert [c.job_id for c in claimed] == [job.job_id]
        return claimed[0]

    # ------------------------------------------------------------------ tests
    def test_running_job_is_canceled_and_its_owner_gets_a_request(
        self, store: Any, cancels: CancellationStore, clock: FakeClock
    ) -> None:
        job = self.running(store, clock)
        clock.advance(5)
        assert cancels.request_cancellation(job.job_id, now=clock.now()).value
        assert store.get_job(job.job_id).status is JobStatus.CANCELED
        assert cancels.cancellation_requests(OTHER, now=clock.now()) == []
        assert cancels.cancellation_requests(NODE, now=clock.now()) == [
            CancelRequest(job.job_id, job.epoch, clock.now())
        ]
        assert cancels.cancellation_requests(NODE, now=clock.now()) == [], "taken once"

    def test_the_attempts_late_outcome_is_fenced_out(
        self, store: Any, cancels: CancellationStore, clock: FakeClock
    ) -> None:
        job = self.running(store, clock)
        assert cancels.request_cancellation(job.job_id, now=clock.now()).value
        late = outcome(job, OutcomeKind.SUCCEEDED, clock, result='"late"')
        assert store.record_outcomes(NODE, [late], now=clock.now()).fenced == (job.job_id,)
        record = store.get_job(job.job_id)
        assert record.status is JobStatus.CANCELED and record.result is None

    def test_a_job_that_is_not_running_is_canceled_without_a_request(
        self, store: Any, cancels: CancellationStore, clock: FakeClock
    ) -> None:
        pending = new_job(clock, scheduled_time=clock.now() + timedelta(hours=1))
        store.insert_jobs([pending], now=clock.now())
        assert cancels.request_cancellation(pending.job_id, now=clock.now()).value
        assert store.get_job(pending.job_id).status is JobStatus.CANCELED
        assert cancels.cancellation_requests(NODE, now=clock.now()) == []

    def test_missing_and_terminal_jobs_are_refused(
        self, store: Any, cancels: CancellationStore, clock: FakeClock
    ) -> None:
        assert not cancels.request_cancellation(uuid7(), now=clock.now()).value
        job = self.running(store, clock)
        assert (
            store.record_outcomes(
                NODE, [outcome(job, OutcomeKind.SUCCEEDED, clock)], now=clock.now()
            ).fenced
            == ()
        )
        assert not cancels.request_cancellation(job.job_id, now=clock.now()).value
        assert store.get_job(job.job_id).status is JobStatus.SUCCEEDED
        assert cancels.cancellation_requests(NODE, now=clock.now()) == []

    def test_each_node_gets_only_its_own_requests(
        self, store: Any, cancels: CancellationStore, clock: FakeClock
    ) -> None:
        mine = [self.running(store, clock, NODE) for _ in range(3)]
        theirs = self.running(store, clock, OTHER)
        for job in (*mine, theirs):
            clock.advance(1)
            assert cancels.request_cancellation(job.job_id, now=clock.now()).value
        got = cancels.cancellation_requests(NODE, now=clock.now())
        assert [r.job_id for r in got] == [j.job_id for j in mine], "oldest first"
        (other,) = cancels.cancellation_requests(OTHER, now=clock.now())
        assert (other.job_id, other.epoch) == (theirs.job_id, theirs.epoch)

    def test_requests_nobody_took_for_a_day_are_swept(
        self, store: Any, cancels: CancellationStore, clock: FakeClock
    ) -> None:
        orphan = self.running(store, clock, "dead-node")
        assert cancels.request_cancellation(orphan.job_id, now=clock.now()).value
        clock.advance(timedelta(days=1, seconds=1))
        fresh = self.running(store, clock)
        assert cancels.request_cancellation(fresh.job_id, now=clock.now()).value
        assert cancels.cancellation_requests("dead-node", now=clock.now()) == []
        assert len(cancels.cancellation_requests(NODE, now=clock.now())) == 1
