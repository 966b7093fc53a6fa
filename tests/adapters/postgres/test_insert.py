"""The one-statement PostgreSQL insert: same results and rows as the generic insert."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, text

from ratchet import DuplicateBusinessKeyError
from ratchet.domain.lifecycle import JobPriority
from ratchet.ports import InsertResult
from ratchet.sql.store import SqlStore
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import new_job
from ratchet_postgres import PostgresStore

pytestmark = pytest.mark.postgres

TABLES = {
    "scheduler_job": "job_id",
    "scheduler_job_queue": "job_id",
    "scheduler_job_tag": "job_id, tag",
    "scheduler_idempotency_key": "idempotency_key",
}


@pytest.fixture
def store(postgres_store_url: str) -> Iterator[PostgresStore]:
    s = PostgresStore(postgres_store_url)
    yield s
    s.close()


def _insert_and_roll_back(
    store: PostgresStore, jobs: list[Any], generic: bool
) -> tuple[list[InsertResult], dict[str, list[tuple[Any, ...]]], int]:
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    now = FakeClock().now()
    with store.engine.connect() as conn:
        event.listen(conn, "before_cursor_execute", count)
        with conn.begin() as trans:
            if generic:
                results = SqlStore._insert(store, conn, jobs, now)
            else:
                results = store._insert(conn, jobs, now)
            event.remove(conn, "before_cursor_execute", count)
            rows = {
                table: [
                    tuple(r) for r in conn.execute(text(f"SELECT * FROM {table} ORDER BY {key}"))
                ]
                for table, key in TABLES.items()
            }
            trans.rollback()
    return results, rows, len(statements)


def test_insert_agrees_with_the_generic_insert_in_one_round_trip(store: PostgresStore) -> None:
    clock = FakeClock()
    existing = new_job(clock, idempotency_key="taken")
    store.insert_jobs([existing], now=clock.now())
    jobs = [
        new_job(clock, tags=("a", "b"), params={"k": "v"}, business_key="bk-1"),
        new_job(clock, idempotency_key="taken"),  # held by ``existing``
        new_job(clock, idempotency_key="twice", priority=JobPriority.CRITICAL),
        new_job(clock, idempotency_key="twice"),  # the first of the batch wins
        new_job(
            clock, scheduled_time=clock.now() + timedelta(hours=1), timeout=timedelta(seconds=3)
        ),
        new_job(clock, executor="threads", backoff_delay=timedelta(seconds=2)),
    ]
    mine, my_rows, my_statements = _insert_and_roll_back(store, jobs, generic=False)
    theirs, their_rows, _ = _insert_and_roll_back(store, jobs, generic=True)
    assert mine == theirs
    assert mine[1] == InsertResult(existing.job_id, False)
    assert mine[2] == InsertResult(jobs[2].job_id, True)
    assert mine[3] == InsertResult(jobs[2].job_id, False)
    assert my_rows == their_rows
    assert len(my_rows["scheduler_job"]) == 1 + 4
    assert my_statements == 2  # the insert, and the holder lookup for the taken keys


def test_a_fresh_batch_is_a_single_statement(store: PostgresStore) -> None:
    clock = FakeClock()
    jobs = [new_job(clock) for _ in range(1000)]
    results, rows, statements = _insert_and_roll_back(store, jobs, generic=False)
    assert statements == 1
    assert [r.job_id for r in results] == [j.job_id for j in jobs]
    assert all(r.inserted for r in results)
    assert len(rows["scheduler_job_queue"]) == 1000


def test_business_key_conflict_inserts_nothing(store: PostgresStore) -> None:
    clock = FakeClock()
    store.insert_jobs([new_job(clock, business_key="once")], now=clock.now())
    batch = [new_job(clock), new_job(clock, business_key="once"), new_job(clock)]
    with pytest.raises(DuplicateBusinessKeyError):
        store.insert_jobs(batch, now=clock.now())
    assert store.count_by_status() == {"PENDING": 1}
    assert all(store.find_by_idempotency_key(j.idempotency_key) is None for j in batch)


# ---------------------------------------------------------------------- outcomes
def _record_and_roll_back(
    store: PostgresStore, outcomes: list[Any], now: Any, generic: bool
) -> tuple[list[Any], dict[str, list[tuple[Any, ...]]], int]:
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    tables = {
        "scheduler_job": "job_id",
        "scheduler_job_queue": "job_id",
        "scheduler_job_execution": "job_id, attempt_no, epoch",
    }
    with store.engine.connect() as conn:
        event.listen(conn, "before_cursor_execute", count)
        with conn.begin() as trans:
            if generic:
                fenced = SqlStore._record(store, conn, "me", outcomes, now)
            else:
                fenced = store._record(conn, "me", outcomes, now)
            event.remove(conn, "before_cursor_execute", count)
            rows = {
                t: [tuple(r) for r in conn.execute(text(f"SELECT * FROM {t} ORDER BY {k}"))]
                for t, k in tables.items()
            }
            trans.rollback()
    return fenced, rows, len(statements)


def test_record_outcomes_agrees_with_the_generic_write(store: PostgresStore) -> None:
    import uuid

    from ratchet.domain.model import OutcomeKind
    from ratchet.testing.store_contract import outcome

    clock = FakeClock()
    store.insert_jobs([new_job(clock) for _ in range(40)], now=clock.now())
    mine = store.claim("me", 30, now=clock.now(), boost_interval=timedelta(minutes=15))
    others = store.claim("other", 5, now=clock.now(), boost_interval=timedelta(minutes=15))
    clock.advance(timedelta(seconds=3))
    later = clock.now() + timedelta(minutes=1)
    kinds = [
        (OutcomeKind.SUCCEEDED, {"result": '{"ok":true}'}),
        (OutcomeKind.DEAD, {"error": "boom"}),
        (OutcomeKind.RETRY, {"error": "again", "retry_at": later}),
        (OutcomeKind.RETRY, {"error": "now"}),
        (OutcomeKind.RESCHEDULE, {"error": "circuit open", "retry_at": later}),
    ]
    outcomes = []
    for i, job in enumerate(mine[:25]):
        kind, extra = kinds[i % len(kinds)]
        outcomes.append(outcome(job, kind, clock, **extra))
    stale = mine[25]
    outcomes.append(outcome(stale, OutcomeKind.SUCCEEDED, clock, epoch=stale.epoch + 1))
    outcomes += [outcome(job, OutcomeKind.SUCCEEDED, clock) for job in others[:2]]
    ghost = outcome(mine[26], OutcomeKind.DEAD, clock, job_id=uuid.uuid4())
    outcomes.append(ghost)

    fenced, rows, statements = _record_and_roll_back(store, outcomes, clock.now(), False)
    generic_fenced, generic_rows, generic_statements = _record_and_roll_back(
        store, outcomes, clock.now(), True
    )
    assert fenced == generic_fenced
    assert fenced == [stale.job_id, others[0].job_id, others[1].job_id, ghost.job_id]
    assert rows == generic_rows
    # One statement for the writes; outcome hooks (e.g. resource permits) add their own.
    assert generic_statements - statements >= 4
