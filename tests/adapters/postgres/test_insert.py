"""The one-statement PostgreSQL insert: same results and rows as the generic insert."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError

from pg_fixtures import libpq_url
from ratchet import DuplicateBusinessKeyError, StoreUnavailable
from ratchet.domain.lifecycle import JobPriority
from ratchet.ports import InsertResult
from ratchet.sql.store import SqlStore
from ratchet.sql.workflows import REFUSE_ALL
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import new_job
from ratchet_postgres import PostgresStore
from ratchet_postgres.store import INSERT_CHUNK, _Replay

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
    jobs = [new_job(clock) for _ in range(INSERT_CHUNK)]
    results, rows, statements = _insert_and_roll_back(store, jobs, generic=False)
    assert statements == 1
    assert [r.job_id for r in results] == [j.job_id for j in jobs]
    assert all(r.inserted for r in results)
    assert len(rows["scheduler_job_queue"]) == INSERT_CHUNK


def _large_batch(clock: FakeClock, existing: Any) -> list[Any]:
    """Three chunks and a bit: keys repeated across chunks, a taken key, tags in one chunk only,
    business keys and a delayed job."""
    jobs = [new_job(clock) for _ in range(3 * INSERT_CHUNK + 17)]
    jobs[3] = new_job(clock, idempotency_key="across", tags=("a", "b"), business_key="bk-1")
    jobs[2 * INSERT_CHUNK + 5] = new_job(clock, idempotency_key="across")  # chunk 0 wins
    jobs[INSERT_CHUNK + 1] = new_job(clock, idempotency_key="taken")  # held by ``existing``
    jobs[-1] = new_job(clock, scheduled_time=clock.now() + timedelta(hours=1), business_key="b2")
    return jobs


def test_a_large_batch_is_pipelined_in_chunks_and_agrees_with_the_generic_insert(
    store: PostgresStore,
) -> None:
    clock = FakeClock()
    existing = new_job(clock, idempotency_key="taken")
    store.insert_jobs([existing], now=clock.now())
    jobs = _large_batch(clock, existing)
    mine, my_rows, _ = _insert_and_roll_back(store, jobs, generic=False)
    theirs, their_rows, _ = _insert_and_roll_back(store, jobs, generic=True)
    assert mine == theirs
    assert my_rows == their_rows
    assert mine[INSERT_CHUNK + 1] == InsertResult(existing.job_id, False)
    assert mine[2 * INSERT_CHUNK + 5] == InsertResult(jobs[3].job_id, False)
    assert len(my_rows["scheduler_job"]) == 1 + len(jobs) - 2
    assert store.count_by_status() == {"PENDING": 1}  # the caller's rollback took all chunks


def test_streamed_chunks_agree_with_one_insert(store: PostgresStore) -> None:
    clock = FakeClock()
    existing = new_job(clock, idempotency_key="taken")
    store.insert_jobs([existing], now=clock.now())
    jobs = _large_batch(clock, existing)
    expected, _, _ = _insert_and_roll_back(store, jobs, generic=True)
    chunks = [jobs[i : i + 100] for i in range(0, len(jobs), 100)]
    assert store.insert_job_chunks(iter(chunks), now=clock.now()) == expected
    assert sum(store.count_by_status().values()) == 1 + len(jobs) - 2


@pytest.mark.parametrize("streamed", [False, True])
def test_a_business_key_conflict_in_the_last_chunk_inserts_nothing(
    store: PostgresStore, streamed: bool
) -> None:
    clock = FakeClock()
    store.insert_jobs([new_job(clock, business_key="once")], now=clock.now())
    batch = [new_job(clock) for _ in range(2 * INSERT_CHUNK)]
    batch.append(new_job(clock, business_key="once"))
    with pytest.raises(DuplicateBusinessKeyError) as raised:
        if streamed:
            store.insert_job_chunks(
                iter([batch[:INSERT_CHUNK], batch[INSERT_CHUNK:]]), now=clock.now()
            )
        else:
            store.insert_jobs(batch, now=clock.now())
    assert raised.value.key == "once"
    assert store.count_by_status() == {"PENDING": 1}
    # the pooled connection was handed back clean: the next batch commits
    store.insert_jobs([new_job(clock) for _ in range(2 * INSERT_CHUNK)], now=clock.now())
    assert store.count_by_status() == {"PENDING": 1 + 2 * INSERT_CHUNK}


def test_an_error_of_the_chunk_source_after_a_chunk_was_sent_inserts_nothing(
    store: PostgresStore,
) -> None:
    clock = FakeClock()

    def chunks() -> Iterator[list[Any]]:
        yield [new_job(clock) for _ in range(INSERT_CHUNK)]
        raise ValueError("the caller failed to build the next chunk")

    with pytest.raises(ValueError, match="next chunk"):
        store.insert_job_chunks(chunks(), now=clock.now())
    assert store.count_by_status() == {}
    store.insert_job_chunks(iter([[new_job(clock)], [new_job(clock)]]), now=clock.now())
    assert store.count_by_status() == {"PENDING": 2}


def test_a_connection_lost_mid_pipeline_is_unavailable_and_inserts_nothing(
    store: PostgresStore, postgres_store_url: str
) -> None:
    clock = FakeClock()
    admin = psycopg.connect(libpq_url(postgres_store_url), autocommit=True)

    def chunks() -> Iterator[list[Any]]:
        yield [new_job(clock) for _ in range(INSERT_CHUNK)]
        # the store's sessions are the ones named ``ratchet``; wait until they are gone
        admin.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
            " WHERE application_name = 'ratchet' AND datname = current_database()"
        )
        yield [new_job(clock) for _ in range(INSERT_CHUNK)]

    with admin, pytest.raises(StoreUnavailable):
        store.insert_job_chunks(chunks(), now=clock.now())
    assert store.count_by_status() == {}
    store.insert_jobs([new_job(clock) for _ in range(2 * INSERT_CHUNK)], now=clock.now())
    assert store.count_by_status() == {"PENDING": 2 * INSERT_CHUNK}


@pytest.mark.parametrize("size", [1, 2 * INSERT_CHUNK])
def test_a_value_too_long_for_its_column_fails_instead_of_being_cut(
    store: PostgresStore, size: int
) -> None:
    clock = FakeClock()
    batch = [new_job(clock) for _ in range(size - 1)]
    batch.append(new_job(clock, idempotency_key="k" * 65, executor="e" * 65))
    with pytest.raises(DBAPIError, match="too long"):
        store.insert_jobs(batch, now=clock.now())
    assert store.count_by_status() == {}


def test_replayed_chunks_are_drawn_from_their_source_once() -> None:
    clock = FakeClock()
    drawn: list[int] = []

    def chunks() -> Iterator[list[Any]]:
        for i in range(3):
            drawn.append(i)
            yield [new_job(clock)]

    replay = _Replay(chunks())
    first_try = next(iter(replay))  # a transaction that failed after its first chunk
    second_try = list(replay)  # the retry sends the same chunk, then draws the rest
    assert second_try[0] is first_try
    assert drawn == [0, 1, 2]
    assert replay.jobs() == [c[0] for c in second_try]


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
                written = SqlStore._record(store, conn, "me", outcomes, now, REFUSE_ALL)
            else:
                written = store._record(conn, "me", outcomes, now, REFUSE_ALL)
            event.remove(conn, "before_cursor_execute", count)
            rows = {
                t: [dict(r._mapping) for r in conn.execute(text(f"SELECT * FROM {t} ORDER BY {k}"))]
                for t, k in tables.items()
            }
            trans.rollback()
    return written, rows, len(statements)


def test_record_outcomes_agrees_with_the_generic_write(store: PostgresStore) -> None:
    from ratchet.domain.model import OutcomeKind
    from ratchet.testing.store_contract import expected_last_errors, failed_once, mixed_outcomes

    clock = FakeClock()
    failed_once(store, clock, 40)
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
        (OutcomeKind.RESCHEDULE, {"retry_at": later}),
    ]
    outcomes, expected_fenced = mixed_outcomes(mine, others, clock, kinds)

    written, rows, statements = _record_and_roll_back(store, outcomes, clock.now(), False)
    generic_written, generic_rows, generic_statements = _record_and_roll_back(
        store, outcomes, clock.now(), True
    )
    assert written == generic_written
    assert list(written.fenced) == expected_fenced
    assert rows == generic_rows
    last_errors = {r["job_id"]: r["last_error"] for r in rows["scheduler_job_queue"]}
    expected = expected_last_errors(outcomes, expected_fenced)
    assert {job_id: last_errors[job_id] for job_id in expected} == expected
    # One statement for the writes; outcome hooks (e.g. resource permits) add their own.
    assert generic_statements - statements >= 4
