"""Conformance suite of :class:`~ratchet.ports.RetentionStore` and
:class:`~ratchet.ports.JobLogStore`: removal of ended jobs, the archive, tombstones, the
dead-letter queue and job logs.

Subclass :class:`RetentionStoreContract` where the ``store`` and ``clock`` fixtures exist (those
of :class:`~ratchet.testing.store_contract.StoreContract`). A store without a capability skips
its tests as N/A.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ratchet.domain.affinity import Affinity
from ratchet.domain.errors import InvalidJobOptions
from ratchet.domain.joblog import JobLogLine, LogLevel
from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.model import ClaimedJob, NewJob, OutcomeKind
from ratchet.domain.retention import DeadLetterFilter, PageCursor
from ratchet.domain.text import storable_text
from ratchet.ids import uuid7
from ratchet.ports import JobLogStore, RetentionStore, WorkflowStore
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import BOOST, NODE, keyed_by_id, new_job, outcome
from ratchet.testing.workflow_contract import WorkflowStoreContract

T0 = datetime(2026, 1, 5, 12, 0, 0, tzinfo=UTC)
DAY = timedelta(days=1)
_flows = WorkflowStoreContract()


def end_jobs(
    store: Any,
    clock: FakeClock,
    n: int,
    kind: OutcomeKind = OutcomeKind.SUCCEEDED,
    **overrides: Any,
) -> list[NewJob]:
    """``n`` jobs inserted, claimed and ended with ``kind`` now (DEAD: FAILED)."""
    jobs = [new_job(clock, **overrides) for _ in range(n)]
    store.insert_jobs(jobs, now=clock.now())
    claimed = claim_all(store, clock, {j.job_id for j in jobs})
    error = None if kind is OutcomeKind.SUCCEEDED else f"RuntimeError: failed at {clock.now()}"
    written = store.record_outcomes(
        NODE, [outcome(c, kind, clock, error=error) for c in claimed], now=clock.now()
    )
    assert written.fenced == ()
    return jobs


def claim_all(store: Any, clock: FakeClock, ids: set[uuid.UUID]) -> list[ClaimedJob]:
    """Claim until every job of ``ids`` is claimed (others claimed on the way are returned too)."""
    claimed: list[ClaimedJob] = []
    while ids - {c.job_id for c in claimed}:
        got = store.claim(NODE, 500, now=clock.now(), boost_interval=BOOST)
        assert got, "jobs expected to be due were not claimed"
        claimed += got
    return claimed


def exists(store: Any, job_id: uuid.UUID) -> bool:
    return store.get_job(job_id) is not None


def lines_of(job_id: uuid.UUID, epoch: int, messages: Sequence[str], at: datetime) -> list[Any]:
    return [
        JobLogLine(job_id, epoch, i, 1, at, LogLevel.INFO, storable_text(m))
        for i, m in enumerate(messages)
    ]


class RetentionStoreContract:
    """Removal, archive, tombstones, dead letters and job logs. Needs ``store`` and ``clock``."""

    @pytest.fixture
    def retention(self, store: Any, clock: FakeClock) -> RetentionStore:
        cap = store.capability(RetentionStore)
        if cap is None:
            pytest.skip("N/A: the store has no RetentionStore capability")
        clock.set(T0)
        return cap  # type: ignore[no-any-return]

    @pytest.fixture
    def logs(self, store: Any, clock: FakeClock) -> JobLogStore:
        cap = store.capability(JobLogStore)
        if cap is None:
            pytest.skip("N/A: the store has no JobLogStore capability")
        clock.set(T0)
        return cap  # type: ignore[no-any-return]

    def prune(
        self, retention: RetentionStore, clock: FakeClock, status: JobStatus, **kwargs: Any
    ) -> int:
        options: dict[str, Any] = {"limit": 1000, "archive": False}
        options.update(kwargs)
        before = options.pop("before", clock.now())
        return retention.prune_jobs(status, before, now=clock.now(), node_id=NODE, **options)

    # ------------------------------------------------------------------ removal
    def test_only_jobs_that_ended_before_the_cutoff_with_that_status_go(
        self, store: Any, retention: RetentionStore, clock: FakeClock
    ) -> None:
        old = end_jobs(store, clock, 3)
        old_canceled = new_job(clock)
        store.insert_jobs([old_canceled], now=clock.now())
        assert store.cancel_job(old_canceled.job_id, now=clock.now()).value
        old_failed = end_jobs(store, clock, 1, OutcomeKind.DEAD)
        clock.advance(DAY)
        cutoff = clock.now()
        clock.advance(timedelta(seconds=1))
        recent = end_jobs(store, clock, 2)
        live = new_job(clock, scheduled_time=clock.now() + DAY)
        store.insert_jobs([live], now=clock.now())

        assert retention.count_prunable(JobStatus.SUCCEEDED, cutoff) == 3
        assert self.prune(retention, clock, JobStatus.SUCCEEDED, before=cutoff) == 3
        assert not any(exists(store, j.job_id) for j in old)
        assert all(exists(store, j.job_id) for j in [*recent, live, old_canceled, *old_failed])
        assert retention.count_prunable(JobStatus.SUCCEEDED, cutoff) == 0
        assert self.prune(retention, clock, JobStatus.CANCELED, before=cutoff) == 1
        assert not exists(store, old_canceled.job_id)
        assert exists(store, old_failed[0].job_id), "the dead-letter queue is not retention's"

    def test_a_removed_job_takes_its_history_and_logs_but_not_its_tombstone(
        self, store: Any, retention: RetentionStore, clock: FakeClock
    ) -> None:
        [job] = end_jobs(store, clock, 1, tags=("keep-me",))
        log_store = store.capability(JobLogStore)
        if log_store is not None:
            log_store.append_job_logs(lines_of(job.job_id, 1, ["one", "two"], clock.now()))
        assert store.attempts(job.job_id)
        clock.advance(DAY)
        assert self.prune(retention, clock, JobStatus.SUCCEEDED) == 1
        assert store.attempts(job.job_id) == []
        if log_store is not None:
            assert log_store.job_logs(job.job_id) == []
        assert store.find_by_idempotency_key(job.idempotency_key) == job.job_id
        again = new_job(clock, idempotency_key=job.idempotency_key)
        [result] = store.insert_jobs([again], now=clock.now())
        assert (result.inserted, result.job_id) == (False, job.job_id), "the key stays taken"

    def test_a_removed_job_takes_its_node_tag_affinity(
        self, store: Any, retention: RetentionStore, clock: FakeClock
    ) -> None:
        """A job that declared node tags is removed with them: nothing of it stays behind to
        fail the removal or to attach to a job stored later under the same id."""
        affinity = Affinity(exclude=frozenset({"spot", "arm64"}))
        [job] = end_jobs(store, clock, 1, affinity=affinity)
        assert store.get_job(job.job_id).affinity == affinity
        clock.advance(DAY)
        assert self.prune(retention, clock, JobStatus.SUCCEEDED) == 1
        assert not exists(store, job.job_id)
        later = Affinity(exclude=frozenset({"spot"}))
        store.insert_jobs([new_job(clock, job_id=job.job_id, affinity=later)], now=clock.now())
        assert store.get_job(job.job_id).affinity == later

    def test_removal_goes_in_batches_oldest_first(
        self, store: Any, retention: RetentionStore, clock: FakeClock
    ) -> None:
        first = end_jobs(store, clock, 3)
        clock.advance(timedelta(minutes=1))
        second = end_jobs(store, clock, 3)
        clock.advance(DAY)
        assert self.prune(retention, clock, JobStatus.SUCCEEDED, limit=3) == 3
        assert not any(exists(store, j.job_id) for j in first)
        assert all(exists(store, j.job_id) for j in second)
        assert self.prune(retention, clock, JobStatus.SUCCEEDED, limit=3) == 3
        assert self.prune(retention, clock, JobStatus.SUCCEEDED, limit=3) == 0

    def test_archival_keeps_the_job_and_its_attempts(
        self, store: Any, retention: RetentionStore, clock: FakeClock
    ) -> None:
        [job] = end_jobs(store, clock, 1, tags=("report",), business_key="bk-1")
        clock.advance(DAY)
        assert retention.archived_job(job.job_id) is None
        assert self.prune(retention, clock, JobStatus.SUCCEEDED, archive=True) == 1
        assert not exists(store, job.job_id)
        doc = retention.archived_job(job.job_id)
        assert doc is not None
        assert (doc["final_status"], doc["target"], doc["business_key"]) == (
            "SUCCEEDED",
            job.target,
            "bk-1",
        )
        assert doc["idempotency_key"] == job.idempotency_key
        assert doc["archived_at"] == clock.now() and doc["archived_by"] == NODE
        assert [(a["attempt"], a["outcome"]) for a in doc["attempt_history"]] == [(1, "SUCCEEDED")]

    def test_a_chain_head_stays_while_its_later_steps_exist(
        self, store: Any, retention: RetentionStore, clock: FakeClock
    ) -> None:
        if store.capability(WorkflowStore) is None:
            pytest.skip("N/A: no flows")
        steps = _flows.chain(store, clock, 3)
        for _ in steps:
            [job] = _flows.claim(store, clock)
            _flows.finish(store, clock, [job])
        clock.advance(DAY)
        # One batch of one: only the last step has no dependant.
        assert self.prune(retention, clock, JobStatus.SUCCEEDED, limit=1) == 1
        assert [exists(store, s.job_id) for s in steps] == [True, True, False]
        assert self.prune(retention, clock, JobStatus.SUCCEEDED) == 1
        assert self.prune(retention, clock, JobStatus.SUCCEEDED) == 1
        assert not any(exists(store, s.job_id) for s in steps)

    def test_a_batch_parent_stays_while_a_child_is_stored(
        self, store: Any, retention: RetentionStore, clock: FakeClock
    ) -> None:
        if store.capability(WorkflowStore) is None:
            pytest.skip("N/A: no flows")
        parent, (done, pending), _ = _flows.batch(store, clock, 2)
        claimed = _flows.claim(store, clock)
        _flows.finish(store, clock, [c for c in claimed if c.job_id == done.job_id])
        assert store.cancel_job(parent.job_id, now=clock.now()).value
        assert store.get_job(pending.job_id).status is JobStatus.CANCELED
        clock.advance(DAY)
        assert self.prune(retention, clock, JobStatus.SUCCEEDED) == 1
        # The parent and its last child ended together; only the child may go first.
        assert self.prune(retention, clock, JobStatus.CANCELED) == 1
        assert exists(store, parent.job_id) and not exists(store, pending.job_id)
        assert store.get_batch(parent.job_id) is not None
        assert self.prune(retention, clock, JobStatus.CANCELED) == 1
        assert not exists(store, parent.job_id)
        assert store.get_batch(parent.job_id) is None, "the batch row goes with its parent"

    def test_live_jobs_are_never_removed(
        self, store: Any, retention: RetentionStore, clock: FakeClock
    ) -> None:
        jobs = [new_job(clock) for _ in range(3)]
        store.insert_jobs(jobs, now=clock.now())
        store.claim(NODE, 1, now=clock.now(), boost_interval=BOOST)
        clock.advance(DAY * 400)
        for status in (JobStatus.SUCCEEDED, JobStatus.CANCELED, JobStatus.FAILED):
            assert self.prune(retention, clock, status) == 0
        assert all(exists(store, j.job_id) for j in jobs)

    def test_a_removal_skips_a_row_another_transaction_holds(
        self, store: Any, retention: RetentionStore, clock: FakeClock
    ) -> None:
        if not store.capabilities.skip_locked:
            pytest.skip("N/A: this database serialises writers instead of locking rows")
        from sqlalchemy import select

        from ratchet.sql import schema

        held, free = end_jobs(store, clock, 2)
        clock.advance(DAY)
        locked = threading.Event()
        release = threading.Event()

        def hold() -> None:
            with store.engine.begin() as conn:
                stmt = select(schema.job.c.job_id).where(schema.job.c.job_id == held.job_id)
                conn.execute(stmt.with_for_update()).all()
                locked.set()
                release.wait(30)

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            assert locked.wait(30)
            assert self.prune(retention, clock, JobStatus.SUCCEEDED) == 1
            assert exists(store, held.job_id) and not exists(store, free.job_id)
        finally:
            release.set()
            holder.join(30)
        assert self.prune(retention, clock, JobStatus.SUCCEEDED) == 1

    # ------------------------------------------------------------------ tombstones
    def test_tombstones_of_ended_jobs_older_than_the_cutoff_are_purged(
        self, store: Any, retention: RetentionStore, clock: FakeClock
    ) -> None:
        [ended] = end_jobs(store, clock, 1)
        live = new_job(clock, scheduled_time=clock.now() + DAY * 100)
        store.insert_jobs([live], now=clock.now())
        clock.advance(DAY * 10)
        [recent] = end_jobs(store, clock, 1)
        cutoff = clock.now() - DAY
        assert retention.count_tombstones(cutoff) == 1
        assert retention.purge_tombstones(cutoff, limit=100) == 1
        assert store.find_by_idempotency_key(ended.idempotency_key) is None
        assert store.find_by_idempotency_key(live.idempotency_key) == live.job_id
        assert store.find_by_idempotency_key(recent.idempotency_key) == recent.job_id
        reuse = new_job(clock, idempotency_key=ended.idempotency_key)
        [result] = store.insert_jobs([reuse], now=clock.now())
        assert result.inserted and result.job_id == reuse.job_id

    def test_a_removed_job_keyed_by_its_own_id_takes_its_key_along(
        self, store: Any, retention: RetentionStore, clock: FakeClock
    ) -> None:
        """A job keyed by its own id leaves no tombstone: its row holds its key."""
        [given] = end_jobs(store, clock, 1)
        job_id = uuid7()
        [own] = end_jobs(store, clock, 1, job_id=job_id, idempotency_key=str(job_id))
        assert store.find_by_idempotency_key(own.idempotency_key) == own.job_id
        clock.advance(DAY)
        assert self.prune(retention, clock, JobStatus.SUCCEEDED) == 2
        assert retention.count_tombstones(clock.now()) == 1
        assert store.find_by_idempotency_key(given.idempotency_key) == given.job_id
        assert store.find_by_idempotency_key(own.idempotency_key) is None

    def test_the_own_id_purge_pages_through_the_keys_and_keeps_given_ones(
        self, store: Any, retention: RetentionStore, clock: FakeClock
    ) -> None:
        """``purge_own_id_keys`` reads the key rows page by page in key order and deletes only
        rows whose key is their job's own id; a key given to a job is never one of them."""
        given = [new_job(clock, idempotency_key=f"order-{i}") for i in range(5)]
        spelled = new_job(clock, idempotency_key=str(uuid7()))  # a UUID, not its own id
        store.insert_jobs([*given, spelled, keyed_by_id(clock)], now=clock.now())
        seen: list[str] = []
        after: str | None = None
        while True:
            found, after = retention.purge_own_id_keys(after, limit=2)
            assert found == 0
            if after is None:
                break
            seen.append(after)
        assert seen == sorted(seen) and len(seen) == 3, "three pages of two, in key order"
        for job in [*given, spelled]:
            assert store.find_by_idempotency_key(job.idempotency_key) == job.job_id

    # ------------------------------------------------------------------ dead letters
    def test_dead_letters_list_newest_first_with_filters_and_a_cursor(
        self, store: Any, retention: RetentionStore, clock: FakeClock
    ) -> None:
        failed = []
        for i in range(5):
            failed += end_jobs(
                store,
                clock,
                1,
                OutcomeKind.DEAD,
                target="tests.jobs:noop" if i % 2 else "tests.jobs:other",
                tags=("nightly",) if i < 2 else (),
            )
            clock.advance(timedelta(minutes=1))
        end_jobs(store, clock, 2)  # not dead letters
        everything = DeadLetterFilter()
        assert retention.count_dead_letters(everything) == 5
        first = retention.list_dead_letters(everything, limit=2)
        assert [j.job_id for j in first] == [failed[4].job_id, failed[3].job_id]
        assert {j.status for j in first} == {JobStatus.FAILED}
        last = first[-1]
        assert last.terminated_at is not None
        rest = retention.list_dead_letters(
            everything, limit=10, after=PageCursor(last.terminated_at, last.job_id)
        )
        assert [j.job_id for j in rest] == [f.job_id for f in reversed(failed[:3])]
        by_target = DeadLetterFilter(target="tests.jobs:other")
        assert {j.job_id for j in retention.list_dead_letters(by_target, limit=10)} == {
            failed[0].job_id,
            failed[2].job_id,
            failed[4].job_id,
        }
        by_tag = DeadLetterFilter(tag="NIGHTLY")
        assert retention.count_dead_letters(by_tag) == 2
        window = DeadLetterFilter(
            failed_after=T0 + timedelta(minutes=1), failed_before=T0 + timedelta(minutes=3)
        )
        assert [j.job_id for j in retention.list_dead_letters(window, limit=10)] == [
            failed[2].job_id,
            failed[1].job_id,
        ]
        needle = DeadLetterFilter(error_contains=f"failed at {T0 + timedelta(minutes=3)}")
        assert [j.job_id for j in retention.list_dead_letters(needle, limit=10)] == [
            failed[3].job_id
        ]
        odd = DeadLetterFilter(error_contains="100%_of")
        assert retention.count_dead_letters(odd) == 0, "LIKE wildcards are matched literally"

    def test_replaying_dead_letters_by_filter_is_bounded_and_complete(
        self, store: Any, retention: RetentionStore, clock: FakeClock
    ) -> None:
        tagged = end_jobs(store, clock, 3, OutcomeKind.DEAD, tags=("replay",))
        other = end_jobs(store, clock, 2, OutcomeKind.DEAD)
        with pytest.raises(InvalidJobOptions):
            retention.replay_dead_letters(DeadLetterFilter(), 0, now=clock.now())
        with pytest.raises(InvalidJobOptions):
            retention.replay_dead_letters(DeadLetterFilter(), 1001, now=clock.now())
        assert (
            retention.replay_dead_letters(DeadLetterFilter(tag="replay"), 2, now=clock.now()) == 2
        )
        statuses = [store.get_job(j.job_id).status for j in tagged]
        assert statuses.count(JobStatus.PENDING) == 2 and statuses.count(JobStatus.FAILED) == 1
        assert all(store.get_job(j.job_id).status is JobStatus.FAILED for j in other)
        assert retention.replay_dead_letters(DeadLetterFilter(), 1000, now=clock.now()) == 3
        assert retention.count_dead_letters(DeadLetterFilter()) == 0

    def test_purging_dead_letters_by_filter(
        self, store: Any, retention: RetentionStore, clock: FakeClock
    ) -> None:
        old = end_jobs(store, clock, 2, OutcomeKind.DEAD)
        clock.advance(DAY * 100)
        new = end_jobs(store, clock, 2, OutcomeKind.DEAD)
        flt = DeadLetterFilter(failed_before=clock.now() - DAY * 90)
        assert retention.purge_dead_letters(flt, limit=1, now=clock.now()) == 1
        assert retention.purge_dead_letters(flt, limit=10, now=clock.now()) == 1
        assert not any(exists(store, j.job_id) for j in old)
        assert all(exists(store, j.job_id) for j in new)
        assert retention.purge_dead_letters(flt, limit=10, now=clock.now()) == 0

    # ------------------------------------------------------------------ job logs
    def test_job_log_lines_round_trip_in_order_once(
        self, store: Any, logs: JobLogStore, clock: FakeClock
    ) -> None:
        [job] = end_jobs(store, clock, 1)
        first = lines_of(job.job_id, 1, ["a", "b", "c"], clock.now())
        assert logs.append_job_logs(first) == 3
        assert logs.append_job_logs(first[1:]) == 0, "a stored line is not stored twice"
        second = lines_of(job.job_id, 2, ["retry"], clock.now() + timedelta(seconds=1))
        logs.append_job_logs(second)
        got = logs.job_logs(job.job_id)
        assert [(ln.epoch, ln.seq, ln.message) for ln in got] == [
            (1, 0, "a"),
            (1, 1, "b"),
            (1, 2, "c"),
            (2, 0, "retry"),
        ]
        assert got[0] == first[0]

    def test_hostile_log_lines_are_stored(
        self, store: Any, logs: JobLogStore, clock: FakeClock
    ) -> None:
        [job] = end_jobs(store, clock, 1)
        hostile = ["nul\x00byte", "lone \ud800 surrogate", "quote ' \" ; --", "é" * 3000]
        stored = lines_of(job.job_id, 1, hostile, clock.now())
        assert logs.append_job_logs(stored) == len(hostile)
        assert [ln.message for ln in logs.job_logs(job.job_id)] == [s.message for s in stored]

    def test_old_log_lines_are_purged_in_batches(
        self, store: Any, logs: JobLogStore, clock: FakeClock
    ) -> None:
        [job] = end_jobs(store, clock, 1)
        logs.append_job_logs(lines_of(job.job_id, 1, ["old"] * 5, clock.now()))
        clock.advance(DAY * 31)
        logs.append_job_logs(lines_of(job.job_id, 2, ["new"], clock.now()))
        cutoff = clock.now() - DAY * 30
        assert logs.purge_job_logs(cutoff, limit=3) == 3
        assert logs.purge_job_logs(cutoff, limit=3) == 2
        assert logs.purge_job_logs(cutoff, limit=3) == 0
        assert [ln.message for ln in logs.job_logs(job.job_id)] == ["new"]


def seed_ended_jobs(
    store: Any,
    n: int,
    *,
    ended_at: datetime,
    status: JobStatus = JobStatus.SUCCEEDED,
    log_lines: int = 0,
    chunk: int = 2000,
) -> list[uuid.UUID]:
    """Write ``n`` jobs that ended with ``status`` at ``ended_at`` straight into a SQL store
    (job, tag, idempotency key, one attempt and ``log_lines`` log lines each), far faster than
    running them; returns their ids. For removal tests and benchmarks of big tables."""
    from sqlalchemy import insert

    from ratchet.ids import uuid7
    from ratchet.sql import schema

    ids: list[uuid.UUID] = []
    created = ended_at - timedelta(seconds=5)
    for start in range(0, n, chunk):
        batch = [uuid7() for _ in range(min(chunk, n - start))]
        ids += batch
        with store.engine.begin() as conn:
            conn.execute(
                insert(schema.job),
                [
                    {
                        "job_id": j,
                        "target": "tests.jobs:noop",
                        "payload": '{"args":[],"kwargs":{}}',
                        "priority": 2,
                        "max_retries": 0,
                        "backoff_policy": "NONE",
                        "backoff_ms": 0,
                        "tags": '["seeded"]',
                        "idempotency_key": j.hex,
                        "created_at": created,
                    }
                    for j in batch
                ],
            )
            conn.execute(
                insert(schema.job_end),
                [
                    {
                        "job_id": j,
                        "terminal_status": status.value,
                        "terminal_error": None if status is JobStatus.SUCCEEDED else "seeded",
                        "terminated_at": ended_at,
                        "attempts": 0,
                    }
                    for j in batch
                ],
            )
            conn.execute(insert(schema.job_tag), [{"job_id": j, "tag": "seeded"} for j in batch])
            conn.execute(
                insert(schema.idempotency_key),
                [{"idempotency_key": j.hex, "job_id": j, "created_at": created} for j in batch],
            )
            conn.execute(
                insert(schema.job_execution),
                [
                    {
                        "job_id": j,
                        "attempt_no": 1,
                        "epoch": 1,
                        "node_id": "seed",
                        "started_at": created,
                        "finished_at": ended_at,
                        "outcome": status.value,
                    }
                    for j in batch
                ],
            )
            if log_lines:
                conn.execute(
                    insert(schema.job_log),
                    [
                        {
                            "job_id": j,
                            "epoch": 1,
                            "seq": s,
                            "attempt_no": 1,
                            "logged_at": ended_at,
                            "level": "INFO",
                            "message": f"line {s}",
                        }
                        for j in batch
                        for s in range(log_lines)
                    ],
                )
    return ids
