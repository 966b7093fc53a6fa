"""The store conformance suite: every store adapter must pass it.

Subclass :class:`StoreContract` in a test module and provide two fixtures: ``store`` (a migrated,
empty :class:`~ratchet.ports.Store`) and ``clock`` (a :class:`~ratchet.testing.FakeClock`)::

    class TestMyStore(StoreContract):
        pass

Optional capabilities skip as "N/A" through ``store.capabilities`` / ``store.capability(...)``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from ratchet.domain.errors import (
    DuplicateBusinessKeyError,
    DuplicateIdempotencyKeyError,
    InvalidJobOptions,
)
from ratchet.domain.lifecycle import JobPriority, JobStatus
from ratchet.domain.model import (
    MAX_TRACE_CONTEXT,
    ClaimedJob,
    JobFilter,
    NewJob,
    Outcome,
    OutcomeKind,
)
from ratchet.domain.options import BackoffPolicy
from ratchet.domain.watcher import NodeInfo, WatcherSettings
from ratchet.ids import uuid7
from ratchet.ports import StreamingInsertStore, TransactionalStore, WatcherStore, WorkflowStore
from ratchet.testing.clock import FakeClock

NODE = "node-a"
OTHER = "node-b"
BOOST = timedelta(minutes=15)
#: The watcher's defaults, for the tests that hand a job to another node.
HAND_OVER = WatcherSettings()


def new_job(clock: FakeClock, **overrides: Any) -> NewJob:
    """A valid NewJob due now (override any field)."""
    now = clock.now()
    fields: dict[str, Any] = {
        "job_id": uuid7(),
        "target": "tests.jobs:noop",
        "payload": '{"args":[],"kwargs":{}}',
        "priority": JobPriority.NORMAL,
        "max_retries": 3,
        "backoff": BackoffPolicy.NONE,
        "backoff_delay": timedelta(0),
        "timeout": None,
        "scheduled_time": now,
        "created_at": now,
        "idempotency_key": str(uuid.uuid4()),
    }
    fields.update(overrides)
    return NewJob(**fields)


def keyed_by_id(clock: FakeClock, **overrides: Any) -> NewJob:
    """A valid NewJob due now whose idempotency key is its own id (a builder's default)."""
    job_id = uuid7()
    return new_job(clock, job_id=job_id, idempotency_key=str(job_id), **overrides)


def trace_context(name: str, size: int = 0) -> str:
    """A stored trace context (W3C headers as JSON) unique to ``name``; ``size`` pads its
    ``tracestate`` so that the whole is exactly that many characters long."""
    digest = uuid.uuid5(uuid.NAMESPACE_URL, name).hex
    text = f'{{"traceparent":"00-{digest}-{digest[:16]}-01","tracestate":"r="}}'
    if size:
        text = text[:-2] + "x" * (size - len(text)) + '"}'
    return text


def outcome(job: ClaimedJob, kind: OutcomeKind, clock: FakeClock, **overrides: Any) -> Outcome:
    """An outcome of ``job``'s current attempt."""
    now = clock.now()
    fields: dict[str, Any] = {
        "job_id": job.job_id,
        "epoch": job.epoch,
        "attempt": job.attempt,
        "kind": kind,
        "started_at": now,
        "finished_at": now,
    }
    fields.update(overrides)
    return Outcome(**fields)


def mixed_outcomes(
    mine: Sequence[ClaimedJob],
    others: Sequence[ClaimedJob],
    clock: FakeClock,
    kinds: Sequence[tuple[OutcomeKind, dict[str, Any]]],
) -> tuple[list[Outcome], list[uuid.UUID]]:
    """An outcome batch to compare a dialect's own outcome write with the generic one.

    Needs 27 jobs in ``mine`` (claimed by the writing node) and 2 in ``others`` (claimed by
    another node). The first 25 of ``mine`` end with ``kinds`` in turn (kind, extra outcome
    fields); then a stale epoch, two jobs of the other node and an unknown id. Returns the batch
    and the ids a correct write fences, in batch order.
    """
    batch = [
        outcome(job, kinds[i % len(kinds)][0], clock, **kinds[i % len(kinds)][1])
        for i, job in enumerate(mine[:25])
    ]
    stale = mine[25]
    batch.append(outcome(stale, OutcomeKind.SUCCEEDED, clock, epoch=stale.epoch + 1))
    batch += [outcome(job, OutcomeKind.SUCCEEDED, clock) for job in others[:2]]
    ghost = outcome(mine[26], OutcomeKind.DEAD, clock, job_id=uuid.uuid4())
    batch.append(ghost)
    return batch, [stale.job_id, others[0].job_id, others[1].job_id, ghost.job_id]


#: The error of the failed first attempt of :func:`failed_once` jobs.
EARLIER_ERROR = "RuntimeError: an earlier attempt"


def failed_once(store: Any, clock: FakeClock, n: int, node: str = NODE) -> list[NewJob]:
    """``n`` jobs due now whose first attempt failed with :data:`EARLIER_ERROR` (PENDING, one
    attempt counted, that error as their last error)."""
    jobs = [new_job(clock) for _ in range(n)]
    store.insert_jobs(jobs, now=clock.now())
    claimed = store.claim(node, n, now=clock.now(), boost_interval=BOOST)
    assert len(claimed) == n
    retries = [
        outcome(c, OutcomeKind.RETRY, clock, error=EARLIER_ERROR, retry_at=clock.now())
        for c in claimed
    ]
    assert store.record_outcomes(node, retries, now=clock.now()).fenced == ()
    return jobs


def expected_last_errors(
    outcomes: Sequence[Outcome], fenced: Sequence[uuid.UUID]
) -> dict[uuid.UUID, str | None]:
    """The last error of each job that an applied retry or reschedule of ``outcomes`` put back
    to PENDING, for jobs that had :data:`EARLIER_ERROR`: the outcome's error, else that one."""
    return {
        o.job_id: o.error or EARLIER_ERROR
        for o in outcomes
        if o.kind in (OutcomeKind.RETRY, OutcomeKind.RESCHEDULE) and o.job_id not in fenced
    }


@dataclass
class Submission:
    """One submission through a store's entry point, ready to run (see :func:`submission`)."""

    jobs: list[NewJob]
    """Every job the submission would insert: none of them exists after it failed."""
    run: Callable[[], Any]
    live: list[uuid.UUID] = field(default_factory=list)
    """Jobs inserted before the submission that must still be live after it failed."""


#: Every way a job reaches a store, as ``entry point:position of the job carrying the keys``:
#: a plain insert, a bulk insert, a batch child, a child of a streaming batch's later chunk,
#: a chain's head and step, a workflow's parent and branch, a signal wait and a replacement.
SUBMISSION_PATHS = (
    "plain",
    "many",
    "batch:child",
    "streaming-batch:child",
    "chain:head",
    "chain:step",
    "workflow:parent",
    "workflow:branch",
    "signal-wait:head",
    "replace",
)


def submission(store: Any, clock: FakeClock, path: str, carrier: NewJob) -> Submission:
    """A submission through ``path`` (one of :data:`SUBMISSION_PATHS`) that inserts
    ``carrier`` (or a WAITING copy of it) at that position, with other jobs around it.

    Flow paths skip as N/A on a store without batches, chains, workflows and signals.
    """
    now = clock.now()
    if path == "plain":
        return Submission([carrier], lambda: store.insert_jobs([carrier], now=now))
    if path == "many":
        jobs = [new_job(clock), carrier, new_job(clock)]
        return Submission(jobs, lambda: store.insert_jobs(jobs, now=now))
    if path == "replace":
        old = new_job(clock)
        store.insert_jobs([old], now=now)
        return Submission(
            [carrier], lambda: store.replace_job(old.job_id, carrier, now=now), [old.job_id]
        )
    if store.capability(WorkflowStore) is None:
        pytest.skip("N/A: this store has no batches, chains, workflows or signals")
    from ratchet.domain.flows import BatchSpec, BranchSpec, FlowJob, waiting
    from ratchet.domain.workflow import JobType, WorkflowCondition

    entry, _, position = path.partition(":")
    if entry in ("batch", "streaming-batch"):
        parent = waiting(new_job(clock, target="tests.jobs:parent"))
        children = [new_job(clock), carrier]
        flow = [FlowJob(parent, JobType.BATCH_PARENT)]
        flow += [FlowJob(c, JobType.BATCH_CHILD, batch_id=parent.job_id) for c in children]
        if entry == "batch":
            spec = BatchSpec(parent.job_id, "contract", len(children))
            return Submission(
                [parent, *children], lambda: store.insert_flow(flow, now=now, batch=spec)
            )
        first = new_job(clock)
        store.insert_flow(
            [flow[0], FlowJob(first, JobType.BATCH_CHILD, batch_id=parent.job_id)],
            now=now,
            batch=BatchSpec(parent.job_id, "contract", 1, sealed=False),
        )
        chunk = flow[1:]
        return Submission(
            children,
            lambda: store.add_batch_children(parent.job_id, chunk, now=now),
            [parent.job_id, first.job_id],
        )
    if position in ("head", "parent"):
        head, later = carrier, waiting(new_job(clock))
    else:
        head, later = new_job(clock), waiting(carrier)
    if entry == "signal-wait":
        head = waiting(head)
        flow = [
            FlowJob(
                head, signal_key="contract", signal_wait=timedelta(minutes=5), has_dependents=True
            ),
            FlowJob(later, JobType.CHAIN_STEP, waiting_for=head.job_id, depends_on=head.job_id),
        ]
        return Submission([head, later], lambda: store.insert_flow(flow, now=now))
    if entry == "chain":
        flow = [
            FlowJob(head, chain_id=head.job_id, has_dependents=True),
            FlowJob(
                later,
                JobType.CHAIN_STEP,
                chain_id=head.job_id,
                depends_on=head.job_id,
                waiting_for=head.job_id,
            ),
        ]
        return Submission([head, later], lambda: store.insert_flow(flow, now=now))
    assert entry == "workflow", path
    flow = [
        FlowJob(head, has_dependents=True),
        FlowJob(later, JobType.WORKFLOW_BRANCH, depends_on=head.job_id, waiting_for=head.job_id),
    ]
    branch = BranchSpec(head.job_id, later.job_id, WorkflowCondition.success(), 0)
    return Submission([head, later], lambda: store.insert_flow(flow, now=now, branches=[branch]))


class StoreContract:
    """Behaviour every store must have. Needs fixtures ``store`` and ``clock``."""

    # ------------------------------------------------------------------ helpers
    def insert(self, store: Any, clock: FakeClock, n: int = 1, **overrides: Any) -> list[NewJob]:
        jobs = [new_job(clock, **overrides) for _ in range(n)]
        store.insert_jobs(jobs, now=clock.now())
        return jobs

    def claim(
        self, store: Any, clock: FakeClock, limit: int = 10, node: str = NODE
    ) -> list[ClaimedJob]:
        return list(store.claim(node, limit, now=clock.now(), boost_interval=BOOST))

    def status(self, store: Any, job_id: uuid.UUID) -> JobStatus:
        rec = store.get_job(job_id)
        assert rec is not None, f"job {job_id} vanished"
        return JobStatus(rec.status)

    def watcher(self, store: Any) -> WatcherStore:
        """The store's watcher capability, through which a job moves to another node."""
        ws = store.capability(WatcherStore)
        if ws is None:
            pytest.skip("N/A: the store has no WatcherStore capability")
        return ws  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ submission
    def test_insert_and_read_back(self, store: Any, clock: FakeClock) -> None:
        job = new_job(
            clock,
            priority=JobPriority.HIGH,
            max_retries=5,
            backoff=BackoffPolicy.EXPONENTIAL,
            backoff_delay=timedelta(seconds=2),
            timeout=timedelta(seconds=90),
            tags=("billing", "eu"),
            params={"tenant": "acme"},
            business_key="order-17",
            executor="threads",
            resource_name="payment-api",
            stall_timeout=timedelta(seconds=45),
        )
        [result] = store.insert_jobs([job], now=clock.now())
        assert result.inserted and result.job_id == job.job_id
        rec = store.get_job(job.job_id)
        assert rec is not None
        assert rec.status is JobStatus.PENDING
        assert (rec.target, rec.payload) == (job.target, job.payload)
        assert rec.priority is JobPriority.HIGH
        assert (rec.max_retries, rec.attempts) == (5, 0)
        assert rec.backoff is BackoffPolicy.EXPONENTIAL
        assert rec.backoff_delay == timedelta(seconds=2)
        assert rec.timeout == timedelta(seconds=90)
        assert rec.tags == ("billing", "eu")
        assert dict(rec.params) == {"tenant": "acme"}
        assert rec.business_key == "order-17"
        assert rec.idempotency_key == job.idempotency_key
        assert rec.scheduled_time == job.scheduled_time
        assert rec.created_at == job.created_at
        assert rec.executor == "threads"
        assert (rec.resource_name, rec.stall_timeout) == ("payment-api", timedelta(seconds=45))

    def test_every_insert_path_stores_the_trace_context_the_claim_returns(
        self, store: Any, clock: FakeClock
    ) -> None:
        longest = trace_context("longest", MAX_TRACE_CONTEXT)
        assert len(longest) == MAX_TRACE_CONTEXT
        single = new_job(clock, trace_context=trace_context("single"))
        store.insert_jobs([single], now=clock.now())
        batch = [
            new_job(clock, trace_context=trace_context("many")),
            new_job(clock, trace_context=longest),
            new_job(clock),  # submitted without tracing
        ]
        store.insert_jobs(batch, now=clock.now())
        streamed: list[NewJob] = []
        streaming = store.capability(StreamingInsertStore)
        if streaming is not None:
            streamed = [new_job(clock, trace_context=trace_context(f"chunk {i}")) for i in range(3)]
            streaming.insert_job_chunks(iter([streamed[:2], streamed[2:]]), now=clock.now())
        old = new_job(clock, scheduled_time=clock.now() + timedelta(hours=1))
        store.insert_jobs([old], now=clock.now())
        replacement = new_job(clock, trace_context=trace_context("replacement"))
        assert store.replace_job(old.job_id, replacement, now=clock.now()).value
        expected = {j.job_id: j.trace_context for j in [single, *batch, *streamed, replacement]}
        claimed = self.claim(store, clock, limit=100)
        assert {c.job_id: c.trace_context for c in claimed} == expected
        # A dead-lettered job replayed by an operator runs again in the trace that submitted it.
        done = store.record_outcomes(
            NODE, [outcome(c, OutcomeKind.DEAD, clock, error="x") for c in claimed], now=clock.now()
        )
        assert done.fenced == ()
        assert store.retry_job(single.job_id, now=clock.now())
        [again] = self.claim(store, clock)
        assert (again.job_id, again.trace_context) == (single.job_id, single.trace_context)

    def test_get_unknown_job_is_none(self, store: Any) -> None:
        assert store.get_job(uuid7()) is None

    def test_microsecond_times_round_trip(self, store: Any, clock: FakeClock) -> None:
        clock.advance(timedelta(microseconds=123_457))
        [job] = self.insert(store, clock)
        rec = store.get_job(job.job_id)
        assert rec.scheduled_time == clock.now()
        assert rec.scheduled_time.microsecond == clock.now().microsecond

    def test_idempotency_key_returns_original_job(self, store: Any, clock: FakeClock) -> None:
        [first] = self.insert(store, clock, idempotency_key="pay-42")
        again = new_job(clock, idempotency_key="pay-42")
        [result] = store.insert_jobs([again], now=clock.now())
        assert not result.inserted
        assert result.job_id == first.job_id
        assert store.get_job(again.job_id) is None

    def test_idempotency_key_is_permanent(self, store: Any, clock: FakeClock) -> None:
        [first] = self.insert(store, clock, idempotency_key="once")
        [claimed] = self.claim(store, clock)
        store.record_outcomes(
            NODE, [outcome(claimed, OutcomeKind.SUCCEEDED, clock)], now=clock.now()
        )
        assert self.status(store, first.job_id) is JobStatus.SUCCEEDED
        [result] = store.insert_jobs([new_job(clock, idempotency_key="once")], now=clock.now())
        assert (result.inserted, result.job_id) == (False, first.job_id)
        assert store.find_by_idempotency_key("once") == first.job_id

    def test_a_job_keyed_by_its_own_id_answers_with_itself_when_inserted_again(
        self, store: Any, clock: FakeClock
    ) -> None:
        """A builder's default key is its job's id: inserting that job again (a builder
        submitted twice, a retry after a lost commit), alone or in a batch, live or ended,
        stores nothing and answers with the job itself."""
        job = keyed_by_id(clock)
        [first] = store.insert_jobs([job], now=clock.now())
        assert (first.job_id, first.inserted) == (job.job_id, True)
        fresh = keyed_by_id(clock)
        again = store.insert_jobs([fresh, job, fresh], now=clock.now())
        assert [(r.job_id, r.inserted) for r in again] == [
            (fresh.job_id, True),
            (job.job_id, False),
            (fresh.job_id, False),
        ]
        assert store.find_by_idempotency_key(job.idempotency_key) == job.job_id
        claimed = self.claim(store, clock, limit=10)
        store.record_outcomes(
            NODE, [outcome(c, OutcomeKind.SUCCEEDED, clock) for c in claimed], now=clock.now()
        )
        [ended] = store.insert_jobs([job], now=clock.now())
        assert (ended.job_id, ended.inserted) == (job.job_id, False)
        assert self.status(store, job.job_id) is JobStatus.SUCCEEDED
        assert len(store.list_jobs(JobFilter(), 100)) == 2

    def test_a_job_keyed_by_its_own_id_inserted_again_in_a_callers_transaction_raises(
        self, store: Any, clock: FakeClock
    ) -> None:
        if not store.capabilities.transactional_submit or not hasattr(store, "connect"):
            pytest.skip("N/A: transactional submit")
        job = keyed_by_id(clock)
        store.insert_jobs([job], now=clock.now())
        with (
            pytest.raises(DuplicateIdempotencyKeyError) as err,
            store.connect() as conn,
            conn.begin(),
        ):
            store.insert_jobs([keyed_by_id(clock), job], now=clock.now(), connection=conn)
        assert (err.value.key, err.value.holder) == (job.idempotency_key, job.job_id)
        assert len(store.list_jobs(JobFilter(), 100)) == 1

    def test_a_given_key_is_not_a_job_id(self, store: Any, clock: FakeClock) -> None:
        """A key given to a job is checked among the keys given, not against the ids of jobs
        keyed by their own: a key that happens to spell another job's id is a key of its own."""
        job = keyed_by_id(clock)
        store.insert_jobs([job], now=clock.now())
        spelled = new_job(clock, idempotency_key=str(job.job_id))
        [result] = store.insert_jobs([spelled], now=clock.now())
        assert (result.job_id, result.inserted) == (spelled.job_id, True)
        [again] = store.insert_jobs(
            [new_job(clock, idempotency_key=str(job.job_id))], now=clock.now()
        )
        assert (again.job_id, again.inserted) == (spelled.job_id, False)

    def test_bulk_insert_honours_keys_row_by_row(self, store: Any, clock: FakeClock) -> None:
        [old] = self.insert(store, clock, idempotency_key="k1")
        batch = [new_job(clock, idempotency_key=k) for k in ("k1", "k2", "k2", "k3")]
        results = store.insert_jobs(batch, now=clock.now())
        assert [r.inserted for r in results] == [False, True, False, True]
        assert results[0].job_id == old.job_id
        assert results[2].job_id == batch[1].job_id
        assert len(store.list_jobs(JobFilter(), 100)) == 3

    def test_business_key_unique_among_live_jobs(self, store: Any, clock: FakeClock) -> None:
        [holder] = self.insert(store, clock, business_key="report-2026-11")
        with pytest.raises(DuplicateBusinessKeyError) as err:
            self.insert(store, clock, business_key="report-2026-11")
        assert err.value.key == "report-2026-11"
        assert err.value.holder == holder.job_id
        assert len(store.list_jobs(JobFilter(), 100)) == 1

    def test_business_key_free_once_holder_is_terminal(self, store: Any, clock: FakeClock) -> None:
        [holder] = self.insert(store, clock, business_key="nightly")
        assert store.cancel_job(holder.job_id, now=clock.now()).value
        [again] = self.insert(store, clock, business_key="nightly")
        assert self.status(store, again.job_id) is JobStatus.PENDING

    def test_failed_bulk_insert_inserts_nothing(self, store: Any, clock: FakeClock) -> None:
        self.insert(store, clock, business_key="taken")
        batch = [new_job(clock), new_job(clock, business_key="taken")]
        with pytest.raises(DuplicateBusinessKeyError):
            store.insert_jobs(batch, now=clock.now())
        assert store.get_job(batch[0].job_id) is None

    @pytest.mark.parametrize("path", SUBMISSION_PATHS)
    def test_a_taken_business_key_raises_the_same_error_on_every_path(
        self, store: Any, clock: FakeClock, path: str
    ) -> None:
        [holder] = self.insert(store, clock, business_key="invoice-77")
        sent = submission(store, clock, path, new_job(clock, business_key="invoice-77"))
        with pytest.raises(DuplicateBusinessKeyError) as err:
            sent.run()
        assert (err.value.key, err.value.holder) == ("invoice-77", holder.job_id)
        assert [store.get_job(j.job_id) for j in sent.jobs] == [None] * len(sent.jobs)
        assert self.status(store, holder.job_id) is JobStatus.PENDING
        for job_id in sent.live:
            assert self.status(store, job_id).is_live, "nothing else changed"

    @pytest.mark.parametrize("path", [p for p in SUBMISSION_PATHS if p not in ("plain", "many")])
    def test_a_taken_idempotency_key_answers_with_its_holder_or_a_typed_error(
        self, store: Any, clock: FakeClock, path: str
    ) -> None:
        """A flow's head answers a taken key with its holder, as a plain insert does (and
        inserts nothing); a later job of a flow, a streaming chunk or a replacement cannot, so
        the submission raises ``DuplicateIdempotencyKeyError`` and inserts nothing."""
        [holder] = self.insert(store, clock, idempotency_key="delivery-8")
        sent = submission(store, clock, path, new_job(clock, idempotency_key="delivery-8"))
        if path.endswith((":head", ":parent")):
            result = sent.run()
            assert (result.job_id, result.inserted) == (holder.job_id, False)
        else:
            with pytest.raises(DuplicateIdempotencyKeyError) as err:
                sent.run()
            assert (err.value.key, err.value.holder) == ("delivery-8", holder.job_id)
        assert [store.get_job(j.job_id) for j in sent.jobs] == [None] * len(sent.jobs)
        for job_id in sent.live:
            assert self.status(store, job_id).is_live, "nothing else changed"

    def test_transactional_submit_rolls_back(self, store: Any, clock: FakeClock) -> None:
        if not store.capabilities.transactional_submit or not hasattr(store, "connect"):
            pytest.skip("N/A: transactional submit")
        rolled, committed = new_job(clock), new_job(clock)
        with store.connect() as conn:
            with conn.begin() as tx:
                store.insert_jobs([rolled], now=clock.now(), connection=conn)
                tx.rollback()
            with conn.begin():
                store.insert_jobs([committed], now=clock.now(), connection=conn)
        assert store.get_job(rolled.job_id) is None
        assert store.find_by_idempotency_key(rolled.idempotency_key) is None
        assert self.status(store, committed.job_id) is JobStatus.PENDING

    def test_after_commit_waits_for_the_callers_transaction(
        self, store: Any, clock: FakeClock
    ) -> None:
        """``TransactionalStore.after_commit``: the callback runs once the caller commits, in
        registration order; a rollback drops it (``on_rollback`` runs instead); each at most
        once, also across later transactions on the same connection."""
        caller = store.capability(TransactionalStore)
        if caller is None or not hasattr(store, "connect"):
            pytest.skip("N/A: caller transactions")
        calls: list[str] = []

        def note(what: str) -> Callable[[], None]:
            return lambda: calls.append(what)

        with store.connect() as conn:
            with conn.begin():
                store.insert_jobs([new_job(clock)], now=clock.now(), connection=conn)
                caller.after_commit(conn, note("first"), on_rollback=note("first dropped"))
                caller.after_commit(conn, note("second"))
                assert calls == [], "nothing before the commit"
            assert calls == ["first", "second"]
            with conn.begin() as tx:
                caller.after_commit(conn, note("rolled"), on_rollback=note("rolled dropped"))
                caller.after_commit(conn, note("rolled too"))
                tx.rollback()
            assert calls == ["first", "second", "rolled dropped"]
            with conn.begin():
                pass
        assert calls == ["first", "second", "rolled dropped"], "each at most once"

    def test_an_external_transaction_is_joined_and_its_hooks_used(
        self, store: Any, clock: FakeClock
    ) -> None:
        """An ``ExternalTransaction`` (a transaction another framework owns, as Django's): the
        jobs are written on its connection, commit or roll back with it, and what follows the
        submission goes to the framework's own hooks, not to SQLAlchemy events."""
        caller = store.capability(TransactionalStore)
        if caller is None or not hasattr(store, "connect"):
            pytest.skip("N/A: caller transactions")
        from ratchet.sql.caller_tx import ExternalTransaction

        committed_hooks: list[Callable[[], None]] = []
        rollback_hooks: list[Callable[[], None]] = []
        calls: list[str] = []
        kept, rolled = new_job(clock), new_job(clock)
        with store.connect() as conn:
            external = ExternalTransaction(conn, committed_hooks.append, rollback_hooks.append)
            with conn.begin():
                store.insert_jobs([kept], now=clock.now(), connection=external)
                caller.after_commit(external, lambda: calls.append("kept"))
            with conn.begin() as tx:
                store.insert_jobs([rolled], now=clock.now(), connection=external)
                caller.after_commit(
                    external, lambda: calls.append("rolled"), on_rollback=lambda: None
                )
                tx.rollback()
        assert calls == [], "the framework, not SQLAlchemy, calls the hooks"
        assert len(committed_hooks) == 2 and len(rollback_hooks) == 1
        committed_hooks[0]()
        assert calls == ["kept"]
        assert self.status(store, kept.job_id) is JobStatus.PENDING
        assert store.get_job(rolled.job_id) is None

    # ------------------------------------------------------------------ claiming
    def test_claim_marks_running_and_bumps_epoch(self, store: Any, clock: FakeClock) -> None:
        [job] = self.insert(store, clock)
        [claimed] = self.claim(store, clock)
        assert claimed.job_id == job.job_id
        assert (claimed.epoch, claimed.attempt) == (1, 1)
        assert claimed.target == job.target and claimed.payload == job.payload
        assert claimed.claimed_at == clock.now()
        rec = store.get_job(job.job_id)
        assert rec.status is JobStatus.RUNNING
        assert (rec.picked_by, rec.epoch) == (NODE, 1)
        assert self.claim(store, clock) == []

    def test_not_yet_due_jobs_are_invisible(self, store: Any, clock: FakeClock) -> None:
        [later] = self.insert(store, clock, scheduled_time=clock.now() + timedelta(seconds=30))
        assert self.claim(store, clock) == []
        clock.advance(timedelta(seconds=29, microseconds=999_999))
        assert self.claim(store, clock) == []
        clock.advance(timedelta(microseconds=1))
        assert [c.job_id for c in self.claim(store, clock)] == [later.job_id]

    def test_claim_respects_limit(self, store: Any, clock: FakeClock) -> None:
        self.insert(store, clock, n=7)
        assert len(self.claim(store, clock, limit=3)) == 3
        assert len(self.claim(store, clock, limit=10)) == 4
        assert self.claim(store, clock, limit=0) == []

    def test_claim_order_priority_then_time_then_id(self, store: Any, clock: FakeClock) -> None:
        t0 = clock.now()
        low = new_job(clock, priority=JobPriority.LOW, scheduled_time=t0 - timedelta(seconds=5))
        high_late = new_job(
            clock, priority=JobPriority.HIGH, scheduled_time=t0 - timedelta(seconds=1)
        )
        high_early = new_job(
            clock, priority=JobPriority.HIGH, scheduled_time=t0 - timedelta(seconds=2)
        )
        crit = new_job(clock, priority=JobPriority.CRITICAL, scheduled_time=t0)
        same_a = new_job(clock, priority=JobPriority.NORMAL, scheduled_time=t0)
        same_b = new_job(clock, priority=JobPriority.NORMAL, scheduled_time=t0)
        store.insert_jobs([low, same_b, high_late, same_a, crit, high_early], now=t0)
        order = [
            c.job_id for c in self.claim(store, clock, limit=1) + self.claim(store, clock, limit=10)
        ]
        ab = sorted([same_a.job_id, same_b.job_id], key=str)
        assert order == [crit.job_id, high_early.job_id, high_late.job_id, *ab, low.job_id]

    @pytest.mark.parametrize("waited_minutes", [29, 30, 31, 45])
    def test_age_boost_lets_old_low_job_overtake_new_high_job(
        self, store: Any, clock: FakeClock, waited_minutes: int
    ) -> None:
        t0 = clock.now()
        old_low = new_job(
            clock, priority=JobPriority.LOW, scheduled_time=t0 - timedelta(minutes=waited_minutes)
        )
        new_high = new_job(clock, priority=JobPriority.HIGH, scheduled_time=t0)
        store.insert_jobs([new_high, old_low], now=t0)
        [first] = self.claim(store, clock, limit=1)
        # LOW (1) + floor(waited / 15 min) vs HIGH (3): a tie goes to the older job.
        boosted = 1 + waited_minutes // 15
        expected = old_low if boosted >= 3 else new_high
        assert first.job_id == expected.job_id

    def test_age_boost_disabled_with_zero_interval(self, store: Any, clock: FakeClock) -> None:
        t0 = clock.now()
        old_low = new_job(clock, priority=JobPriority.LOWEST, scheduled_time=t0 - timedelta(days=3))
        new_high = new_job(clock, priority=JobPriority.NORMAL, scheduled_time=t0)
        store.insert_jobs([old_low, new_high], now=t0)
        [first] = store.claim(NODE, 1, now=t0, boost_interval=timedelta(0))
        assert first.job_id == new_high.job_id

    def test_claim_is_exclusive_under_concurrent_claimers(
        self, store: Any, clock: FakeClock
    ) -> None:
        jobs = self.insert(store, clock, n=300)
        seen: list[uuid.UUID] = []
        lock = threading.Lock()
        errors: list[BaseException] = []

        def claimer(node: str) -> None:
            try:
                while True:
                    got = store.claim(node, 7, now=clock.now(), boost_interval=BOOST)
                    if not got:
                        return
                    with lock:
                        seen.extend(c.job_id for c in got)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=claimer, args=(f"n{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert len(seen) == len(set(seen)) == len(jobs)
        assert set(seen) == {j.job_id for j in jobs}

    # ------------------------------------------------------------------ outcomes and fencing
    def test_success_is_terminal_with_result(self, store: Any, clock: FakeClock) -> None:
        [job] = self.insert(store, clock)
        [c] = self.claim(store, clock)
        clock.advance(2)
        written = store.record_outcomes(
            NODE, [outcome(c, OutcomeKind.SUCCEEDED, clock, result='{"ok":true}')], now=clock.now()
        )
        assert written.fenced == ()
        rec = store.get_job(job.job_id)
        assert rec.status is JobStatus.SUCCEEDED
        assert rec.result == '{"ok":true}'
        assert rec.terminated_at == clock.now()
        clock.advance(3600)
        assert self.claim(store, clock) == []

    def test_stale_epoch_write_changes_nothing(self, store: Any, clock: FakeClock) -> None:
        """The job moves to another node while its first attempt still runs (a drain hands it
        back, another node takes it over): the first attempt's write is refused."""
        ws = self.watcher(store)
        ws.register_incarnation(NodeInfo(OTHER, OTHER, "host-1", 100, 4), now=clock.now())
        [job] = self.insert(store, clock)
        [first] = self.claim(store, clock)
        assert ws.hand_back(NODE, [job.job_id], now=clock.now(), settings=HAND_OVER) == (0, 1)
        [second] = ws.takeover(OTHER, 1, now=clock.now(), settings=HAND_OVER)
        assert second.epoch == first.epoch + 1
        zombie = outcome(first, OutcomeKind.SUCCEEDED, clock, result='"late"')
        assert store.record_outcomes(NODE, [zombie], now=clock.now()).fenced == (job.job_id,)
        rec = store.get_job(job.job_id)
        assert (rec.status, rec.picked_by, rec.epoch, rec.result) == (
            JobStatus.RUNNING,
            OTHER,
            2,
            None,
        )
        # The same epoch from the wrong node is fenced too.
        wrong_node = outcome(second, OutcomeKind.SUCCEEDED, clock)
        assert store.record_outcomes(NODE, [wrong_node], now=clock.now()).fenced == (job.job_id,)
        assert store.record_outcomes(OTHER, [wrong_node], now=clock.now()).fenced == ()
        assert self.status(store, job.job_id) is JobStatus.SUCCEEDED

    def test_mixed_batch_applies_only_owned_outcomes(self, store: Any, clock: FakeClock) -> None:
        jobs = self.insert(store, clock, n=3)
        claimed = {c.job_id: c for c in self.claim(store, clock)}
        a, b, c = (claimed[j.job_id] for j in jobs)
        assert store.cancel_job(b.job_id, now=clock.now()).value
        written = store.record_outcomes(
            NODE,
            [
                outcome(a, OutcomeKind.SUCCEEDED, clock),
                outcome(b, OutcomeKind.SUCCEEDED, clock),
                outcome(c, OutcomeKind.DEAD, clock, error="boom"),
            ],
            now=clock.now(),
        )
        assert written.fenced == (b.job_id,)
        assert [self.status(store, j.job_id) for j in jobs] == [
            JobStatus.SUCCEEDED,
            JobStatus.CANCELED,
            JobStatus.FAILED,
        ]

    def test_retry_reschedules_with_backoff_and_counts_attempt(
        self, store: Any, clock: FakeClock
    ) -> None:
        [job] = self.insert(store, clock)
        [c] = self.claim(store, clock)
        retry_at = clock.now() + timedelta(seconds=10)
        store.record_outcomes(
            NODE,
            [outcome(c, OutcomeKind.RETRY, clock, error="E: x", retry_at=retry_at)],
            now=clock.now(),
        )
        rec = store.get_job(job.job_id)
        assert (rec.status, rec.attempts, rec.last_error) == (JobStatus.PENDING, 1, "E: x")
        assert rec.scheduled_time == retry_at and rec.picked_by is None
        clock.advance(9)
        assert self.claim(store, clock) == []
        clock.advance(1)
        [again] = self.claim(store, clock)
        assert (again.attempt, again.epoch) == (2, 2)

    def test_dead_letter_and_operator_retry(self, store: Any, clock: FakeClock) -> None:
        [job] = self.insert(store, clock)
        [c] = self.claim(store, clock)
        store.record_outcomes(
            NODE, [outcome(c, OutcomeKind.DEAD, clock, error="Boom: bad")], now=clock.now()
        )
        rec = store.get_job(job.job_id)
        assert (rec.status, rec.attempts, rec.last_error) == (JobStatus.FAILED, 1, "Boom: bad")
        assert self.claim(store, clock) == []
        assert store.retry_job(job.job_id, now=clock.now())
        rec = store.get_job(job.job_id)
        assert (rec.status, rec.attempts, rec.last_error) == (JobStatus.PENDING, 0, None)
        [again] = self.claim(store, clock)
        assert again.epoch > c.epoch, "epochs only grow, even across an operator retry"
        assert not store.retry_job(job.job_id, now=clock.now()), "only FAILED jobs can be retried"

    def test_reschedule_does_not_consume_a_retry(self, store: Any, clock: FakeClock) -> None:
        [job] = self.insert(store, clock)
        [c] = self.claim(store, clock)
        later = clock.now() + timedelta(seconds=30)
        store.record_outcomes(
            NODE, [outcome(c, OutcomeKind.RESCHEDULE, clock, retry_at=later)], now=clock.now()
        )
        rec = store.get_job(job.job_id)
        assert (rec.status, rec.attempts, rec.scheduled_time) == (JobStatus.PENDING, 0, later)

    def test_a_reschedule_stores_its_reason_as_the_last_error(
        self, store: Any, clock: FakeClock
    ) -> None:
        """A reschedule (breaker open, no permit) stopped an attempt for a reason: it is the
        job's last error. One without a reason keeps the previous last error."""
        [job] = failed_once(store, clock, 1)
        [c] = self.claim(store, clock)
        later = clock.now() + timedelta(seconds=30)
        why = "circuit open for billing-api"
        store.record_outcomes(
            NODE,
            [outcome(c, OutcomeKind.RESCHEDULE, clock, error=why, retry_at=later)],
            now=clock.now(),
        )
        rec = store.get_job(job.job_id)
        assert (rec.status, rec.attempts, rec.last_error) == (JobStatus.PENDING, 1, why)
        assert store.attempts(job.job_id)[-1].error == why
        clock.advance(timedelta(seconds=30))
        [c] = self.claim(store, clock)
        store.record_outcomes(
            NODE, [outcome(c, OutcomeKind.RESCHEDULE, clock, retry_at=later)], now=clock.now()
        )
        rec = store.get_job(job.job_id)
        assert (rec.status, rec.attempts, rec.last_error) == (JobStatus.PENDING, 1, why)

    def test_attempt_history(self, store: Any, clock: FakeClock) -> None:
        [job] = self.insert(store, clock)
        [c1] = self.claim(store, clock)
        store.record_outcomes(
            NODE,
            [outcome(c1, OutcomeKind.RETRY, clock, error="E1", retry_at=clock.now())],
            now=clock.now(),
        )
        [c2] = self.claim(store, clock, node=OTHER)
        clock.advance(1)
        store.record_outcomes(OTHER, [outcome(c2, OutcomeKind.SUCCEEDED, clock)], now=clock.now())
        history = store.attempts(job.job_id)
        assert [(a.attempt, a.epoch, a.node_id, a.outcome) for a in history] == [
            (1, 1, NODE, "RETRY"),
            (2, 2, OTHER, "SUCCEEDED"),
        ]
        assert history[0].error == "E1" and history[1].finished_at == clock.now()

    # ------------------------------------------------------------------ operators
    def test_pause_and_resume(self, store: Any, clock: FakeClock) -> None:
        [job] = self.insert(store, clock)
        assert store.pause_job(job.job_id, now=clock.now())
        assert store.pause_job(job.job_id, now=clock.now()), "pausing twice is fine"
        assert self.status(store, job.job_id) is JobStatus.PAUSED
        assert self.claim(store, clock) == []
        assert store.resume_job(job.job_id, now=clock.now())
        assert not store.resume_job(job.job_id, now=clock.now())
        assert self.status(store, job.job_id) is JobStatus.PENDING
        [c] = self.claim(store, clock)
        assert not store.pause_job(c.job_id, now=clock.now()), "a RUNNING job cannot be paused"
        assert not store.pause_job(uuid7(), now=clock.now())

    def test_cancel(self, store: Any, clock: FakeClock) -> None:
        pending, paused = self.insert(store, clock, n=2)
        store.pause_job(paused.job_id, now=clock.now())
        assert store.cancel_job(pending.job_id, now=clock.now()).value
        assert store.cancel_job(paused.job_id, now=clock.now()).value
        assert not store.cancel_job(pending.job_id, now=clock.now()).value, (
            "terminal jobs stay terminal"
        )
        assert not store.cancel_job(uuid7(), now=clock.now()).value
        assert self.status(store, pending.job_id) is JobStatus.CANCELED

    def test_cancel_running_job_fences_its_result(self, store: Any, clock: FakeClock) -> None:
        [job] = self.insert(store, clock)
        [c] = self.claim(store, clock)
        assert store.cancel_job(job.job_id, now=clock.now()).value
        assert store.record_outcomes(
            NODE, [outcome(c, OutcomeKind.SUCCEEDED, clock)], now=clock.now()
        ).fenced == (job.job_id,)
        assert self.status(store, job.job_id) is JobStatus.CANCELED
        assert store.attempts(job.job_id)[0].outcome == "CANCELED"

    def test_owned_jobs_names_only_jobs_still_running_here_under_their_epoch(
        self, store: Any, clock: FakeClock
    ) -> None:
        self.insert(store, clock, n=3)
        kept, canceled, stale = self.claim(store, clock)
        self.insert(store, clock)
        [theirs] = self.claim(store, clock, node=OTHER)
        assert store.cancel_job(canceled.job_id, now=clock.now()).value
        asked = [
            (kept.job_id, kept.epoch),
            (canceled.job_id, canceled.epoch),
            (stale.job_id, stale.epoch + 1),
            (theirs.job_id, theirs.epoch),
            (uuid7(), 1),
        ]
        assert store.owned_jobs(NODE, asked) == {(kept.job_id, kept.epoch)}
        assert store.owned_jobs(OTHER, asked) == {(theirs.job_id, theirs.epoch)}
        assert store.owned_jobs(NODE, []) == set()

    def test_cancel_by_tag_skips_running_jobs(self, store: Any, clock: FakeClock) -> None:
        running = self.insert(store, clock, tags=("batch-7",))[0]
        self.claim(store, clock)
        pending = self.insert(store, clock, tags=("batch-7", "x"))[0]
        paused = self.insert(store, clock, tags=("batch-7",))[0]
        other = self.insert(store, clock, tags=("other",))[0]
        store.pause_job(paused.job_id, now=clock.now())
        assert store.cancel_jobs_by_tag("Batch-7", now=clock.now()).value == 2
        assert [self.status(store, j.job_id) for j in (running, pending, paused, other)] == [
            JobStatus.RUNNING,
            JobStatus.CANCELED,
            JobStatus.CANCELED,
            JobStatus.PENDING,
        ]

    def test_replace_is_atomic_and_moves_business_key(self, store: Any, clock: FakeClock) -> None:
        [old] = self.insert(store, clock, business_key="invoice-9")
        replacement = new_job(clock, scheduled_time=clock.now() + timedelta(minutes=5))
        assert store.replace_job(old.job_id, replacement, now=clock.now()).value
        old_rec, new_rec = store.get_job(old.job_id), store.get_job(replacement.job_id)
        assert old_rec.status is JobStatus.CANCELED
        assert old_rec.superseded_by == replacement.job_id
        assert new_rec.status is JobStatus.PENDING and new_rec.business_key == "invoice-9"
        # Replacing a terminal job changes nothing and inserts nothing.
        ghost = new_job(clock)
        assert not store.replace_job(old.job_id, ghost, now=clock.now()).value
        assert store.get_job(ghost.job_id) is None

    def test_retry_jobs_bulk(self, store: Any, clock: FakeClock) -> None:
        jobs = self.insert(store, clock, n=5, tags=("etl",))
        for c in self.claim(store, clock):
            store.record_outcomes(
                NODE, [outcome(c, OutcomeKind.DEAD, clock, error="x")], now=clock.now()
            )
        assert store.retry_jobs(JobFilter(tag="etl"), 3, now=clock.now()) == 3
        statuses = sorted(self.status(store, j.job_id).value for j in jobs)
        assert statuses == ["FAILED", "FAILED", "PENDING", "PENDING", "PENDING"]
        assert store.retry_jobs(JobFilter(tag="nothing"), 10, now=clock.now()) == 0
        for bad in (0, 1001):
            with pytest.raises(InvalidJobOptions):
                store.retry_jobs(JobFilter(), bad, now=clock.now())

    def test_retry_jobs_is_all_or_nothing(self, store: Any, clock: FakeClock) -> None:
        first, second = self.insert(store, clock, n=2)
        k1 = self.insert(store, clock, business_key="bk-1")[0]
        claimed = self.claim(store, clock)
        for c in claimed:
            store.record_outcomes(NODE, [outcome(c, OutcomeKind.DEAD, clock)], now=clock.now())
        self.insert(store, clock, business_key="bk-1")  # takes the key while k1 is dead
        with pytest.raises(DuplicateBusinessKeyError):
            store.retry_jobs(JobFilter(), 10, now=clock.now())
        assert {self.status(store, j.job_id) for j in (first, second, k1)} == {JobStatus.FAILED}

    # ------------------------------------------------------------------ listing
    def test_list_and_count(self, store: Any, clock: FakeClock) -> None:
        _a, b, c = self.insert(store, clock, n=3)
        store.cancel_job(c.job_id, now=clock.now())
        self.claim(store, clock, limit=1)
        counts = store.count_by_status()
        assert (
            counts.get("RUNNING") == 1
            and counts.get("PENDING") == 1
            and counts.get("CANCELED") == 1
        )
        canceled = store.list_jobs(JobFilter(statuses=(JobStatus.CANCELED,)), 10)
        assert [r.job_id for r in canceled] == [c.job_id]
        assert [r.job_id for r in store.list_jobs(JobFilter(), 2)] == [c.job_id, b.job_id]

    def test_database_time_is_close_to_real_time(self, store: Any) -> None:
        from datetime import UTC, datetime

        skew = abs(store.database_time() - datetime.now(UTC))
        assert skew < timedelta(seconds=5)

    # ------------------------------------------------------------------ keys and boost (issue 9)
    RACERS = 4

    def race(self, store: Any, **keys: str) -> list[dict[str, Any]]:
        """``RACERS`` processes insert one job each with ``keys``, started by one signal: on a
        store with flows every other racer submits the job as the head of a chain (a flow
        insert), so plain and flow submissions race each other."""
        import json
        import subprocess
        import sys

        flows = store.capability(WorkflowStore) is not None
        paths = ("plain", "chain") if flows else ("plain",)
        cmd = [sys.executable, "-m", "ratchet.testing.racer", store.url, json.dumps(keys)]
        procs = [
            subprocess.Popen(
                [*cmd, paths[i % len(paths)]],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(self.RACERS)
        ]
        try:
            for p in procs:  # every racer is connected and waiting
                assert p.stdout is not None and p.stdout.readline().strip() == "ready"
            for p in procs:  # then all start at once
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
            got = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:  # pragma: no cover - a hung racer
                    p.kill()
        errors = [g for g in got if g["outcome"] == "error"]
        assert not errors, errors
        return got

    def test_idempotency_key_race_between_processes(self, store: Any) -> None:
        got = self.race(store, idempotency_key="webhook-delivery-77")
        holders = {g["job_id"] for g in got}
        assert len(holders) == 1, got
        assert [g["inserted"] for g in got].count(True) == 1, got
        [holder] = holders
        assert str(store.find_by_idempotency_key("webhook-delivery-77")) == holder
        [stored] = [g["job_ids"] for g in got if g["inserted"]]
        assert sorted(str(r.job_id) for r in store.list_jobs(JobFilter(), 10)) == sorted(stored)

    def test_business_key_race_between_processes(self, store: Any) -> None:
        got = self.race(store, business_key="sync-user-42")
        winners = [g for g in got if g["outcome"] == "inserted"]
        losers = [g for g in got if g["outcome"] == "duplicate-business-key"]
        assert len(winners) == 1 and len(losers) == self.RACERS - 1, got
        holder = winners[0]["job_id"]
        assert {g["holder"] for g in losers} <= {holder, None}, "the error names the holder"
        stored = winners[0]["job_ids"]
        assert sorted(str(r.job_id) for r in store.list_jobs(JobFilter(), 10)) == sorted(stored)

    def test_duplicate_business_key_names_its_holder_after_a_retry(
        self, store: Any, clock: FakeClock
    ) -> None:
        [first] = self.insert(store, clock, business_key="sync-user-7")
        [claimed] = self.claim(store, clock)
        store.record_outcomes(
            NODE,
            [outcome(claimed, OutcomeKind.RETRY, clock, retry_at=clock.now())],
            now=clock.now(),
        )
        with pytest.raises(DuplicateBusinessKeyError) as err:
            self.insert(store, clock, business_key="sync-user-7")
        assert err.value.holder == first.job_id, "a job waiting for its retry is live"
        [again] = self.claim(store, clock)
        store.record_outcomes(
            NODE, [outcome(again, OutcomeKind.DEAD, clock, error="x")], now=clock.now()
        )
        [second] = self.insert(store, clock, business_key="sync-user-7")
        assert self.status(store, second.job_id) is JobStatus.PENDING

    @pytest.mark.parametrize(
        ("waited", "expected"),
        [
            (timedelta(minutes=20) - timedelta(microseconds=1), "critical"),
            (timedelta(minutes=20), "lowest"),
            (timedelta(minutes=24, seconds=59), "lowest"),
        ],
    )
    def test_age_boost_with_a_custom_interval_to_the_microsecond(
        self, store: Any, clock: FakeClock, waited: timedelta, expected: str
    ) -> None:
        """LOWEST (0) + floor(waited / 5 min) against a fresh CRITICAL (4); a tie goes to the
        job that has waited longer."""
        t0 = clock.now()
        lowest = new_job(clock, priority=JobPriority.LOWEST, scheduled_time=t0 - waited)
        critical = new_job(clock, priority=JobPriority.CRITICAL, scheduled_time=t0)
        store.insert_jobs([critical, lowest], now=t0)
        [first] = store.claim(NODE, 1, now=t0, boost_interval=timedelta(minutes=5))
        assert first.job_id == {"critical": critical, "lowest": lowest}[expected].job_id

    def test_age_boost_counts_from_the_scheduled_time_not_creation(
        self, store: Any, clock: FakeClock
    ) -> None:
        t0 = clock.now()
        old_but_recently_due = new_job(
            clock,
            priority=JobPriority.LOW,
            created_at=t0 - timedelta(days=2),
            scheduled_time=t0 - timedelta(minutes=1),
        )
        high = new_job(clock, priority=JobPriority.HIGH, scheduled_time=t0)
        store.insert_jobs([old_but_recently_due, high], now=t0)
        order = [c.job_id for c in self.claim(store, clock, limit=2)]
        assert order == [high.job_id, old_but_recently_due.job_id]
