"""Runs the shipped dialect equivalence suite over every backend: SQLite (the generic statement
sets against themselves), PostgreSQL and MariaDB through both MySQL drivers, with the round trips
each dialect's own statement sets are there to save."""

from __future__ import annotations

from typing import Any

import pytest

from ratchet.testing.clock import FakeClock
from ratchet.testing.dialect_contract import DialectEquivalenceContract, run_rolled_back


class TestDialect(DialectEquivalenceContract):
    def check_round_trips(self, store: Any, path: str, mine: int, generic: int) -> None:
        dialect = store.dialect.name
        if dialect == "postgresql":
            # insert-taken: + the holders. A claim in a caller's transaction takes the claim
            # lock first, a statement of its own (it must run before the claim's snapshot).
            claim = 2 if store.pg_claim.serialized else 1
            expected = {"claim": claim, "insert": 1, "insert-taken": 2}
            if path in expected:
                assert mine == expected[path], path
            if path == "record":
                # One statement for the writes; outcome hooks (e.g. resource permits) add theirs.
                assert generic - mine >= 4
        elif dialect == "mysql":
            if path == "claim":
                # candidates; then update and definitions in one query (the generic claim:
                # candidates, lock, update, definitions)
                assert (mine, generic) == (2, 4)
            if path == "record":
                # The fenced read, then every write in one query; outcome hooks add their own.
                assert generic - mine == 3
        else:
            assert mine == generic, path

    def test_mysql_writes_larger_than_one_query_are_split_alike(
        self, store: Any, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        if store.dialect.name != "mysql":
            pytest.skip("N/A: only the MySQL store renders its writes as multi-statement queries")
        outcomes, _ = self.mixed_batch(store, clock)
        now = clock.now()
        mine, theirs = self.record_both(store, outcomes, now)
        monkeypatch.setattr("ratchet_mysql.store.PIPELINE_MAX_BYTES", 2000)
        split = run_rolled_back(store, lambda conn: self.record(store, conn, outcomes, now))
        assert split.answer == theirs.answer
        assert split.rows == theirs.rows
        assert split.statements > mine.statements + 2
