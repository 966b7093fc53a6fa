"""Conformance suite of the :class:`~ratchet.ports.QueryStore` capability (``app.jobs``).

Subclass :class:`QueryStoreContract` where the ``store`` and ``clock`` fixtures of
:class:`~ratchet.testing.store_contract.StoreContract` exist. A store without the capability
skips every test as N/A.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from ratchet.domain.errors import InvalidJobOptions
from ratchet.domain.flows import BatchSpec, BranchSpec, FlowJob, waiting
from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.model import ClaimedJob, JobRecord, NewJob, OutcomeKind
from ratchet.domain.query import JobLink, JobQuery
from ratchet.domain.sanitize import SanitizePolicy, sanitize_text
from ratchet.domain.workflow import ConditionType, JobType, WorkflowCondition
from ratchet.ids import uuid7
from ratchet.ports import QueryStore, WorkflowStore
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import BOOST, NODE, OTHER, new_job, outcome

#: Error texts that try every trick on a store: quotes and SQL, NUL, lone surrogates, control
#: characters, non-BMP text, and secrets the sanitiser must remove before the write.
HOSTILE_ERRORS = (
    "ValueError: '; DROP TABLE scheduler_job; -- password=hunter2",
    "db.Error: could not connect to postgresql://app:s3cr3t-pw@db.internal:5432/prod",
    'KeyError: "token=abc123XYZ" and \\x00 NUL \x00 in the middle',
    "OSError: lone surrogate \udcff, tab\t, bell\x07, emoji \U0001f525, api_key: AKIA0000SECRET",
    "HTTPError: GET https://user:pa%40ss@api.example.com/v1?secret=topsecret&x=1 for bob@example.org",
)
#: Secrets planted in :data:`HOSTILE_ERRORS`; none may be read back.
PLANTED = ("hunter2", "s3cr3t-pw", "abc123XYZ", "AKIA0000SECRET", "pa%40ss", "topsecret", "bob@")


def ids(records: list[JobRecord]) -> list[uuid.UUID]:
    return [r.job_id for r in records]


class QueryStoreContract:
    """Keyset pages, filters, dependants, queue health. Needs ``store`` and ``clock``."""

    @pytest.fixture
    def query(self, store: Any) -> QueryStore:
        cap = store.capability(QueryStore)
        if cap is None:
            pytest.skip("N/A: the store has no QueryStore capability")
        return cap  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ helpers
    def insert(self, store: Any, clock: FakeClock, n: int = 1, **overrides: Any) -> list[NewJob]:
        jobs = []
        for _ in range(n):
            jobs.append(new_job(clock, **overrides))
            clock.advance(timedelta(milliseconds=1))
        store.insert_jobs(jobs, now=clock.now())
        return jobs

    def claim(self, store: Any, clock: FakeClock, n: int, node: str = NODE) -> list[ClaimedJob]:
        return list(store.claim(node, n, now=clock.now(), boost_interval=BOOST))

    def finish(
        self,
        store: Any,
        clock: FakeClock,
        claimed: list[ClaimedJob],
        kind: OutcomeKind,
        node: str = NODE,
        error: str | None = None,
    ) -> None:
        outcomes = [outcome(c, kind, clock, error=error) for c in claimed]
        assert store.record_outcomes(node, outcomes, now=clock.now()).fenced == ()

    def walk(self, query: QueryStore, q: JobQuery, page: int) -> list[uuid.UUID]:
        """Every id ``q`` matches, read ``page`` at a time through the keyset."""
        seen: list[uuid.UUID] = []
        after = None
        for _ in range(10_000):
            rows = query.query_jobs(q, after=after, limit=page)
            seen += ids(rows)
            if len(rows) < page:
                return seen
            after = rows[-1].job_id
        raise AssertionError("paging never ended")

    def mixed(self, store: Any, clock: FakeClock) -> dict[JobStatus, list[uuid.UUID]]:
        """Jobs in six statuses: PENDING, RUNNING, PAUSED, SUCCEEDED, FAILED, CANCELED."""
        jobs = self.insert(store, clock, 12)
        claimed = {c.job_id: c for c in self.claim(store, clock, 6)}
        done: list[ClaimedJob] = []
        dead: list[ClaimedJob] = []
        running: list[ClaimedJob] = []
        for i, job in enumerate(j for j in jobs if j.job_id in claimed):
            (done, dead, running)[i % 3].append(claimed[job.job_id])
        self.finish(store, clock, done, OutcomeKind.SUCCEEDED)
        self.finish(store, clock, dead, OutcomeKind.DEAD, error="Boom: dead")
        pending = [j.job_id for j in jobs if j.job_id not in claimed]
        paused, canceled = pending[:2], pending[2:4]
        for job_id in paused:
            assert store.pause_job(job_id, now=clock.now())
        for job_id in canceled:
            assert store.cancel_job(job_id, now=clock.now()).value
        return {
            JobStatus.PENDING: pending[4:],
            JobStatus.RUNNING: [c.job_id for c in running],
            JobStatus.PAUSED: paused,
            JobStatus.SUCCEEDED: [c.job_id for c in done],
            JobStatus.FAILED: [c.job_id for c in dead],
            JobStatus.CANCELED: canceled,
        }

    # ------------------------------------------------------------------ pages
    @pytest.mark.parametrize("page", [1, 3, 7, 50])
    def test_pages_cover_every_job_once_newest_first(
        self, store: Any, query: QueryStore, clock: FakeClock, page: int
    ) -> None:
        jobs = self.insert(store, clock, 20)
        walked = self.walk(query, JobQuery(), page)
        assert walked == sorted((j.job_id for j in jobs), key=lambda i: i.bytes, reverse=True)

    def test_pages_hold_after_new_jobs_arrive(
        self, store: Any, query: QueryStore, clock: FakeClock
    ) -> None:
        """Keyset pages do not shift when jobs are created between two pages."""
        old = self.insert(store, clock, 6)
        first = query.query_jobs(JobQuery(), after=None, limit=3)
        self.insert(store, clock, 4)
        second = query.query_jobs(JobQuery(), after=first[-1].job_id, limit=3)
        newest_first = [j.job_id for j in reversed(old)]
        assert ids(first) + ids(second) == newest_first

    def test_records_read_like_get_job(
        self, store: Any, query: QueryStore, clock: FakeClock
    ) -> None:
        kinds = self.mixed(store, clock)
        for status, members in kinds.items():
            for record in query.query_jobs(JobQuery(statuses=(status,)), after=None, limit=50):
                expected = store.get_job(record.job_id)
                # get_job also reads the epoch of an ended job's last attempt; listings do not
                assert replace(record, epoch=expected.epoch) == expected, status
                assert record.status is status and record.job_id in members

    # ------------------------------------------------------------------ filters
    def test_status_filter_one_and_several(
        self, store: Any, query: QueryStore, clock: FakeClock
    ) -> None:
        kinds = self.mixed(store, clock)
        for status, members in kinds.items():
            got = self.walk(query, JobQuery(statuses=(status,)), 2)
            assert sorted(got) == sorted(members), status
        several = (JobStatus.FAILED, JobStatus.PENDING, JobStatus.CANCELED)
        got = self.walk(query, JobQuery(statuses=several), 2)
        expected = [i for s in several for i in kinds[s]]
        assert got == sorted(expected, key=lambda i: i.bytes, reverse=True)
        counts = store.count_by_status()
        assert {s: counts.get(s.value, 0) for s in kinds} == {s: len(m) for s, m in kinds.items()}

    def test_target_tag_and_business_key(
        self, store: Any, query: QueryStore, clock: FakeClock
    ) -> None:
        plain = self.insert(store, clock, 3)
        reports = self.insert(store, clock, 4, target="tests.jobs:report", tags=("eu", "nightly"))
        [keyed] = self.insert(store, clock, 1, business_key="invoice-42")
        assert sorted(self.walk(query, JobQuery(target="tests.jobs:report"), 3)) == sorted(
            j.job_id for j in reports
        )
        assert sorted(self.walk(query, JobQuery(tag="NIGHTLY"), 2)) == sorted(
            j.job_id for j in reports
        )
        both = JobQuery(tag="eu", statuses=(JobStatus.PENDING,), target="tests.jobs:report")
        assert len(self.walk(query, both, 3)) == 4
        assert self.walk(query, JobQuery(business_key="invoice-42"), 5) == [keyed.job_id]
        assert self.walk(query, JobQuery(tag="eu", target="tests.jobs:noop"), 5) == []
        assert len(self.walk(query, JobQuery(target="tests.jobs:noop"), 5)) == len(plain) + 1

    def test_created_and_finished_between(
        self, store: Any, query: QueryStore, clock: FakeClock
    ) -> None:
        early = self.insert(store, clock, 3)
        clock.advance(timedelta(hours=1))
        middle_start = clock.now()
        middle = self.insert(store, clock, 3)
        middle_end = clock.now()
        clock.advance(timedelta(hours=1))
        late = self.insert(store, clock, 2)
        window = JobQuery(created_after=middle_start, created_before=middle_end)
        assert sorted(self.walk(query, window, 2)) == sorted(j.job_id for j in middle)
        assert len(self.walk(query, JobQuery(created_before=middle_start), 2)) == len(early)
        got = self.walk(query, JobQuery(created_after=middle_end), 1)
        assert got == [j.job_id for j in reversed(late)]
        claimed = self.claim(store, clock, 8)
        self.finish(store, clock, claimed[:5], OutcomeKind.SUCCEEDED)
        clock.advance(timedelta(minutes=10))
        finished_from = clock.now()
        self.finish(store, clock, claimed[5:], OutcomeKind.SUCCEEDED)
        got = self.walk(query, JobQuery(finished_after=finished_from), 2)
        assert sorted(got) == sorted(c.job_id for c in claimed[5:])
        got = self.walk(query, JobQuery(finished_before=finished_from), 2)
        assert sorted(got) == sorted(c.job_id for c in claimed[:5])

    def test_recurring_master_filter(self, store: Any, query: QueryStore, clock: FakeClock) -> None:
        master = uuid7()
        fires = self.insert(store, clock, 3, recurring_master_id=master)
        self.insert(store, clock, 2, recurring_master_id=uuid7())
        self.insert(store, clock, 2)
        got = self.walk(query, JobQuery(recurring_master_id=master), 2)
        assert sorted(got) == sorted(j.job_id for j in fires)

    def workflow(self, store: Any) -> WorkflowStore:
        cap = store.capability(WorkflowStore)
        if cap is None:
            pytest.skip("N/A: the store has no WorkflowStore capability")
        return cap  # type: ignore[no-any-return]

    def insert_chain_with_branch(
        self,
        flows: WorkflowStore,
        clock: FakeClock,
        condition: WorkflowCondition | None = None,
        description: str | None = None,
    ) -> tuple[NewJob, NewJob, NewJob, NewJob]:
        """A head, a chain step after it and one after that, and a branch of the head (with
        its ``condition`` stored, if given): ``(head, step1, step2, branch)``."""
        head = new_job(clock)
        step1, step2 = waiting(new_job(clock)), waiting(new_job(clock))
        branch = waiting(new_job(clock))

        def after(job: NewJob, parent: NewJob, kind: JobType, **flags: Any) -> FlowJob:
            return FlowJob(job, kind, depends_on=parent.job_id, waiting_for=parent.job_id, **flags)

        chain = {"chain_id": head.job_id}
        flows.insert_flow(
            [
                FlowJob(head, chain_id=head.job_id, has_dependents=True),
                after(step1, head, JobType.CHAIN_STEP, **chain, has_dependents=True),
                after(step2, step1, JobType.CHAIN_STEP, **chain),
                after(branch, head, JobType.WORKFLOW_BRANCH),
            ],
            now=clock.now(),
            branches=[]
            if condition is None
            else [BranchSpec(head.job_id, branch.job_id, condition, 0, description=description)],
        )
        return head, step1, step2, branch

    def test_batch_children_and_workflow_dependants(
        self, store: Any, query: QueryStore, clock: FakeClock
    ) -> None:
        flows = self.workflow(store)
        parent = waiting(new_job(clock))
        children = [new_job(clock) for _ in range(5)]
        flows.insert_flow(
            [FlowJob(parent, JobType.BATCH_PARENT)]
            + [FlowJob(c, JobType.BATCH_CHILD, batch_id=parent.job_id) for c in children],
            now=clock.now(),
            batch=BatchSpec(parent.job_id, "nightly", len(children)),
        )
        got = self.walk(query, JobQuery(batch_id=parent.job_id), 2)
        assert sorted(got) == sorted(c.job_id for c in children), "children only, not the parent"

        head, step1, step2, branch = self.insert_chain_with_branch(flows, clock)
        members = {head.job_id, step1.job_id, step2.job_id, branch.job_id}
        assert set(self.walk(query, JobQuery(workflow_id=head.job_id), 3)) == members
        found = query.dependants(head.job_id, limit=100)
        assert [r.job_id for r in found[:2]] == sorted(
            [step1.job_id, branch.job_id], key=lambda i: i.bytes
        )
        assert [r.job_id for r in found[2:]] == [step2.job_id], "the step after the step"
        assert all(r.status is JobStatus.WAITING for r in found)
        assert [r.job_id for r in query.dependants(head.job_id, limit=1)] == [found[0].job_id]
        assert query.dependants(step2.job_id, limit=10) == []

    def test_job_links_name_parents_children_and_branch_conditions(
        self, store: Any, query: QueryStore, clock: FakeClock
    ) -> None:
        flows = self.workflow(store)
        lone = new_job(clock)
        store.insert_jobs([lone], now=clock.now())
        head, step, after_step, on_fail = self.insert_chain_with_branch(
            flows, clock, WorkflowCondition.failure(), "clean up"
        )
        links = query.job_links([head.job_id], limit=100)
        assert {(link.parent_id, link.child_id) for link in links} == {
            (head.job_id, step.job_id),
            (head.job_id, on_fail.job_id),
        }, "the head has no parent; its children are the step and the branch"
        [branch] = [link for link in links if link.child_id == on_fail.job_id]
        assert branch.condition is not None
        assert branch.condition.type is ConditionType.FAILURE
        assert branch.description == "clean up"
        [chain] = [link for link in links if link.child_id == step.job_id]
        assert chain == JobLink(head.job_id, step.job_id), "a chain step has no condition"
        middle = query.job_links([step.job_id], limit=100)
        assert {(link.parent_id, link.child_id) for link in middle} == {
            (head.job_id, step.job_id),
            (step.job_id, after_step.job_id),
        }, "a step's own parent and its child"
        assert len(query.job_links([head.job_id], limit=1)) == 1
        assert query.job_links([lone.job_id], limit=10) == []
        assert query.job_links([], limit=10) == []

    def test_unstorable_filter_text_is_refused(self) -> None:
        with pytest.raises(InvalidJobOptions):
            JobQuery(target="a\x00b")

    # ------------------------------------------------------------------ health
    def test_queue_health(self, store: Any, query: QueryStore, clock: FakeClock) -> None:
        start = clock.now()
        empty = query.queue_health(now=start, window=timedelta(minutes=5))
        assert (empty.pending, empty.running, empty.failed, empty.due_now) == (0, 0, 0, 0)
        assert empty.oldest_due is None and empty.finished_in_window == 0
        due = self.insert(store, clock, 6)
        self.insert(store, clock, 2, scheduled_time=clock.now() + timedelta(hours=1))
        clock.advance(timedelta(seconds=90))
        mine = self.claim(store, clock, 2)
        theirs = self.claim(store, clock, 1, node=OTHER)
        self.finish(store, clock, mine[:1], OutcomeKind.SUCCEEDED)
        self.finish(store, clock, theirs, OutcomeKind.DEAD, node=OTHER, error="E: x")
        health = query.queue_health(now=clock.now(), window=timedelta(minutes=5))
        assert (health.pending, health.running, health.failed) == (5, 1, 1)
        assert health.due_now == 3, "the two future jobs are pending but not due"
        assert health.oldest_due == due[3].scheduled_time
        assert health.oldest_pending_age == clock.now() - due[3].scheduled_time
        assert (health.succeeded_in_window, health.failed_in_window) == (1, 1)
        assert health.running_by_node == {NODE: 1}
        clock.advance(timedelta(minutes=6))
        later = query.queue_health(now=clock.now(), window=timedelta(minutes=5))
        assert later.finished_in_window == 0, "the window moved past both ends"
        assert later.failed == 1

    def test_running_jobs_by_node(self, store: Any, query: QueryStore, clock: FakeClock) -> None:
        self.insert(store, clock, 5)
        mine = self.claim(store, clock, 2)
        theirs = self.claim(store, clock, 1, node=OTHER)
        held = query.running_jobs(limit=100)
        assert {(r.node_id, r.job_id) for r in held} == {
            *((NODE, c.job_id) for c in mine),
            *((OTHER, c.job_id) for c in theirs),
        }
        assert all(r.status is JobStatus.RUNNING and r.target == "tests.jobs:noop" for r in held)
        assert len(query.running_jobs(limit=2)) == 2

    # ------------------------------------------------------------------ hostile errors
    def test_hostile_errors_are_stored_sanitised(
        self, store: Any, query: QueryStore, clock: FakeClock
    ) -> None:
        """Errors and tracebacks pass the default sanitiser before the write (as the worker
        does); every store keeps them exactly, with no planted secret left."""
        policy = SanitizePolicy()
        jobs = self.insert(store, clock, len(HOSTILE_ERRORS))
        claimed = sorted(self.claim(store, clock, len(jobs)), key=lambda c: c.job_id.bytes)
        outcomes = [
            outcome(
                c,
                OutcomeKind.DEAD,
                clock,
                error=sanitize_text(text, policy),
                traceback=sanitize_text(f"Traceback (most recent call last):\n  {text}\n", policy),
            )
            for c, text in zip(claimed, HOSTILE_ERRORS, strict=True)
        ]
        assert store.record_outcomes(NODE, outcomes, now=clock.now()).fenced == ()
        for o in outcomes:
            record = store.get_job(o.job_id)
            [attempt] = store.attempts(o.job_id)
            assert record.last_error == o.error and attempt.error == o.error
            assert attempt.traceback == o.traceback
            for text in (record.last_error, attempt.traceback):
                assert not any(secret in text for secret in PLANTED), text
        listed = query.query_jobs(JobQuery(statuses=(JobStatus.FAILED,)), after=None, limit=10)
        assert {r.last_error for r in listed} == {o.error for o in outcomes}
