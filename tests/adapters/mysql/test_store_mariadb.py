"""The MySQL store's multi-statement queries. Its claim, insert and outcome write are compared
with the generic statement sets, row for row and through both drivers, by the dialect
equivalence suite (``tests/contract/test_dialect_contract.py``)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from ratchet.testing import FakeClock
from ratchet.testing.store_contract import (
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
