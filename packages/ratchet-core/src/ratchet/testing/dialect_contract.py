"""The dialect equivalence suite: a store's own statement sets do what the generic ones do.

A SQL store may render its hot paths (claim, insert, fenced outcome write) its own way through
the statement sets of :mod:`ratchet.sql.hotpaths` (``SqlStore.make_hot_paths``). This suite runs
each path through the store under test and through the generic statement sets (SQLAlchemy Core)
on the same database, each in a transaction that is rolled back, and compares the answers and
every row of every table of the schema (jobs, queue, attempts, tags, idempotency keys, flows).
On a store without statement sets of its own it compares the generic path with itself, which
still checks that the path runs.

Subclass :class:`DialectEquivalenceContract` in a test module and provide the fixtures ``store``
(a migrated, empty :class:`~ratchet.sql.store.SqlStore`) and ``clock`` (a
:class:`~ratchet.testing.FakeClock`)::

    class TestMyDialect(DialectEquivalenceContract):
        pass

Override :meth:`DialectEquivalenceContract.check_round_trips` to assert how many statements the
store's own rendering sends on each path.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import random
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, select, update
from sqlalchemy.engine import Connection

from ratchet.domain.affinity import Affinity
from ratchet.domain.lifecycle import JobPriority, JobStatus
from ratchet.domain.model import ClaimedJob, NewJob, Outcome, OutcomeKind
from ratchet.domain.takeover import TakeoverPolicy
from ratchet.domain.watcher import WatcherSettings
from ratchet.ports import InsertResult, WatcherStore
from ratchet.sql import attempt_history, schema
from ratchet.sql.hotpaths import HotPaths
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import (
    BOOST,
    expected_last_errors,
    failed_once,
    keyed_by_id,
    mixed_outcomes,
    new_job,
    outcome,
)

#: Text that tries every escaping rule: quotes, a backslash, percent signs, non-ASCII, NUL.
TRICKY = 'it\'s \\ "q" 100% %s é 🚀 \x00'
NODE = "me"
OTHER = "other"
#: Affinities the claim queue's jobs cycle through, and node tag sets to claim with.
AFFINITIES = (
    Affinity(),
    Affinity(frozenset({"gpu"})),
    Affinity(exclude=frozenset({"eu"})),
    Affinity(frozenset({"gpu", "eu"})),
    Affinity(frozenset({"gpu"}), frozenset({"eu"})),
)
NODE_TAG_SETS: tuple[frozenset[str], ...] = (
    frozenset(),
    frozenset({"gpu"}),
    frozenset({"eu"}),
    frozenset({"gpu", "eu"}),
)


@dataclass
class Run:
    """One path run in a transaction that was rolled back."""

    answer: Any
    rows: dict[str, list[dict[str, Any]]]
    """Every row of every table of the schema, as it was before the rollback."""
    statements: int
    """How many statements the path sent (``before_cursor_execute`` events)."""


def generic_twin(store: Any) -> Any:
    """``store`` with the generic statement sets: same engine, hooks and state."""
    twin = copy.copy(store)
    twin.hot_paths = HotPaths.generic(store.dialect)
    return twin


def snapshot(conn: Connection) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table of the schema, in primary-key order."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for table in schema.metadata.sorted_tables:
        order = list(table.primary_key.columns) or list(table.columns)
        rows[table.name] = [dict(r._mapping) for r in conn.execute(select(table).order_by(*order))]
    return rows


def run_rolled_back(store: Any, work: Callable[[Connection], Any]) -> Run:
    """``work(conn)`` in a transaction of ``store`` that is rolled back afterwards."""
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    with store.engine.connect() as conn:
        event.listen(conn, "before_cursor_execute", count)
        with conn.begin() as trans:
            try:
                answer = work(conn)
            finally:
                event.remove(conn, "before_cursor_execute", count)
            rows = snapshot(conn)
            trans.rollback()
    return Run(answer, rows, len(statements))


class DialectEquivalenceContract:
    """Each hot path of ``store`` against the generic statement sets. Needs fixtures ``store``
    and ``clock``."""

    # ------------------------------------------------------------------ helpers
    def check_round_trips(self, store: Any, path: str, mine: int, generic: int) -> None:
        """Assert the statements the store's own ``path`` sent (``mine``) against the generic
        path's (``generic``). Paths: ``claim``, ``insert``, ``insert-taken``, ``insert-bulk``,
        ``record``. Override it: by default nothing is asserted."""

    def both(self, store: Any, work: Callable[[Any, Connection], Any]) -> tuple[Run, Run]:
        """``work(store, conn)`` through the store's statement sets, then through the generic
        ones, each rolled back."""
        mine = run_rolled_back(store, lambda conn: work(store, conn))
        twin = generic_twin(store)
        theirs = run_rolled_back(twin, lambda conn: work(twin, conn))
        return mine, theirs

    def assert_same(self, mine: Run, theirs: Run) -> None:
        assert mine.answer == theirs.answer
        for table, rows in theirs.rows.items():
            assert mine.rows[table] == rows, table

    def record_both(self, store: Any, outcomes: Sequence[Outcome], now: Any) -> tuple[Run, Run]:
        """The outcome write of ``outcomes`` by :data:`NODE` both ways (its answer: the fenced
        ids and the flow effects the outcome hooks produced)."""
        mine = run_rolled_back(store, lambda conn: self.record(store, conn, outcomes, now))
        twin = generic_twin(store)
        theirs = run_rolled_back(twin, lambda conn: self.record(twin, conn, outcomes, now))
        return mine, theirs

    def record(self, store: Any, conn: Connection, outcomes: Sequence[Outcome], now: Any) -> Any:
        """The outcome write of ``outcomes`` by :data:`NODE` in ``conn`` (the store's one
        shared fenced write, whichever statement set it runs), resolving no stored reference."""
        from ratchet.sql.workflow_store import REFUSE_ALL

        return store._record(conn, NODE, outcomes, now, REFUSE_ALL)

    def claim_queue(self, store: Any, clock: FakeClock) -> list[NewJob]:
        """A random queue: every priority, ties in scheduled time, jobs not yet due, a paused
        one, some claimed by another node, tags, parameters and timeouts with tricky text."""
        rng = random.Random(20261201)
        base = clock.now()
        jobs = []
        for i in range(240):
            age = timedelta(minutes=rng.choice([0, 1, 14, 15, 16, 29, 31, 61, 240]))
            scheduled = base - (timedelta(minutes=31) if i % 7 == 0 else age)  # ties: the id
            if i % 13 == 0:
                scheduled = base + timedelta(minutes=5)  # not yet due
            jobs.append(
                new_job(
                    clock,
                    priority=rng.choice(list(JobPriority)),
                    scheduled_time=scheduled,
                    tags=("t'1", f"n{i}") if i % 3 == 0 else (),
                    params={"k": "v\\'" + str(i)} if i % 4 == 0 else {},
                    timeout=timedelta(seconds=i) if i % 5 == 0 else None,
                    executor="threads" if i % 6 == 0 else None,
                    affinity=AFFINITIES[i % len(AFFINITIES)] if i % 2 else Affinity(),
                    schedule_to_start=timedelta(hours=1) if i % 8 == 1 else None,
                    takeover_policy=TakeoverPolicy.RESTART if i % 9 == 2 else None,
                )
            )
        store.insert_jobs(jobs, now=base)
        store.pause_job(jobs[1].job_id, now=base)
        assert len(store.claim(OTHER, 7, now=base, boost_interval=BOOST)) == 7
        return jobs

    def due(self, store: Any, now: Any, node_tags: frozenset[str] = frozenset()) -> int:
        """How many PENDING jobs due at ``now`` a node with ``node_tags`` may run."""
        q, j = schema.job_queue, schema.job
        with store.engine.connect() as conn:
            rows = conn.execute(
                select(j.c.require_tags, j.c.exclude_tags)
                .join(q, q.c.job_id == j.c.job_id)
                .where(q.c.status == JobStatus.PENDING.value, q.c.scheduled_time <= now)
            ).all()
        tags = [
            (frozenset(json.loads(r[0] or "[]")), frozenset(json.loads(r[1] or "[]"))) for r in rows
        ]
        return sum(Affinity(req, exc).allows(node_tags) for req, exc in tags)

    # ------------------------------------------------------------------ the claim
    def test_claim_agrees_on_order_limits_and_boosts(self, store: Any, clock: FakeClock) -> None:
        self.claim_queue(store, clock)
        base = clock.now()
        cases = 0
        for limit in (1, 3, 7, 50, 500):
            for boost in (BOOST, timedelta(0), timedelta(minutes=1)):
                for now in (base, base + timedelta(minutes=10)):
                    mine, theirs = self.both(store, self._claiming(limit, now, boost))
                    self.assert_same(mine, theirs)
                    assert len(mine.answer) == min(limit, self.due(store, now)) > 0
                    assert all(isinstance(c, ClaimedJob) for c in mine.answer)
                    self.check_round_trips(store, "claim", mine.statements, theirs.statements)
                    cases += 1
        assert cases == 30

    @staticmethod
    def _generic_claim(
        store: Any, limit: int, now: Any, node_tags: frozenset[str], conn: Connection
    ) -> list[ClaimedJob]:
        """The generic statement set's claim of ``limit`` for :data:`NODE` in ``conn``."""
        claims = HotPaths.generic(store.dialect).claim
        return claims.claim(conn, NODE, limit, now, BOOST, node_tags)

    @staticmethod
    def _claiming(
        limit: int, now: Any, boost: timedelta, node_tags: frozenset[str] = frozenset()
    ) -> Callable[[Any, Connection], Any]:
        return lambda store, conn: store._claim(conn, NODE, limit, now, boost, node_tags)

    def test_claim_agrees_on_node_tags(self, store: Any, clock: FakeClock) -> None:
        jobs = {j.job_id: j for j in self.claim_queue(store, clock)}
        for tags in NODE_TAG_SETS:
            for limit in (3, 500):
                mine, theirs = self.both(store, self._claiming(limit, clock.now(), BOOST, tags))
                self.assert_same(mine, theirs)
                assert mine.answer, tags
                assert all(jobs[c.job_id].affinity.allows(tags) for c in mine.answer), tags
            # the largest claim took every due job those tags allow, and only those
            assert len(mine.answer) == self.due(store, clock.now(), tags), tags

    def test_the_poll_outside_a_transaction_claims_what_the_generic_claim_claims(
        self, store: Any, clock: FakeClock
    ) -> None:
        """A poll (``acquire_work``: the node's probe and the claim, on the bare driver where
        the statement sets give the work for it) claims the jobs, in the order, and leaves the
        rows that the generic claim does, for each set of node tags."""
        ws = store.capability(WatcherStore)
        if ws is None:
            pytest.skip("N/A: the store has no WatcherStore capability")
        self.claim_queue(store, clock)
        settings = WatcherSettings()
        for tags, limit in ((frozenset(), 7), (frozenset({"gpu"}), 3), (frozenset({"eu"}), 500)):
            theirs = run_rolled_back(
                store, functools.partial(self._generic_claim, store, limit, clock.now(), tags)
            )
            polled = ws.acquire_work(
                NODE,
                limit,
                now=clock.now(),
                settings=settings,
                boost_interval=BOOST,
                without_row=True,
                node_tags=tags,
            )
            assert polled.state is None and polled.taken == () and polled.started == ()
            assert list(polled.claimed) == theirs.answer, tags
            with store.engine.connect() as conn:
                rows = snapshot(conn)
            for table, expected in theirs.rows.items():
                assert rows[table] == expected, (tags, table)

    def test_claim_agrees_with_rows_held_by_another_transaction(
        self, store: Any, clock: FakeClock
    ) -> None:
        if not store.dialect.skip_locked:
            pytest.skip("N/A: the database serialises claims (no row locks to skip)")
        self.claim_queue(store, clock)
        q = schema.job_queue
        with store.engine.connect() as conn:
            due = conn.execute(
                select(q.c.job_id)
                .where(q.c.status == JobStatus.PENDING.value, q.c.scheduled_time <= clock.now())
                .order_by(q.c.job_id)
            ).scalars()
            held = list(due)[20:60]
        with self.holding(store, held):
            mine, theirs = self.both(store, lambda s, c: s._claim(c, NODE, 100, clock.now(), BOOST))
        self.assert_same(mine, theirs)
        claimed = {c.job_id for c in mine.answer}
        assert claimed, "nothing claimed"
        assert not claimed & set(held), (len(claimed), len(claimed & set(held)), len(held))
        with store.engine.connect() as conn:
            still = conn.execute(
                select(q.c.status).where(q.c.job_id.in_(held)).distinct()
            ).scalars()
            assert set(still) == {JobStatus.PENDING.value}

    @contextmanager
    def holding(self, store: Any, ids: Sequence[uuid.UUID]) -> Iterator[None]:
        """Hold the queue rows of ``ids`` locked in another transaction."""
        q = schema.job_queue
        with store.engine.connect() as holder, holder.begin() as trans:
            for job_id in ids:  # by primary key, one at a time: only these rows
                stmt = store.dialect.lock_rows(select(q.c.job_id).where(q.c.job_id == job_id))
                assert holder.execute(stmt).all()
            try:
                yield
            finally:
                trans.rollback()

    # ------------------------------------------------------------------ the insert
    def test_insert_agrees_on_keys_and_results(self, store: Any, clock: FakeClock) -> None:
        existing = new_job(clock, idempotency_key="taken")
        store.insert_jobs([existing], now=clock.now())
        jobs = [
            new_job(clock, tags=("a", "b'"), params={"k": TRICKY}, business_key="bk-1"),
            new_job(clock, idempotency_key="taken"),  # held by ``existing``
            new_job(clock, idempotency_key="twice", priority=JobPriority.CRITICAL),
            new_job(clock, idempotency_key="twice"),  # the first of the batch wins
            new_job(
                clock,
                scheduled_time=clock.now() + timedelta(hours=1),
                timeout=timedelta(seconds=3),
            ),
            new_job(clock, executor="threads", backoff_delay=timedelta(seconds=2)),
            new_job(
                clock,
                affinity=AFFINITIES[4],
                schedule_to_start=timedelta(minutes=5),
                takeover_policy=TakeoverPolicy.FAIL,
            ),
            new_job(clock, payload='{"args":["' + TRICKY.replace("\x00", "") + '"],"kwargs":{}}'),
        ]
        mine, theirs = self.both(store, lambda s, c: s._insert(c, jobs, clock.now()))
        self.assert_same(mine, theirs)
        assert mine.answer[1] == InsertResult(existing.job_id, False)
        assert mine.answer[2] == InsertResult(jobs[2].job_id, True)
        assert mine.answer[3] == InsertResult(jobs[2].job_id, False)
        assert len(mine.rows["scheduler_job"]) == 1 + 6
        assert len(mine.rows["scheduler_job_affinity"]) == 2
        self.check_round_trips(store, "insert-taken", mine.statements, theirs.statements)

        fresh = [
            new_job(clock, tags=("x",) if i % 2 else (), affinity=AFFINITIES[i % 5])
            for i in range(40)
        ]
        mine, theirs = self.both(store, lambda s, c: s._insert(c, fresh, clock.now()))
        self.assert_same(mine, theirs)
        assert all(r.inserted for r in mine.answer)
        self.check_round_trips(store, "insert", mine.statements, theirs.statements)

        # Jobs keyed by their own ids (no key rows), with every option unset but in one job
        # each: a dialect that leaves unset values out of what it sends must still store each.
        options: list[dict[str, Any]] = [
            {},
            {"timeout": timedelta(seconds=3)},
            {"backoff_delay": timedelta(seconds=2)},
            {"params": {"k": "v"}},
            {"business_key": "bk-own"},
            {"executor": "threads"},
            {"resource_name": "api"},
            {"stall_timeout": timedelta(seconds=9)},
            {"caller_principal": "alice"},
            {"schedule_to_start": timedelta(minutes=5)},
            {"takeover_policy": TakeoverPolicy.FAIL},
            {"trace_context": '{"traceparent":"00-' + "1" * 32 + "-" + "2" * 16 + '-01"}'},
        ]
        for batch in ([keyed_by_id(clock)], [keyed_by_id(clock, **o) for o in options]):

            def insert(s: Any, c: Connection, batch: list[NewJob] = batch) -> Any:
                return s._insert(c, batch, clock.now())

            mine, theirs = self.both(store, insert)
            self.assert_same(mine, theirs)
            assert all(r.inserted for r in mine.answer)
            keyed = {row["job_id"] for row in mine.rows["scheduler_idempotency_key"]}
            assert not keyed & {j.job_id for j in batch}, "no key rows for own keys"
            assert len(mine.rows["scheduler_job"]) == 1 + len(batch)

    def bulk_batch(self, store: Any, clock: FakeClock) -> tuple[NewJob, list[NewJob], int]:
        """A taken key and three chunks of the store's insert (and a bit): keys repeated across
        chunks, a taken key, tags in one chunk only, business keys and a delayed job."""
        chunk = getattr(store, "insert_chunk_size", 250)
        existing = new_job(clock, idempotency_key="taken")
        store.insert_jobs([existing], now=clock.now())
        jobs = [new_job(clock) for _ in range(3 * chunk + 17)]
        jobs[3] = new_job(clock, idempotency_key="across", tags=("a", "b"), business_key="bk-1")
        jobs[2 * chunk + 5] = new_job(clock, idempotency_key="across")  # chunk 0 wins
        jobs[chunk + 1] = new_job(clock, idempotency_key="taken")  # held by ``existing``
        jobs[-1] = new_job(
            clock, scheduled_time=clock.now() + timedelta(hours=1), business_key="b2"
        )
        return existing, jobs, chunk

    def test_bulk_insert_in_chunks_agrees(self, store: Any, clock: FakeClock) -> None:
        existing, jobs, chunk = self.bulk_batch(store, clock)
        mine, theirs = self.both(store, lambda s, c: s._insert(c, jobs, clock.now()))
        self.assert_same(mine, theirs)
        assert mine.answer[chunk + 1] == InsertResult(existing.job_id, False)
        assert mine.answer[2 * chunk + 5] == InsertResult(jobs[3].job_id, False)
        assert len(mine.rows["scheduler_job"]) == 1 + len(jobs) - 2
        assert store.count_by_status() == {"PENDING": 1}  # both rolled back, every chunk
        self.check_round_trips(store, "insert-bulk", mine.statements, theirs.statements)

    def test_streamed_chunks_agree_with_the_generic_insert(
        self, store: Any, clock: FakeClock
    ) -> None:
        if not hasattr(store, "insert_job_chunks"):
            pytest.skip("N/A: the store does not stream submissions in chunks")
        _, jobs, _ = self.bulk_batch(store, clock)
        twin = generic_twin(store)
        expected = run_rolled_back(twin, lambda c: twin._insert(c, jobs, clock.now()))
        chunks = [jobs[i : i + 100] for i in range(0, len(jobs), 100)]
        assert store.insert_job_chunks(iter(chunks), now=clock.now()) == expected.answer
        with store.engine.connect() as conn:
            rows = snapshot(conn)
        for table, expected_rows in expected.rows.items():
            assert rows[table] == expected_rows, table

    # ------------------------------------------------------------------ outcomes
    def mixed_batch(self, store: Any, clock: FakeClock) -> tuple[list[Outcome], list[uuid.UUID]]:
        """Jobs that failed once, some of them then released, 31 claimed by :data:`NODE` (two of
        them since TIMED_OUT, still its own) and 5 by another node; the batch of :func:`mixed_outcomes` with every kind,
        tricky text and retry times, and the ids a correct write fences."""
        failed_once(store, clock, 40, node=NODE)
        # Ten attempts handed back unfinished (released): their next attempt has the same
        # number under a later epoch, so each such job has two attempt rows of that number.
        released = [c.job_id for c in store.claim(NODE, 10, now=clock.now(), boost_interval=BOOST)]
        q = schema.job_queue
        with store.engine.begin() as conn:
            live = conn.execute(
                select(*attempt_history.LIVE_ATTEMPT_COLUMNS).where(q.c.job_id.in_(released))
            ).all()
            attempt_history.end_attempts(conn, live, "RELEASED", clock.now())
            conn.execute(
                update(q)
                .where(q.c.job_id.in_(released))
                .values(status=JobStatus.PENDING.value, picked_by=None, picked_at=None)
            )
        mine = store.claim(NODE, 31, now=clock.now(), boost_interval=BOOST)
        others = store.claim(OTHER, 5, now=clock.now(), boost_interval=BOOST)
        with store.engine.begin() as conn:
            conn.execute(
                update(q)
                .where(q.c.job_id.in_([mine[0].job_id, mine[5].job_id]))
                .values(status=JobStatus.TIMED_OUT.value)
            )
        clock.advance(timedelta(seconds=3))
        later = clock.now() + timedelta(minutes=1)
        kinds: list[tuple[OutcomeKind, dict[str, Any]]] = [
            (OutcomeKind.SUCCEEDED, {"result": '{"ok":"' + TRICKY + '"}'}),
            (
                OutcomeKind.DEAD,
                {"error": TRICKY, "traceback": "Traceback (most recent call last):\n  " + TRICKY},
            ),
            (OutcomeKind.RETRY, {"error": "again", "traceback": "tb\n", "retry_at": later}),
            (OutcomeKind.RETRY, {"error": "now"}),
            (OutcomeKind.RESCHEDULE, {"error": "circuit open", "retry_at": later}),
            (OutcomeKind.SUCCEEDED, {}),
            (OutcomeKind.RESCHEDULE, {"retry_at": later}),
        ]
        return mixed_outcomes(mine, others, clock, kinds)

    def test_outcome_write_agrees_on_a_mixed_batch(self, store: Any, clock: FakeClock) -> None:
        outcomes, expected_fenced = self.mixed_batch(store, clock)
        before = run_rolled_back(store, lambda conn: None).rows["scheduler_job"]
        mine, theirs = self.record_both(store, outcomes, clock.now())
        self.assert_same(mine, theirs)
        # a job's end is a row of its own: the job rows are written once, at submission
        assert mine.rows["scheduler_job"] == before
        assert list(mine.answer.fenced) == expected_fenced
        queue = {r["job_id"]: r for r in mine.rows["scheduler_job_queue"]}
        expected = expected_last_errors(outcomes, expected_fenced)
        assert {job_id: queue[job_id]["last_error"] for job_id in expected} == expected
        ends = {r["job_id"]: r for r in mine.rows["scheduler_job_end"]}
        for o in outcomes:
            if o.job_id in expected_fenced:
                continue
            if o.kind in (OutcomeKind.SUCCEEDED, OutcomeKind.DEAD):
                assert o.job_id not in queue
                assert (
                    ends[o.job_id]["terminal_status"]
                    == (
                        JobStatus.SUCCEEDED if o.kind is OutcomeKind.SUCCEEDED else JobStatus.FAILED
                    ).value
                )
                assert ends[o.job_id]["attempts"] == (1 if o.kind is OutcomeKind.SUCCEEDED else 2)
                assert ends[o.job_id]["terminated_at"] == o.finished_at
            else:
                assert o.job_id not in ends
                assert queue[o.job_id]["status"] == JobStatus.PENDING.value
                assert queue[o.job_id]["attempts"] == (2 if o.kind is OutcomeKind.RETRY else 1)
        self.check_round_trips(store, "record", mine.statements, theirs.statements)

    def test_the_outcome_write_outside_a_transaction_agrees_on_a_mixed_batch(
        self, store: Any, clock: FakeClock
    ) -> None:
        """``record_outcomes`` of a batch with no job in a flow (the path a worker takes, on the
        bare driver where the statement sets give the work for it) writes what the generic
        statements write."""
        outcomes, expected_fenced = self.mixed_batch(store, clock)
        plain = [dataclasses.replace(o, flow_effects=False) for o in outcomes]
        twin = generic_twin(store)
        theirs = run_rolled_back(twin, lambda conn: self.record(twin, conn, plain, clock.now()))
        written = store.record_outcomes(NODE, plain, now=clock.now())
        assert list(written.fenced) == expected_fenced == list(theirs.answer.fenced)
        with store.engine.connect() as conn:
            rows = snapshot(conn)
        for table, expected in theirs.rows.items():
            assert rows[table] == expected, table

    def test_outcome_write_agrees_when_everything_is_fenced(
        self, store: Any, clock: FakeClock
    ) -> None:
        store.insert_jobs([new_job(clock) for _ in range(3)], now=clock.now())
        claimed = store.claim(OTHER, 3, now=clock.now(), boost_interval=BOOST)
        outcomes = [outcome(c, OutcomeKind.SUCCEEDED, clock) for c in claimed]
        mine, theirs = self.record_both(store, outcomes, clock.now())
        self.assert_same(mine, theirs)
        assert list(mine.answer.fenced) == [c.job_id for c in claimed]

    def test_outcome_write_agrees_on_flow_effect_jobs(self, store: Any, clock: FakeClock) -> None:
        if not hasattr(store, "insert_flow"):
            pytest.skip("N/A: this store has no batches, chains, workflows or signals")
        from ratchet.sql.workflow_store import FlowJob
        from ratchet.testing.workflow_contract import WorkflowStoreContract

        flows = WorkflowStoreContract()
        head, step = flows.chain(store, clock, 2)
        callback = new_job(clock)
        store.insert_flow([FlowJob(callback, on_success="tests.jobs:noop")], now=clock.now())
        _, children, _ = flows.batch(store, clock, 2)
        plain = new_job(clock)
        store.insert_jobs([plain], now=clock.now())
        claimed = {
            c.job_id: c for c in store.claim(NODE, 10, now=clock.now(), boost_interval=BOOST)
        }
        assert set(claimed) == {
            head.job_id,
            callback.job_id,
            plain.job_id,
            *(c.job_id for c in children),
        }
        clock.advance(timedelta(seconds=1))
        kinds = {children[1].job_id: OutcomeKind.DEAD}
        outcomes = [
            outcome(c, kinds.get(job_id, OutcomeKind.SUCCEEDED), clock, result='{"r":1}')
            for job_id, c in claimed.items()
        ]
        mine, theirs = self.record_both(store, outcomes, clock.now())
        self.assert_same(mine, theirs)  # the effects included
        assert mine.answer.fenced == ()
        assert mine.answer.effects
        queue = {r["job_id"]: r for r in mine.rows["scheduler_job_queue"]}
        assert queue[step.job_id]["status"] == JobStatus.PENDING.value  # the chain moved on
