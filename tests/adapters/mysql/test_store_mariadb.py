"""The MySQL store's own claim and outcome write: the shared store's statements, written out as
SQL text and sent as multi-statement queries. Same answers and rows as the shared store's
versions (run on the same data, rolled back), in fewer round trips, through either driver."""

from __future__ import annotations

import random
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError

from ratchet.domain.lifecycle import JobPriority
from ratchet.domain.model import OutcomeKind
from ratchet.sql.store import SqlStore
from ratchet.sql.workflows import REFUSE_ALL
from ratchet.testing import FakeClock
from ratchet.testing.store_contract import (
    expected_last_errors,
    failed_once,
    mixed_outcomes,
    new_job,
)
from ratchet_mysql import MySQLStore
from ratchet_mysql.dialect import error_code

BOOST = timedelta(minutes=15)
TABLES = {
    "scheduler_job": "job_id",
    "scheduler_job_queue": "job_id",
    "scheduler_job_execution": "job_id, attempt_no, epoch",
}


def _run_and_roll_back(store: MySQLStore, work: Any) -> tuple[Any, dict[str, list[Any]], int]:
    """``work(conn)`` in a transaction that is rolled back; its answer, every row of the
    tables it writes as they were before the rollback, and how many queries it sent."""
    queries: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        queries.append(statement)

    with store.engine.connect() as conn:
        event.listen(conn, "before_cursor_execute", count)
        with conn.begin() as trans:
            answer = work(conn)
            event.remove(conn, "before_cursor_execute", count)
            rows = {
                t: [dict(r._mapping) for r in conn.execute(text(f"SELECT * FROM {t} ORDER BY {k}"))]
                for t, k in TABLES.items()
            }
            trans.rollback()
    return answer, rows, len(queries)


def test_mariadb_1011_claim_agrees_with_the_generic_claim(
    mysql_store: MySQLStore, clock: FakeClock
) -> None:
    rng = random.Random(5)
    jobs = []
    for i in range(60):
        jobs.append(
            new_job(
                clock,
                priority=rng.choice(list(JobPriority)),
                scheduled_time=clock.now() - timedelta(seconds=rng.randrange(0, 3600)),
                tags=("t'1", f"n{i}") if i % 3 == 0 else (),
                params={"k": "v\\'"} if i % 4 == 0 else {},
                timeout=timedelta(seconds=i) if i % 5 == 0 else None,
            )
        )
    mysql_store.insert_jobs(jobs, now=clock.now())
    for limit in (1, 7, 25, 100):
        for boost in (BOOST, timedelta(0)):
            args = {"node_id": "me", "limit": limit, "now": clock.now(), "boost": boost}
            mine, my_rows, my_queries = _run_and_roll_back(
                mysql_store, partial(mysql_store._claim, **args)
            )
            theirs, their_rows, their_queries = _run_and_roll_back(
                mysql_store, partial(SqlStore._claim, mysql_store, **args)
            )
            assert mine == theirs, (limit, boost)
            assert len(mine) == min(limit, len(jobs))
            assert my_rows == their_rows
            # candidates; then update, attempt rows and definitions in one query (the shared
            # claim: five)
            assert (my_queries, their_queries) == (2, 5)


def test_mariadb_1011_record_agrees_with_the_generic_write(
    mysql_store: MySQLStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed_once(mysql_store, clock, 40)
    mine = mysql_store.claim("me", 30, now=clock.now(), boost_interval=BOOST)
    others = mysql_store.claim("other", 5, now=clock.now(), boost_interval=BOOST)
    clock.advance(timedelta(seconds=3))
    later = clock.now() + timedelta(minutes=1)
    tricky = 'it\'s \\ "q" 100% %s é 🚀 \x00'
    kinds = [
        (OutcomeKind.SUCCEEDED, {"result": '{"ok":"' + tricky + '"}'}),
        (OutcomeKind.DEAD, {"error": tricky}),
        (OutcomeKind.RETRY, {"error": "again", "retry_at": later}),
        (OutcomeKind.RETRY, {"error": "now"}),
        (OutcomeKind.RESCHEDULE, {"error": "circuit open", "retry_at": later}),
        (OutcomeKind.SUCCEEDED, {}),
        (OutcomeKind.RESCHEDULE, {"retry_at": later}),
    ]
    outcomes, expected_fenced = mixed_outcomes(mine, others, clock, kinds)
    now = clock.now()

    written, rows, queries = _run_and_roll_back(
        mysql_store, lambda c: mysql_store._record(c, "me", outcomes, now, REFUSE_ALL)
    )
    generic_written, generic_rows, generic_queries = _run_and_roll_back(
        mysql_store, lambda c: SqlStore._record(mysql_store, c, "me", outcomes, now, REFUSE_ALL)
    )
    assert written == generic_written
    assert list(written.fenced) == expected_fenced
    assert rows == generic_rows
    last_errors = {bytes(r["job_id"]): r["last_error"] for r in rows["scheduler_job_queue"]}
    expected = expected_last_errors(outcomes, expected_fenced)
    assert {job_id: last_errors[job_id.bytes] for job_id in expected} == expected
    # The fenced read, then every write in one query; outcome hooks add their own.
    assert generic_queries - queries == 3

    # Writes larger than one query's budget are split over several, with the same result.
    monkeypatch.setattr("ratchet_mysql.store.PIPELINE_MAX_BYTES", 2000)
    _, split_rows, split_queries = _run_and_roll_back(
        mysql_store, lambda c: mysql_store._record(c, "me", outcomes, now, REFUSE_ALL)
    )
    assert split_rows == generic_rows
    assert split_queries > queries + 2


def test_mariadb_1011_a_failing_statement_of_a_multi_statement_query_raises(
    mysql_store: MySQLStore, clock: FakeClock
) -> None:
    """The server stops at the failing statement; the error comes out of the engine wrapped
    (classifiable), and the statements before it roll back with the transaction."""
    [job] = [new_job(clock)]
    mysql_store.insert_jobs([job], now=clock.now())
    with pytest.raises(DBAPIError) as caught, mysql_store.engine.begin() as conn:
        mysql_store._multi(
            conn,
            "UPDATE scheduler_job_queue SET attempts = 7;\n"
            "UPDATE scheduler_job_queue SET attempts = 1 + 'x' * 0 WHERE no_such_column = 1;\n"
            "UPDATE scheduler_job_queue SET attempts = 9",
        )
    assert error_code(caught.value) == 1054  # unknown column
    with mysql_store.engine.connect() as conn:
        assert conn.execute(text("SELECT attempts FROM scheduler_job_queue")).scalar() == 0
