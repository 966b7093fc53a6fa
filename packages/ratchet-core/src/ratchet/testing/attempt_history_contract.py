"""Conformance suite of the attempt history of a SQL store.

An attempt's row is written once, when it ends: a claim writes none (the running attempt is
read from the job's live row), an outcome, a cancellation or a takeover writes it ended. A row
that an earlier version opened at the claim (outcome ``RUNNING``) is shown once and replaced
when the attempt ends. Subclass :class:`AttemptHistoryContract` where the ``store`` (a migrated,
empty :class:`~ratchet.sql.store.SqlStore`) and ``clock`` fixtures exist.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import func, insert, select

from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.model import AttemptRecord, ClaimedJob, OutcomeKind
from ratchet.domain.watcher import NodeInfo, WatcherReport
from ratchet.ports import WatcherStore
from ratchet.sql import schema
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import BOOST, NODE, OTHER, new_job, outcome
from ratchet.testing.watcher_contract import SETTINGS, fail_or_retry

EXE = schema.job_execution


class AttemptHistoryContract:
    """The attempt history every SQL store keeps."""

    # ------------------------------------------------------------------ helpers
    def claimed(self, store: Any, clock: FakeClock, node: str = NODE, **job: Any) -> ClaimedJob:
        new = new_job(clock, **job)
        store.insert_jobs([new], now=clock.now())
        [claimed] = store.claim(node, 1, now=clock.now(), boost_interval=BOOST)
        assert claimed.job_id == new.job_id
        return claimed  # type: ignore[no-any-return]

    def rows(self, store: Any, job_id: uuid.UUID) -> int:
        """The attempt rows stored for ``job_id``."""
        with store.engine.connect() as conn:
            return int(
                conn.execute(
                    select(func.count()).select_from(EXE).where(EXE.c.job_id == job_id)
                ).scalar_one()
            )

    def open_as_an_earlier_version(self, store: Any, job: ClaimedJob, node: str, at: Any) -> None:
        """The row an earlier version wrote at the claim of ``job``."""
        with store.engine.begin() as conn:
            conn.execute(
                insert(EXE).values(
                    job_id=job.job_id,
                    attempt_no=job.attempt,
                    epoch=job.epoch,
                    node_id=node,
                    started_at=at,
                    outcome=JobStatus.RUNNING.value,
                )
            )

    def register(self, ws: WatcherStore, clock: FakeClock, *nodes: str) -> None:
        for node in nodes:
            info = NodeInfo(node_id=node, node_name=node, host="host-1", pid=1, slots=4)
            ws.register_incarnation(info, now=clock.now())

    def watch(self, ws: WatcherStore, clock: FakeClock) -> WatcherReport:
        now = clock.now()
        return ws.watch(now=now, settings=SETTINGS, decide=lambda s: fail_or_retry(s, now))

    def running(self, job: ClaimedJob, node: str, started_at: Any) -> AttemptRecord:
        return AttemptRecord(
            job_id=job.job_id,
            attempt=job.attempt,
            epoch=job.epoch,
            node_id=node,
            started_at=started_at,
            finished_at=None,
            outcome=JobStatus.RUNNING.value,
            error=None,
        )

    # ------------------------------------------------------------------ tests
    def test_a_claim_writes_no_row_and_each_ending_writes_one(
        self, store: Any, clock: FakeClock
    ) -> None:
        claimed_at = clock.now()
        first = self.claimed(store, clock, max_retries=1)
        assert self.rows(store, first.job_id) == 0, "the running attempt is its live row"
        assert store.attempts(first.job_id) == [self.running(first, NODE, claimed_at)]
        clock.advance(timedelta(seconds=2))
        failed = outcome(first, OutcomeKind.RETRY, clock, error="boom", retry_at=clock.now())
        assert store.record_outcomes(NODE, [failed], now=clock.now()).fenced == ()
        [ended] = store.attempts(first.job_id)
        assert (ended.attempt, ended.epoch, ended.node_id, ended.outcome, ended.error) == (
            1,
            first.epoch,
            NODE,
            "RETRY",
            "boom",
        )
        assert (ended.started_at, ended.finished_at) == (claimed_at, clock.now())
        clock.advance(timedelta(seconds=1))
        again_at = clock.now()
        [second] = store.claim(OTHER, 1, now=again_at, boost_interval=BOOST)
        assert store.attempts(first.job_id) == [ended, self.running(second, OTHER, again_at)]
        done = outcome(second, OutcomeKind.SUCCEEDED, clock)
        assert store.record_outcomes(OTHER, [done], now=clock.now()).fenced == ()
        history = store.attempts(first.job_id)
        assert [(a.attempt, a.node_id, a.outcome) for a in history] == [
            (1, NODE, "RETRY"),
            (2, OTHER, "SUCCEEDED"),
        ]
        assert self.rows(store, first.job_id) == 2

    def test_a_fenced_outcome_writes_no_row(self, store: Any, clock: FakeClock) -> None:
        job = self.claimed(store, clock)
        stale = outcome(job, OutcomeKind.SUCCEEDED, clock, epoch=job.epoch + 1)
        assert store.record_outcomes(NODE, [stale], now=clock.now()).fenced == (job.job_id,)
        theirs = outcome(job, OutcomeKind.SUCCEEDED, clock)
        assert store.record_outcomes(OTHER, [theirs], now=clock.now()).fenced == (job.job_id,)
        assert self.rows(store, job.job_id) == 0
        assert [a.outcome for a in store.attempts(job.job_id)] == ["RUNNING"]

    def test_a_row_an_earlier_version_opened_is_shown_once_and_replaced_by_the_cancel(
        self, store: Any, clock: FakeClock
    ) -> None:
        started = clock.now()
        job = self.claimed(store, clock)
        self.open_as_an_earlier_version(store, job, NODE, started)
        assert store.attempts(job.job_id) == [self.running(job, NODE, started)]
        clock.advance(timedelta(seconds=1))
        assert store.cancel_job(job.job_id, now=clock.now()).value
        [canceled] = store.attempts(job.job_id)
        assert (canceled.outcome, canceled.started_at, canceled.finished_at) == (
            "CANCELED",
            started,
            clock.now(),
        )

    def test_a_row_an_earlier_version_opened_is_replaced_by_a_takeover(
        self, store: Any, clock: FakeClock
    ) -> None:
        ws = store.capability(WatcherStore)
        assert ws is not None
        self.register(ws, clock, NODE, OTHER)
        started = clock.now()
        job = self.claimed(store, clock)
        self.open_as_an_earlier_version(store, job, NODE, started)
        clock.advance(SETTINGS.dead_after)
        assert ws.beat(OTHER, now=clock.now())
        assert self.watch(ws, clock).orphaned == 1
        [taken] = ws.takeover(OTHER, 1, now=clock.now(), settings=SETTINGS)
        history = [(a.epoch, a.node_id, a.outcome) for a in store.attempts(job.job_id)]
        assert history == [(job.epoch, NODE, "ABANDONED"), (taken.epoch, OTHER, "RUNNING")]
        assert self.rows(store, job.job_id) == 1

    def test_a_row_an_earlier_version_opened_is_replaced_when_the_watcher_ends_it(
        self, store: Any, clock: FakeClock
    ) -> None:
        ws = store.capability(WatcherStore)
        assert ws is not None
        self.register(ws, clock, NODE)
        started = clock.now()
        job = self.claimed(store, clock, max_retries=0)
        self.open_as_an_earlier_version(store, job, NODE, started)
        clock.advance(SETTINGS.dead_after)
        assert self.watch(ws, clock).orphaned == 1
        clock.advance(SETTINGS.takeover_window)
        assert [o.job_id for o in self.watch(ws, clock).expired] == [job.job_id]
        [dead] = store.attempts(job.job_id)
        assert (dead.epoch, dead.outcome, dead.started_at) == (job.epoch, "DEAD", started)
