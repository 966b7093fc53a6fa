"""Batches, streaming batches, chains, workflows, signals and callbacks through the app API.

The worker runs in this thread (claim, execute, record) on SQLite with a fake clock, so every
step is deterministic. The same store logic runs on every backend in the workflow contract.
"""

from __future__ import annotations

import http
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import flow_jobs
import pytest
from sqlalchemy import text

from ratchet import (
    BatchChunkError,
    ClassPolicyViolation,
    EventKind,
    InvalidJobOptions,
    InvalidJobTarget,
    JobEvent,
    JobFilter,
    JobStatus,
    Ratchet,
    SignalDecision,
    WorkflowCondition,
)
from ratchet.domain.workflow import EffectKind, FlowEffect
from ratchet.engine.worker import Worker
from ratchet.engine.workflows import SignalTimeoutScanner, apply_effects
from ratchet.testing import FakeClock
from tripwire_fixtures import Tripwire


@pytest.fixture
def app(sqlite_url: str, clock: FakeClock) -> Iterator[Ratchet]:
    flow_jobs.reset()
    app = Ratchet(sqlite_url, allowed_modules=["flow_jobs"], clock=clock)
    yield app
    app.close()


@pytest.fixture
def events(app: Ratchet) -> list[JobEvent]:
    seen: list[JobEvent] = []
    app.add_event_listener(seen.append)
    return seen


def kinds(events: list[JobEvent], kind: EventKind) -> list[JobEvent]:
    return [e for e in events if e.kind is kind]


def run_all(app: Ratchet, worker: Worker | None = None) -> Worker:
    """Claim and run every due job synchronously, recording outcomes as the worker does."""
    worker = worker or app.worker(concurrency=50)
    while jobs := worker.poll_once():
        worker.run_claimed(jobs)
    return worker


def status(app: Ratchet, job_id: uuid.UUID) -> JobStatus:
    rec = app.get_job(job_id)
    assert rec is not None
    return rec.status


def children_of(app: Ratchet, parent: uuid.UUID) -> dict[str, JobStatus]:
    """Status of every job created with ``parent``'s flow, by target."""
    from sqlalchemy import select

    from ratchet.sql import schema

    J = schema.job
    with app.store.connect() as conn:  # type: ignore[attr-defined]
        rows = conn.execute(
            select(J.c.job_id, J.c.target).where(
                (J.c.depends_on == parent) | (J.c.chain_id == parent)
            )
        ).all()
    return {f"{r.target}:{r.job_id}": status(app, r.job_id) for r in rows}


# -- callbacks ---------------------------------------------------------------------------------
def test_on_success_runs_after_commit_with_the_jobs_context(
    app: Ratchet, events: list[JobEvent]
) -> None:
    h = app.enqueue(flow_jobs.value, 5).with_param("k", "v").on_success(flow_jobs.on_ok).submit()
    run_all(app)
    assert status(app, h.id) is JobStatus.SUCCEEDED
    assert flow_jobs.seen("on_success") == [h.id]
    completed = [e.kind for e in events if e.job_id == h.id]
    assert completed.index(EventKind.COMPLETED) >= 0


def test_a_callback_context_without_attempt_times_reads_the_app_clock(
    app: Ratchet, clock: FakeClock
) -> None:
    """Regression: the callback's JobContext fell back to ``datetime.now()`` (the local wall
    clock) when its effect carried neither a start nor an end time."""
    clock.set(datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC))
    job_id = uuid.uuid4()
    effect = FlowEffect(EffectKind.ON_SUCCESS, job_id, job_id, "flow_jobs:note_context_time", {})
    apply_effects(app, [effect], "n1")
    assert flow_jobs.seen("context_time") == [clock.now()]


def test_on_failure_runs_once_on_the_dlq_not_on_each_retry(app: Ratchet, clock: FakeClock) -> None:
    h = (
        app.enqueue(flow_jobs.boom, "bad")
        .with_max_retries(2)
        .with_backoff("FIXED", timedelta(seconds=1))
        .on_failure(flow_jobs.on_bad)
        .submit()
    )
    worker = run_all(app)
    assert status(app, h.id) is JobStatus.PENDING  # retrying
    assert flow_jobs.seen("on_failure") == []
    for _ in range(2):
        clock.advance(timedelta(seconds=1))
        run_all(app, worker)
    assert status(app, h.id) is JobStatus.FAILED
    [(job_id, error)] = flow_jobs.seen("on_failure")
    assert job_id == h.id and "RuntimeError: bad" in error
    assert len(flow_jobs.seen("boom")) == 3


def test_a_raising_callback_never_changes_the_outcome(
    app: Ratchet, events: list[JobEvent], caplog: pytest.LogCaptureFixture
) -> None:
    h = app.enqueue(flow_jobs.value, 1).on_success(flow_jobs.callback_raises).submit()
    run_all(app)
    assert status(app, h.id) is JobStatus.SUCCEEDED
    [failed] = kinds(events, EventKind.CALLBACK_FAILED)
    assert failed.job_id == h.id and "callback broke" in failed.data["error"]
    assert "callback broke" in caplog.text


# -- chains --------------------------------------------------------------------------------------
def test_chain_steps_stay_hidden_until_their_predecessor_succeeds(
    app: Ratchet, events: list[JobEvent]
) -> None:
    h = (
        app.enqueue(flow_jobs.step, "a")
        .then(flow_jobs.step, "b")
        .then(flow_jobs.step, "c")
        .submit()
    )
    steps = children_of(app, h.id)
    assert sorted(steps.values()) == [JobStatus.PENDING, JobStatus.WAITING, JobStatus.WAITING]
    worker = app.worker(concurrency=50)
    claimed = worker.poll_once()
    assert [j.job_id for j in claimed] == [h.id], "only the head is claimable"
    worker.run_claimed(claimed)
    run_all(app, worker)
    assert flow_jobs.seen("step") == ["a", "b", "c"]
    assert set(children_of(app, h.id).values()) == {JobStatus.SUCCEEDED}
    assert [e.job_id for e in kinds(events, EventKind.CHAIN_STARTED)] == [h.id]
    assert [e.job_id for e in kinds(events, EventKind.CHAIN_COMPLETED)] == [h.id]


def test_a_permanent_failure_cancels_every_downstream_step(
    app: Ratchet, events: list[JobEvent]
) -> None:
    h = (
        app.enqueue(flow_jobs.step, "a")
        .then(flow_jobs.boom, "b fails")
        .then(flow_jobs.step, "c")
        .then(flow_jobs.step, "d")
        .submit()
    )
    run_all(app)
    assert flow_jobs.seen("step") == ["a"]
    statuses = sorted(children_of(app, h.id).values())
    assert statuses == [
        JobStatus.CANCELED,
        JobStatus.CANCELED,
        JobStatus.FAILED,
        JobStatus.SUCCEEDED,
    ]
    [failed] = kinds(events, EventKind.CHAIN_FAILED)
    assert failed.job_id == h.id and "b fails" in failed.data["error"]
    assert kinds(events, EventKind.CHAIN_COMPLETED) == []


def test_canceling_a_chain_step_cancels_the_rest(app: Ratchet) -> None:
    h = (
        app.enqueue(flow_jobs.step, "a")
        .then(flow_jobs.step, "b")
        .then(flow_jobs.step, "c")
        .submit()
    )
    assert app.cancel_job(h.id)
    assert set(children_of(app, h.id).values()) == {JobStatus.CANCELED}
    run_all(app)
    assert flow_jobs.seen("step") == []


# -- workflows: each condition type -------------------------------------------------------------
def test_success_and_failure_branches(app: Ratchet, events: list[JobEvent]) -> None:
    ok = (
        app.enqueue(flow_jobs.value, 1)
        .then_on_success(flow_jobs.step, "ok-branch")
        .then_on_failure(flow_jobs.step, "fail-branch")
        .submit()
    )
    bad = (
        app.enqueue(flow_jobs.boom)
        .then_on_success(flow_jobs.step, "ok-branch-2")
        .then_on_failure(flow_jobs.step, "fail-branch-2")
        .submit()
    )
    run_all(app)
    assert sorted(flow_jobs.seen("step")) == ["fail-branch-2", "ok-branch"]
    assert sorted(children_of(app, ok.id).values()) == [JobStatus.CANCELED, JobStatus.SUCCEEDED]
    assert sorted(children_of(app, bad.id).values()) == [JobStatus.CANCELED, JobStatus.SUCCEEDED]
    triggered = kinds(events, EventKind.WORKFLOW_BRANCH_TRIGGERED)
    assert {e.data["condition"] for e in triggered} == {"SUCCESS", "FAILURE"}


def test_custom_and_result_value_conditions(app: Ratchet) -> None:
    (
        app.enqueue(flow_jobs.value, 12)
        .when(flow_jobs.is_big, flow_jobs.step, "big")
        .when_result(flow_jobs.value_is_even, flow_jobs.step, "even")
        .submit()
    )
    (
        app.enqueue(flow_jobs.value, 3)
        .when(flow_jobs.is_big, flow_jobs.step, "big-3")
        .when_result(flow_jobs.value_is_even, flow_jobs.step, "even-3")
        .submit()
    )
    run_all(app)
    assert sorted(flow_jobs.seen("step")) == ["big", "even"]


def test_branch_with_an_explicit_condition_and_description(
    app: Ratchet, events: list[JobEvent]
) -> None:
    app.enqueue(flow_jobs.boom).branch(
        WorkflowCondition.failure(), flow_jobs.step, "alert", description="page on-call"
    ).submit()
    run_all(app)
    assert flow_jobs.seen("step") == ["alert"]
    [e] = kinds(events, EventKind.WORKFLOW_BRANCH_TRIGGERED)
    assert e.data["description"] == "page on-call"


def test_fan_out_fires_every_matching_branch(app: Ratchet) -> None:
    (
        app.enqueue(flow_jobs.value, 20)
        .when(flow_jobs.always, flow_jobs.step, "one", priority=5)
        .when(flow_jobs.is_big, flow_jobs.step, "two")
        .then_on_success(flow_jobs.step, "three")
        .then_on_failure(flow_jobs.step, "never")
        .submit()
    )
    run_all(app)
    assert sorted(flow_jobs.seen("step")) == ["one", "three", "two"]


def test_first_match_fires_only_the_first_by_priority_then_definition_order(
    app: Ratchet,
) -> None:
    h = (
        app.enqueue(flow_jobs.value, 20)
        .when(flow_jobs.always, flow_jobs.step, "late", priority=5)
        .then_on_failure(flow_jobs.step, "no-match")
        .when(flow_jobs.is_big, flow_jobs.step, "first")
        .then_on_success(flow_jobs.step, "second")
        .with_first_match()
        .submit()
    )
    run_all(app)
    assert flow_jobs.seen("step") == ["first"]
    assert sorted(children_of(app, h.id).values()).count(JobStatus.CANCELED) == 3


def test_a_raising_predicate_does_not_fire_and_is_reported(
    app: Ratchet, events: list[JobEvent]
) -> None:
    app.enqueue(flow_jobs.value, 1).when(flow_jobs.predicate_raises, flow_jobs.step, "x").when(
        flow_jobs.always, flow_jobs.step, "y"
    ).submit()
    run_all(app)
    assert flow_jobs.seen("step") == ["y"]
    [e] = kinds(events, EventKind.WORKFLOW_CONDITION_FAILED)
    assert "predicate broke" in e.data["error"]


# -- batches -----------------------------------------------------------------------------------
def batch_outcome(app: Ratchet, items: list[int], **conditions: Any) -> list[str]:
    b = app.enqueue_batch("numbers").for_each(items, flow_jobs.item)
    b = (
        b.then_on_batch_success(flow_jobs.step, "batch-success")
        .then_on_batch_failure(flow_jobs.step, "batch-failure")
        .then_when_success_rate(conditions.get("rate", 0.5), flow_jobs.step, "rate")
        .then_when_failure_count(conditions.get("failures", 2), flow_jobs.step, "failure-count")
        .then_when_batch(flow_jobs.most_succeeded, flow_jobs.step, "custom")
    )
    h = b.submit()
    run_all(app)
    assert h.status() is JobStatus.SUCCEEDED
    return sorted(flow_jobs.seen("step"))


def test_batch_conditions_all_children_succeed(app: Ratchet) -> None:
    assert batch_outcome(app, [1, 2, 3]) == ["batch-success", "custom", "rate"]


def test_batch_conditions_with_failures(app: Ratchet) -> None:
    # 7 and 14 fail: 2 of 4 -> success rate 0.5, failure count 2
    assert batch_outcome(app, [7, 14, 1, 2]) == ["batch-failure", "failure-count", "rate"]


def test_failure_count_means_reached(app: Ratchet) -> None:
    # one failure: failure_count(1) fires (reached), failure_count(2) does not
    assert "failure-count" in batch_outcome(app, [7, 1, 2], failures=1)
    flow_jobs.reset()
    assert "failure-count" not in batch_outcome(app, [7, 1, 2], failures=2)


def test_batch_counts_progress_and_one_completion(app: Ratchet, events: list[JobEvent]) -> None:
    items = list(range(1, 50))
    h = (
        app.enqueue_batch("progress")
        .for_each(items, flow_jobs.item)
        .on_progress(flow_jobs.progress)
        .with_max_retries(0)
        .submit()
    )
    assert h.status() is JobStatus.WAITING
    run_all(app)
    failed = sum(1 for n in items if n % 7 == 0)
    ctx = h.context()
    assert (ctx.total, ctx.completed, ctx.failed) == (49, 49 - failed, failed)
    assert ctx.is_complete and ctx.percent_done == 100.0
    # one report per committed write that recorded children (this worker wrote them at once)
    assert flow_jobs.seen("progress")[-1] == (49 - failed, failed)
    [done] = kinds(events, EventKind.BATCH_COMPLETED)
    assert done.job_id == h.id and done.data["failed"] == failed
    assert h.status() is JobStatus.SUCCEEDED
    assert app.store.batch_completion_processed(h.id)  # type: ignore[attr-defined]


def test_batch_children_have_their_own_retries_and_resource(app: Ratchet, clock: FakeClock) -> None:
    h = (
        app.enqueue_batch("retrying")
        .for_each([7, 1], flow_jobs.item)
        .with_max_retries(1)
        .with_backoff("FIXED", timedelta(seconds=1))
        .with_resource("cpu")
        .submit()
    )
    worker = run_all(app)
    assert h.context().processed == 1
    clock.advance(timedelta(seconds=1))
    run_all(app, worker)
    ctx = h.context()
    assert (ctx.completed, ctx.failed) == (1, 1)
    assert len([j for j in app.list_jobs() if j.resource_name == "cpu"]) == 2


def test_canceling_a_batch_cancels_its_children_and_branches(
    app: Ratchet, events: list[JobEvent]
) -> None:
    h = (
        app.enqueue_batch("doomed")
        .for_each([1, 2, 3], flow_jobs.item)
        .then_on_batch_success(flow_jobs.step, "never")
        .submit()
    )
    assert h.cancel()
    run_all(app)
    assert flow_jobs.seen("step") == []
    assert h.status() is JobStatus.CANCELED
    assert kinds(events, EventKind.BATCH_COMPLETED) == []
    canceled = [j for j in app.list_jobs() if j.status is JobStatus.CANCELED]
    assert len(canceled) == 5  # parent, three children, one branch


def test_canceling_the_last_live_child_completes_the_batch_with_what_follows(
    app: Ratchet, events: list[JobEvent]
) -> None:
    """A cancel ends a job as an outcome does: the batch it completes reports its progress,
    emits ``batch_completed`` and fires its branches, applied by the canceling app."""
    h = (
        app.enqueue_batch("last-one-canceled")
        .for_each([1, 2, 3], flow_jobs.item)
        .on_progress(flow_jobs.progress)
        .then_on_batch_success(flow_jobs.step, "all-succeeded")
        .then_when_batch(flow_jobs.most_succeeded, flow_jobs.step, "most-succeeded")
        .submit()
    )
    worker = app.worker(concurrency=2)
    worker.run_claimed(worker.poll_once())
    [last] = app.list_jobs(JobFilter(statuses=(JobStatus.PENDING,)))
    assert kinds(events, EventKind.BATCH_COMPLETED) == []

    assert app.cancel_job(last.job_id)
    assert flow_jobs.seen("progress")[-1] == (2, 1), "the canceled child counts as failed"
    [done] = kinds(events, EventKind.BATCH_COMPLETED)
    assert done.job_id == h.id and (done.data["completed"], done.data["failed"]) == (2, 1)
    [fired] = kinds(events, EventKind.WORKFLOW_BRANCH_TRIGGERED)
    assert fired.data["parent"] == str(h.id)
    assert h.status() is JobStatus.SUCCEEDED
    run_all(app, worker)
    assert flow_jobs.seen("step") == ["most-succeeded"]


def test_batch_submits_in_the_callers_transaction(app: Ratchet) -> None:
    with app.store.connect() as conn, conn.begin() as tx:  # type: ignore[attr-defined]
        h = app.enqueue_batch("tx").for_each([1, 2], flow_jobs.item).submit(connection=conn)
        tx.rollback()
    assert app.get_job(h.id) is None
    assert app.list_jobs() == []


# -- streaming batches -----------------------------------------------------------------------------
def test_streaming_batch_reads_lazily_in_chunks(app: Ratchet, events: list[JobEvent]) -> None:
    pulled: list[int] = []

    def source() -> Iterator[int]:
        for n in range(1, 11):
            pulled.append(n)
            yield n

    progress: list[tuple[int, int]] = []
    h = (
        app.streaming_batch("stream")
        .from_iterable(source())
        .process(flow_jobs.item)
        .with_chunk_size(3)
        .on_progress(lambda p: progress.append((p.processed_items, p.chunks_inserted)))
        .on_batch_progress(flow_jobs.progress)
        .then_on_batch_failure(flow_jobs.step, "had-failures")
        .start()
    )
    assert progress == [(3, 1), (6, 2), (9, 3), (10, 4)]
    run_all(app)
    ctx = h.context()
    assert (ctx.total, ctx.completed, ctx.failed, ctx.sealed) == (10, 9, 1, True)
    assert flow_jobs.seen("step") == ["had-failures"]
    assert len(kinds(events, EventKind.BATCH_COMPLETED)) == 1


def test_streaming_children_may_finish_before_the_stream_ends(app: Ratchet) -> None:
    worker = app.worker(concurrency=50)

    def source() -> Iterator[int]:
        yield from (1, 2)
        run_all(app, worker)  # the first chunk ran to completion while we were still streaming
        yield 3

    h = (
        app.streaming_batch("early")
        .from_iterable(source())
        .process(flow_jobs.item)
        .with_chunk_size(2)
    )
    handle = h.then_on_batch_success(flow_jobs.step, "done").start()
    assert handle.context().processed == 2 and not handle.status().is_terminal
    run_all(app, worker)
    assert handle.status() is JobStatus.SUCCEEDED
    assert flow_jobs.seen("step") == ["done"]


def test_a_failing_chunk_rolls_back_and_cancels_the_batch(
    app: Ratchet, events: list[JobEvent]
) -> None:
    def source() -> Iterator[Any]:
        yield from (1, 2, 3, 4)
        yield object()  # not JSON-storable: this chunk cannot be built

    builder = app.streaming_batch("broken").from_iterable(source()).process(flow_jobs.item)
    with pytest.raises(BatchChunkError, match="chunk 3"):
        builder.with_chunk_size(2).start()
    [failure] = kinds(events, EventKind.BATCH_CHUNK_FAILED)
    assert failure.data["processed"] == 4
    jobs = app.list_jobs()
    assert len(jobs) == 5, "the parent and the first two chunks; nothing of the failed one"
    assert {j.status for j in jobs} == {JobStatus.CANCELED}


# -- signals -------------------------------------------------------------------------------------
def test_signal_by_id_releases_the_job_with_its_payload(
    app: Ratchet, events: list[JobEvent]
) -> None:
    h = (
        app.enqueue(flow_jobs.read_signal)
        .with_await_signal("approve-1", timedelta(hours=1))
        .submit()
    )
    assert h.status() is JobStatus.WAITING
    run_all(app)
    assert flow_jobs.seen("signal") == []
    assert app.deliver_signal(h.id, {"approved_by": "ana"}) == 1
    assert app.deliver_signal(h.id, {"approved_by": "bob"}) == 0, "idempotent"
    run_all(app)
    assert flow_jobs.seen("signal") == [{"approved_by": "ana"}]
    assert h.result() == {"approved_by": "ana"}
    assert [e.kind for e in events if e.job_id == h.id][:2] == [
        EventKind.SUBMITTED,
        EventKind.SIGNAL_WAITING,
    ]
    assert len(kinds(events, EventKind.SIGNALED)) == 1


def test_signal_by_key_releases_every_waiting_job_once(
    app: Ratchet, events: list[JobEvent]
) -> None:
    hs = [
        app.enqueue(flow_jobs.read_signal).with_await_signal("order-7", timedelta(hours=1)).submit()
        for _ in range(3)
    ]
    other = (
        app.enqueue(flow_jobs.read_signal).with_await_signal("order-8", timedelta(hours=1)).submit()
    )
    assert app.deliver_signal("order-7", SignalDecision.rejected("out of stock")) == 3
    assert app.deliver_signal("order-7", SignalDecision.approved()) == 0
    run_all(app)
    assert [h.result() for h in hs] == ["REJECTED"] * 3
    decision = flow_jobs.seen("signal")[0]
    assert decision.is_rejected and decision.rejection_reason == "out of stock"
    assert other.status() is JobStatus.WAITING
    [bulk] = kinds(events, EventKind.BULK_SIGNALED)
    assert bulk.data == {"key": "order-7", "count": 3}


def test_signal_payloads_hold_only_enums_the_class_policy_allows(
    app: Ratchet, tripwire: Tripwire
) -> None:
    h = app.enqueue(flow_jobs.read_signal).with_await_signal("k", timedelta(hours=1)).submit()
    with pytest.raises(ClassPolicyViolation, match="http:HTTPStatus"):
        app.deliver_signal(h.id, {"status": http.HTTPStatus.OK})
    with pytest.raises(ClassPolicyViolation, match="http:HTTPStatus"):
        app.deliver_signal("k", SignalDecision.approved(payload=http.HTTPStatus.OK))
    assert h.status() is JobStatus.WAITING, "nothing was delivered"
    # A stored signal naming a refused module is refused when the job reads it, unimported.
    assert app.deliver_signal(h.id, "placeholder") == 1
    stored = f'{{"payload":{{"__ratchet__":"enum","t":"{tripwire.enum_ref}","v":"red"}}}}'
    with app.store.connect() as conn, conn.begin():
        conn.execute(text("UPDATE scheduler_job_queue SET signal_payload = :s"), {"s": stored})
    run_all(app)
    rec = app.get_job(h.id)
    assert rec.status is JobStatus.FAILED and "ClassPolicyViolation" in rec.last_error
    assert not tripwire.imported, "the refused module's top-level code ran"


def test_signal_timeout_fails_through_the_retry_policy(
    app: Ratchet, clock: FakeClock, events: list[JobEvent]
) -> None:
    once = (
        app.enqueue(flow_jobs.read_signal)
        .with_await_signal("k", timedelta(minutes=5))
        .on_failure(flow_jobs.on_bad)
        .then_on_failure(flow_jobs.step, "timed-out-branch")
        .submit()
    )
    retried = (
        app.enqueue(flow_jobs.read_signal)
        .with_await_signal("k2", timedelta(minutes=5))
        .with_max_retries(1)
        .submit()
    )
    worker = app.worker(concurrency=4)
    scanner = SignalTimeoutScanner(timedelta(seconds=1))
    clock.advance(timedelta(minutes=4))
    scanner.run_once(worker)
    assert once.status() is JobStatus.WAITING
    clock.advance(timedelta(minutes=2))
    scanner.run_once(worker)
    assert once.status() is JobStatus.FAILED
    assert "SignalTimeoutError" in (once.record().last_error or "")
    assert retried.status() is JobStatus.WAITING, "a retry left: it waits again"
    assert retried.record().attempts == 1
    [(_, error)] = flow_jobs.seen("on_failure")
    assert "SignalTimeoutError" in error
    run_all(app, worker)
    assert flow_jobs.seen("step") == ["timed-out-branch"]
    clock.advance(timedelta(minutes=6))
    scanner.run_once(worker)
    assert retried.status() is JobStatus.FAILED
    assert len(kinds(events, EventKind.SIGNAL_TIMED_OUT)) == 3
    assert app.deliver_signal("k2") == 0


# -- bad input ------------------------------------------------------------------------------------
def test_non_importable_predicates_and_callbacks_are_refused(app: Ratchet) -> None:
    def local(result: Any) -> bool:
        return True

    b = app.enqueue(flow_jobs.value, 1)
    with pytest.raises(InvalidJobTarget, match="predicate"):
        b.when(lambda r: True, flow_jobs.step, "x")
    with pytest.raises(InvalidJobTarget, match="predicate"):
        b.when_result(local, flow_jobs.step, "x")
    with pytest.raises(InvalidJobTarget, match="on_success"):
        b.on_success(lambda ctx: None)
    with pytest.raises(ClassPolicyViolation):
        b.on_failure(uuid.uuid4)  # type: ignore[arg-type]
    batch = app.enqueue_batch("b").for_each([1], flow_jobs.item)
    with pytest.raises(InvalidJobTarget):
        batch.then_when_batch(lambda ctx: True, flow_jobs.step, "x")
    with pytest.raises(InvalidJobTarget):
        batch.on_progress(local)
    b.submit()


def test_empty_batches_are_refused(app: Ratchet) -> None:
    with pytest.raises(InvalidJobOptions, match="at least one item"):
        app.enqueue_batch("empty").for_each([], flow_jobs.item)
    with pytest.raises(InvalidJobOptions, match="at least one item"):
        app.streaming_batch("empty").from_iterable(iter(())).process(flow_jobs.item).start()
    with pytest.raises(InvalidJobOptions, match="for_each"):
        app.enqueue_batch("no items").submit()
    with pytest.raises(InvalidJobOptions, match="name"):
        app.enqueue_batch("  ")
    assert app.list_jobs() == []


@pytest.mark.parametrize("size", [0, -1, 1.5, True])
def test_chunk_size_must_be_positive(app: Ratchet, size: Any) -> None:
    with pytest.raises(InvalidJobOptions, match="chunk size"):
        app.streaming_batch("s").with_chunk_size(size)


def test_signal_keys_and_timeouts_are_checked(app: Ratchet) -> None:
    b = app.enqueue(flow_jobs.read_signal)
    with pytest.raises(InvalidJobOptions, match="at most 255"):
        b.with_await_signal("k" * 256, timedelta(minutes=1))
    with pytest.raises(InvalidJobOptions, match="blank"):
        b.with_await_signal("  ", timedelta(minutes=1))
    with pytest.raises(InvalidJobOptions, match="printable ASCII"):
        b.with_await_signal("clé", timedelta(minutes=1))
    with pytest.raises(InvalidJobOptions, match="positive"):
        b.with_await_signal("k", timedelta(0))
    with pytest.raises(InvalidJobOptions, match="at most 255"):
        app.deliver_signal("k" * 256)
    with pytest.raises(InvalidJobOptions, match="job id"):
        app.deliver_signal(42)  # type: ignore[arg-type]
    b.with_await_signal("k" * 255, timedelta(minutes=1)).submit()
    assert app.deliver_signal("k" * 255, "ok") == 1


def test_other_bad_workflow_input(app: Ratchet) -> None:
    b = app.enqueue(flow_jobs.value, 1)
    with pytest.raises(InvalidJobOptions, match="success rate"):
        WorkflowCondition.success_rate(1.5)
    with pytest.raises(InvalidJobOptions, match="failure count"):
        WorkflowCondition.failure_count(-1)
    with pytest.raises(InvalidJobOptions, match="WorkflowCondition"):
        b.branch("SUCCESS", flow_jobs.step, "x")  # type: ignore[arg-type]
    with pytest.raises(InvalidJobOptions, match="batches"):
        app.enqueue(flow_jobs.value, 1).branch(
            WorkflowCondition.batch_success(), flow_jobs.step, "x"
        ).submit()
    flow = app.enqueue(flow_jobs.value, 1).then(flow_jobs.step, "x")
    with pytest.raises(InvalidJobOptions, match="own submit"):
        app.submit_many([flow])
    flow.submit()
    b.submit()


def test_idempotency_key_dedupes_a_whole_flow(app: Ratchet) -> None:
    first = app.enqueue(flow_jobs.step, "a").then(flow_jobs.step, "b").with_idempotency_key("f-1")
    h1 = first.submit()
    h2 = (
        app.enqueue(flow_jobs.step, "a")
        .then(flow_jobs.step, "b")
        .with_idempotency_key("f-1")
        .submit()
    )
    assert (h2.id, h2.inserted) == (h1.id, False)
    assert len(app.list_jobs()) == 2
