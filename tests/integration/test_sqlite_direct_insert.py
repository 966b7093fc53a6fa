"""A SQLite submission outside a caller's transaction runs on the bare driver connection: one
``BEGIN IMMEDIATE`` transaction of the prepared inserts, with no SQLAlchemy ``Connection``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event

from ratchet.adapters.sqlite import make_sqlite_store as create_store
from ratchet.domain.errors import DuplicateBusinessKeyError
from ratchet.ports import InsertResult
from ratchet.sql.store import SqlStore
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import new_job


@pytest.fixture
def store(sqlite_url: str) -> Iterator[SqlStore]:
    made = create_store(sqlite_url)
    assert isinstance(made, SqlStore)
    made.migrate()
    yield made
    made.close()


@pytest.fixture
def sent(store: SqlStore) -> Iterator[list[str]]:
    """The statements that went through SQLAlchemy's execution on the write engine."""
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(store.engine, "before_cursor_execute", seen)
    yield statements
    event.remove(store.engine, "before_cursor_execute", seen)


def test_a_submission_bypasses_sqlalchemy_and_commits(
    store: SqlStore, sent: list[str], sqlite_url: str
) -> None:
    clock = FakeClock()
    batch = [new_job(clock, tags=("a", "b")), new_job(clock)]
    results = store.insert_jobs(batch, now=clock.now())
    assert results == [InsertResult(j.job_id, True) for j in batch]
    assert sent == []
    reopened = create_store(sqlite_url)  # committed: another store sees the jobs
    try:
        assert reopened.count_by_status() == {"PENDING": 2}
        first = reopened.get_job(batch[0].job_id)
        assert first is not None and set(first.tags) == {"a", "b"}
    finally:
        reopened.close()


def test_a_taken_key_gives_the_bare_transaction_up_and_answers_as_before(
    store: SqlStore, sent: list[str]
) -> None:
    """The bare transaction undoes its key rows when one key is taken; the SQLAlchemy path
    then inserts the free ones and names the holder of the taken one."""
    clock = FakeClock()
    [held] = store.insert_jobs([new_job(clock, idempotency_key="k1")], now=clock.now())
    assert sent == []
    batch = [new_job(clock, idempotency_key="k1"), new_job(clock, idempotency_key="k2")]
    results = store.insert_jobs(batch, now=clock.now())
    assert results == [InsertResult(held.job_id, False), InsertResult(batch[1].job_id, True)]
    assert sent, "the batch went the SQLAlchemy way"
    assert store.find_by_idempotency_key("k2") == batch[1].job_id
    assert store.get_job(batch[0].job_id) is None
    assert store.count_by_status() == {"PENDING": 2}


def test_a_failed_batch_leaves_no_row_behind(store: SqlStore) -> None:
    """A taken business key fails the bare transaction after the key rows went in: they are
    rolled back with the rest, so the key stays free."""
    clock = FakeClock()
    [holder] = store.insert_jobs([new_job(clock, business_key="b1")], now=clock.now())
    batch = [new_job(clock, idempotency_key="fresh-key"), new_job(clock, business_key="b1")]
    with pytest.raises(DuplicateBusinessKeyError) as raised:
        store.insert_jobs(batch, now=clock.now())
    assert (raised.value.key, raised.value.holder) == ("b1", holder.job_id)
    assert store.find_by_idempotency_key("fresh-key") is None
    assert [store.get_job(j.job_id) for j in batch] == [None, None]
    [again] = store.insert_jobs([new_job(clock, idempotency_key="fresh-key")], now=clock.now())
    assert again.inserted
