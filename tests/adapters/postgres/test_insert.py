"""The one-statement PostgreSQL insert: one statement per chunk, pipelined, all or nothing.

Its results and rows are compared with the generic insert's by the dialect equivalence suite
(``tests/contract/test_dialect_contract.py``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError

from pg_fixtures import libpq_url
from ratchet import DuplicateBusinessKeyError, StoreUnavailable
from ratchet.ports import InsertResult
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import keyed_by_id, new_job
from ratchet_postgres import PostgresStore
from ratchet_postgres.store import INSERT_CHUNK, JOB_RECORD, SPARSE_FROM, _insert_params, _Replay

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
    store: PostgresStore, jobs: list[Any]
) -> tuple[list[InsertResult], dict[str, list[tuple[Any, ...]]], int]:
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    now = FakeClock().now()
    with store.engine.connect() as conn:
        event.listen(conn, "before_cursor_execute", count)
        with conn.begin() as trans:
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


def test_a_fresh_batch_is_a_single_statement(store: PostgresStore) -> None:
    clock = FakeClock()
    jobs = [new_job(clock) for _ in range(INSERT_CHUNK)]
    results, rows, statements = _insert_and_roll_back(store, jobs)
    assert statements == 1
    assert [r.job_id for r in results] == [j.job_id for j in jobs]
    assert all(r.inserted for r in results)
    assert len(rows["scheduler_job_queue"]) == INSERT_CHUNK


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


def test_a_small_batch_goes_as_one_driver_statement_outside_a_connection(
    store: PostgresStore,
) -> None:
    """Without a caller's connection, a batch of one chunk at most is one statement on a bare
    DBAPI connection; a taken key still names its holder, a business key still conflicts."""
    clock = FakeClock()
    first = new_job(clock, idempotency_key="shared", business_key="b1")
    [result] = store.insert_jobs([first], now=clock.now())
    assert result == InsertResult(first.job_id, True)
    again = new_job(clock, idempotency_key="shared")
    fresh = new_job(clock)
    assert store.insert_jobs([again, fresh], now=clock.now()) == [
        InsertResult(first.job_id, False),
        InsertResult(fresh.job_id, True),
    ]
    with pytest.raises(DuplicateBusinessKeyError) as raised:
        store.insert_jobs([new_job(clock, business_key="b1")], now=clock.now())
    assert raised.value.key == "b1"
    assert store.count_by_status() == {"PENDING": 2}


def test_a_small_batch_survives_the_server_dropping_the_pooled_connection(
    store: PostgresStore, postgres_store_url: str
) -> None:
    clock = FakeClock()
    store.insert_jobs([new_job(clock)], now=clock.now())  # a pooled autocommit connection
    with psycopg.connect(libpq_url(postgres_store_url), autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
            " WHERE application_name = 'ratchet' AND datname = current_database()"
        )
    store.insert_jobs([new_job(clock)], now=clock.now())
    assert store.count_by_status() == {"PENDING": 2}


def test_a_small_batch_to_an_unreachable_server_is_unavailable() -> None:
    from ratchet.testing.servers import free_port

    store = PostgresStore(f"postgresql://nobody@127.0.0.1:{free_port()}/nothing")
    store._schema_ready = True  # straight to the insert: no schema check first
    clock = FakeClock()
    try:
        with pytest.raises(StoreUnavailable):
            store.insert_jobs([new_job(clock)], now=clock.now())
    finally:
        store.close()


def test_batches_leave_out_shared_unset_values_and_small_ones_send_every_value(
    store: PostgresStore,
) -> None:
    """A batch of at least ``SPARSE_FROM`` jobs sends only what its jobs set (and no key for
    jobs keyed by their own ids), and its jobs read back whole; a smaller one sends all 29
    values, so single submissions need only a handful of statements whatever their options."""
    clock = FakeClock()
    plain = [keyed_by_id(clock) for _ in range(SPARSE_FROM)]
    timed = [keyed_by_id(clock, timeout=timedelta(seconds=i + 1)) for i in range(SPARSE_FROM)]
    for batch in (plain, timed):
        statement, params = _insert_params(batch, clock.now())
        width = len(json.loads(params["rows"])[0])
        assert width < len(JOB_RECORD) - 15, "the unset values are left out"
        assert statement.count("%(rows)s") == 1
    small = [keyed_by_id(clock, executor="threads"), keyed_by_id(clock, resource_name="api")]
    statements = {_insert_params([job], clock.now())[0] for job in small}
    assert len(statements) == 1, "one statement for single jobs with different options"
    assert all(
        len(json.loads(_insert_params([j], clock.now())[1]["rows"])[0]) == len(JOB_RECORD)
        for j in small
    )
    store.insert_jobs([*plain, *timed, *small], now=clock.now())
    for job in timed:
        record = store.get_job(job.job_id)
        assert record is not None and record.timeout == job.timeout
    for job in small:
        record = store.get_job(job.job_id)
        assert record is not None
        assert (record.executor, record.resource_name) == (job.executor, job.resource_name)
        assert store.find_by_idempotency_key(str(job.job_id)) == job.job_id
