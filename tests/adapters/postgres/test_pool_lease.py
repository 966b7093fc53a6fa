"""A pooled connection leased for one driver statement, without SQLAlchemy's checkout."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import event

from pg_fixtures import libpq_url
from ratchet import StoreUnavailable
from ratchet.sql.pool import ShrinkingQueuePool
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import new_job
from ratchet_postgres import PostgresStore

pytestmark = pytest.mark.postgres


@pytest.fixture
def store(postgres_store_url: str) -> Iterator[PostgresStore]:
    s = PostgresStore(postgres_store_url)
    s.insert_jobs([new_job(FakeClock())], now=FakeClock().now())  # one pooled connection
    yield s
    s.close()


def pool_of(store: PostgresStore) -> ShrinkingQueuePool:
    pool = store.engine.pool
    assert isinstance(pool, ShrinkingQueuePool)
    return pool


def terminate_store_sessions(url: str) -> None:
    with psycopg.connect(libpq_url(url), autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
            " WHERE application_name = 'ratchet' AND datname = current_database()"
        )


def test_the_idle_connection_is_leased_and_given_back(store: PostgresStore) -> None:
    pool = pool_of(store)
    idle = pool.checkedin()
    record = pool.lease_idle()
    assert record is not None
    assert pool.checkedout() == 1 and pool.checkedin() == idle - 1
    connection = record.dbapi_connection
    pool.give_back(record)
    assert pool.checkedout() == 0 and pool.checkedin() == idle
    again = pool.lease_idle()
    assert again is not None and again.dbapi_connection is connection  # LIFO: the same one
    pool.give_back(again)


def test_nothing_is_leased_while_every_connection_is_in_use(store: PostgresStore) -> None:
    pool = pool_of(store)
    held = [pool.lease_idle() for _ in range(pool.checkedin())]
    assert all(r is not None for r in held)
    assert pool.lease_idle() is None
    for record in held:
        assert record is not None
        pool.give_back(record)


def test_a_connection_the_server_closed_is_left_to_the_checkout(
    store: PostgresStore, postgres_store_url: str
) -> None:
    pool = pool_of(store)
    terminate_store_sessions(postgres_store_url)
    idle = pool.checkedin()
    assert pool.lease_idle() is None  # its socket is readable: the server said goodbye
    assert pool.checkedin() == idle  # put back for the checkout, which pings and reconnects
    store.insert_jobs([new_job(FakeClock())], now=FakeClock().now())
    assert store.count_by_status() == {"PENDING": 2}


def test_a_connection_given_back_in_a_transaction_is_rolled_back(store: PostgresStore) -> None:
    pool = pool_of(store)
    record = pool.lease_idle()
    assert record is not None
    driver: Any = record.driver_connection
    driver.execute("CREATE TEMP TABLE scratch (x int)")  # opens a transaction
    assert driver.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    pool.give_back(record)
    assert driver.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert driver.execute("SELECT to_regclass('pg_temp.scratch')").fetchone() == (None,)
    driver.rollback()


def test_other_checkout_listeners_turn_the_lease_off(store: PostgresStore) -> None:
    pool = pool_of(store)
    checkouts: list[Any] = []

    @event.listens_for(store.engine, "checkout")
    def count(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        checkouts.append(record)

    assert pool.lease_idle() is None
    store.insert_jobs([new_job(FakeClock())], now=FakeClock().now())
    assert len(checkouts) == 1  # the submission took the usual checkout: the listener saw it


def test_a_single_submission_takes_the_lease(store: PostgresStore) -> None:
    pool = pool_of(store)
    leased: list[Any] = []
    lease = pool.lease_idle

    def watched() -> Any:
        record = lease()
        leased.append(record)
        return record

    pool.lease_idle = watched  # type: ignore[method-assign]
    store.insert_jobs([new_job(FakeClock())], now=FakeClock().now())
    assert len(leased) == 1 and leased[0] is not None
    assert pool.checkedout() == 0
    assert store.count_by_status() == {"PENDING": 2}


def test_a_single_submission_neither_switches_autocommit_nor_rolls_back(
    store: PostgresStore, postgres_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The insert commits on its own on the idle leased connection: the connection's
    autocommit flag is left off and, the statement having returned, there is no transaction to
    roll back. Work that fails is given back rolled back all the same."""
    from sqlalchemy.exc import DBAPIError

    switches: list[bool] = []
    rollbacks: list[object] = []
    flag = psycopg.Connection.autocommit
    assert isinstance(flag, property) and flag.fset is not None
    setter = flag.fset
    monkeypatch.setattr(
        psycopg.Connection,
        "autocommit",
        property(flag.fget, lambda c, on: (switches.append(on), setter(c, on))[1]),
    )
    rollback = psycopg.Connection.rollback
    monkeypatch.setattr(
        psycopg.Connection, "rollback", lambda c: (rollbacks.append(c), rollback(c))[1]
    )
    job = new_job(FakeClock())
    store.insert_jobs([job], now=FakeClock().now())
    assert switches == [] and rollbacks == []
    with psycopg.connect(libpq_url(postgres_store_url)) as other:  # committed: others see it
        found = other.execute(
            "SELECT count(*) FROM scheduler_job WHERE job_id = %s", (job.job_id,)
        ).fetchone()
        assert found == (1,)
    with pytest.raises(DBAPIError):
        store._run_dbapi(lambda driver: driver.execute("SELECT 1 / 0"))
    assert len(rollbacks) == 1 and switches == [True, False]
    assert pool_of(store).checkedout() == 0


def test_a_connection_lost_during_the_statement_is_dropped_and_the_next_one_reconnects(
    store: PostgresStore,
) -> None:
    pool = pool_of(store)
    backends: list[int] = []

    def work(driver: Any) -> int:
        backends.append(driver.info.backend_pid)
        if len(backends) == 1:
            driver.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return int(driver.execute("SELECT 1").fetchone()[0])

    with pytest.raises(StoreUnavailable):
        store._run_dbapi(work)
    assert pool.checkedout() == 0
    assert store._run_dbapi(work) == 1
    assert len(backends) == 2 and backends[0] != backends[1]
