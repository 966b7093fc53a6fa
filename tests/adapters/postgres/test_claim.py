"""The one-statement PostgreSQL claim: one round trip, exclusive, indexed.

Its answers and rows are compared with the generic claim's by the dialect equivalence suite
(``tests/contract/test_dialect_contract.py``)."""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import TextClause, text
from sqlalchemy.engine import Connection

from ratchet.domain.lifecycle import JobPriority, JobStatus
from ratchet.domain.model import ClaimedJob
from ratchet.sql.types import to_micros
from ratchet.testing.clock import FakeClock
from ratchet.testing.store_contract import new_job
from ratchet_postgres import PostgresStore
from ratchet_postgres.coordinator import libpq_conninfo
from ratchet_postgres.named_statement import NamedStatement
from ratchet_postgres.store import (
    PSYCOPG_CACHED_LENGTH,
    claim_parameters,
    claim_statement,
    record_statement,
)

pytestmark = pytest.mark.postgres

BOOST = timedelta(minutes=15)


@pytest.fixture
def store(postgres_store_url: str) -> Iterator[PostgresStore]:
    s = PostgresStore(postgres_store_url)
    yield s
    s.close()


def fill(
    conn: Connection,
    pending: int,
    running: int = 0,
    *,
    start: datetime | None = None,
    analyze: bool = True,
) -> None:
    """Insert jobs quickly in SQL: ``pending`` PENDING (priority i % 5, one per ms) + RUNNING;
    then ``analyze`` the tables."""
    t0 = to_micros(start or datetime(2030, 1, 1, tzinfo=UTC))
    total = pending + running
    conn.execute(
        text(
            "INSERT INTO scheduler_job (job_id, target, payload, priority, max_retries,"
            " backoff_policy, backoff_ms, idempotency_key, created_at)"
            " SELECT gen_random_uuid(), 'bench:noop', '{\"args\":[],\"kwargs\":{}}', g % 5, 0,"
            " 'NONE', 0, 'k' || g, :t0 FROM generate_series(1, :n) g"
        ),
        {"t0": t0, "n": total},
    )
    conn.execute(
        text(
            "INSERT INTO scheduler_job_queue (job_id, status, priority, scheduled_time, attempts,"
            " epoch, picked_by)"
            " SELECT job_id, CASE WHEN rn <= :pending THEN 'PENDING' ELSE 'RUNNING' END,"
            "  priority, :t0 + rn * 1000, 0, 0, CASE WHEN rn <= :pending THEN NULL ELSE 'other' END"
            " FROM (SELECT job_id, priority, row_number() OVER () AS rn FROM scheduler_job) s"
        ),
        {"t0": t0, "pending": pending},
    )
    if analyze:
        conn.execute(text("ANALYZE scheduler_job_queue"))
        conn.execute(text("ANALYZE scheduler_job"))


# ---------------------------------------------------------------------- one round trip
def test_claim_round_trip_and_definition_fields(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    job = new_job(
        clock,
        priority=JobPriority.HIGH,
        tags=("a", "b"),
        params={"region": "eu"},
        timeout=timedelta(seconds=9),
        executor="threads",
    )
    store.insert_jobs([job], now=clock.now())
    statements: list[str] = []
    pipelines: list[bytes] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    def counted(pgconn: Any, prelude: bytes, name: bytes, values: Any) -> Any:
        pipelines.append(name)
        return pipelined(pgconn, prelude, name, values)

    from sqlalchemy import event

    from ratchet_postgres import named_statement

    pipelined = named_statement._after_prelude
    monkeypatch.setattr(named_statement, "_after_prelude", counted)
    event.listen(store.engine, "before_cursor_execute", count)
    event.listen(store.engine, "begin", count)
    try:
        [claimed] = store.claim("n1", 10, now=clock.now(), boost_interval=BOOST)
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
        event.remove(store.engine, "begin", count)
    # One round trip on the bare driver connection: no SQLAlchemy statement, no BEGIN / COMMIT.
    assert statements == [] and len(pipelines) == 1
    assert (claimed.job_id, claimed.epoch, claimed.attempt) == (job.job_id, 1, 1)
    assert claimed.priority is JobPriority.HIGH
    assert claimed.tags == ("a", "b") and dict(claimed.params) == {"region": "eu"}
    assert claimed.timeout == timedelta(seconds=9) and claimed.executor == "threads"
    assert claimed.scheduled_time == job.scheduled_time and claimed.claimed_at == clock.now()
    assert json.loads(claimed.payload) == json.loads(job.payload)
    [attempt] = store.attempts(job.job_id)
    assert (attempt.attempt, attempt.epoch, attempt.node_id, attempt.outcome) == (
        1,
        1,
        "n1",
        "RUNNING",
    )


# ---------------------------------------------------------------------- exclusivity
def test_concurrent_claimers_never_share_a_job(
    store: PostgresStore, postgres_store_url: str
) -> None:
    """Eight claimers on two engines (separate pools) drain 3,000 jobs: each claimed once."""
    with store.engine.begin() as conn:
        fill(conn, 3000, start=datetime(2020, 1, 1, tzinfo=UTC))
    other = PostgresStore(postgres_store_url)
    now = datetime.now(UTC)
    got: list[list[ClaimedJob]] = [[] for _ in range(8)]
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def claimer(i: int) -> None:
        s = store if i % 2 else other
        try:
            start.wait(timeout=30)
            while batch := s.claim(f"node-{i}", 25, now=now, boost_interval=BOOST):
                got[i].extend(batch)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(i,)) for i in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        other.close()
    assert errors == []
    ids = [c.job_id for batch in got for c in batch]
    assert len(ids) == 3000 and len(set(ids)) == 3000
    assert sum(1 for batch in got if batch) >= 2, "the claimers did not run concurrently"
    assert {c.epoch for batch in got for c in batch} == {1}
    with store.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT status, count(*), count(DISTINCT picked_by), max(epoch)"
                " FROM scheduler_job_queue GROUP BY status"
            )
        ).all()
        history = conn.execute(
            text("SELECT count(*), count(DISTINCT job_id) FROM scheduler_job_execution")
        ).one()
    assert [(r[0], r[1], r[3]) for r in rows] == [(JobStatus.RUNNING.value, 3000, 1)]
    assert tuple(history) == (0, 0), "a running attempt is its live row until it ends"
    owners = {c.job_id: f"node-{i}" for i, batch in enumerate(got) for c in batch}
    with store.engine.connect() as conn:
        db_owners = dict(
            conn.execute(text("SELECT job_id, picked_by FROM scheduler_job_queue")).all()
        )
    assert db_owners == owners


# ---------------------------------------------------------------------- the plan
def _plan(conn: Connection, sql: str, params: dict[str, Any]) -> str:
    rows = conn.execute(text("EXPLAIN (FORMAT JSON) " + sql), params).scalar_one()
    return json.dumps(rows)


def test_claim_plan_uses_the_partial_index(store: PostgresStore) -> None:
    """With 20,000 PENDING and 20,000 RUNNING rows, each priority level is read by a range
    scan of the claim index (one scan, run once per level of the ``VALUES`` list)."""
    with store.engine.begin() as conn:
        fill(conn, 20_000, 20_000)
    now = datetime(2030, 1, 2, tzinfo=UTC)
    params = claim_parameters("n", 50, now, BOOST)
    sql = claim_statement(True).text
    with store.engine.connect() as conn:
        custom = _plan(conn, sql, params)
        # Its generic plan, as a server-side prepared statement forced to one, built on this
        # full queue: index scans too. (The store never lets the server keep one: a generic
        # plan built on an empty queue scans it; see the test after the next.)
        positional = {
            "now": "$1",
            "lim": "$2",
            "node": "$3",
            "boost": "$4",
            "cand": "$5",
            "ntags": "$6",
        }
        prepared = re.sub(
            r":(now|lim|node|boost|cand|ntags)\b", lambda m: positional[m.group(1)], sql
        )
        conn.execute(
            text(f"PREPARE claim_probe (bigint, int, text, bigint, int, text[]) AS {prepared}")
        )
        conn.execute(text("SET plan_cache_mode = force_generic_plan"))
        generic = conn.execute(
            text(
                "EXPLAIN (FORMAT JSON) EXECUTE claim_probe"
                f"({params['now']}, {params['lim']}, 'n', {params['boost']}, {params['cand']},"
                " '{}')"
            )
        ).scalar_one()
        conn.rollback()
    for plan in (custom, json.dumps(generic)):
        assert plan.count('"Index Name": "idx_queue_pending_claim"') == 1, plan
        assert '"Node Type": "Values Scan"' in plan, plan
        # the level is the scan's first key, once per row of the VALUES list
        assert '"Index Cond": "((priority = \\"*VALUES*\\".column1)' in plan, plan
        # the affinity flag is in the index: jobs without affinity need no heap visit
        assert '"Node Type": "Index Only Scan"' in plan, plan
        assert '"Node Type": "Seq Scan"' not in plan, plan
        assert '"Sort Method"' not in plan or "external" not in plan


def _visited(node: dict[str, Any]) -> Iterator[tuple[str, int]]:
    """(node type, rows it produced over all its loops) for ``node`` and every node under it."""
    yield node["Node Type"], node["Actual Rows"] * node["Actual Loops"]
    for child in node.get("Plans", ()):
        yield from _visited(child)


def test_a_claim_reads_a_batch_not_the_queue_under_stale_statistics(
    store: PostgresStore,
) -> None:
    """A queue the planner has no statistics for yet (a burst of jobs into a new database;
    autovacuum analyzes a minute or more later) must not make the claim walk every PENDING row
    to mark a batch RUNNING: no step of it produces more rows than the candidates it reads."""
    clock = FakeClock()
    for _ in range(4):  # submitted by the application, as a burst arrives
        store.insert_jobs([new_job(clock) for _ in range(5_000)], now=clock.now())
    params = claim_parameters("n", 20, clock.now(), BOOST)
    with store.engine.connect() as conn:
        plan = conn.execute(
            text("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + claim_statement(True).text),
            params,
        ).scalar_one()
        conn.rollback()
    largest = max(_visited(plan[0]["Plan"]), key=lambda visit: visit[1])
    assert largest[1] <= params["cand"] * len(JobPriority), (largest, plan)


def _queue_rows_scanned(conn: Any) -> int:
    """Rows of the queue table read by sequential scans so far (counts the sessions flushed),
    read on a psycopg connection in autocommit."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT seq_tup_read FROM pg_stat_user_tables WHERE relname = 'scheduler_job_queue'"
    ).fetchone()
    return int(row[0])


def test_claims_and_outcome_writes_keep_no_plan_from_an_empty_queue(
    postgres_store_url: str,
) -> None:
    """A worker that polled an empty queue (its statistics say so) and then meets a burst of
    jobs: its claims and outcome writes must read the burst by index, not by the sequential
    scans of a generic plan cached while the queue was empty (PostgreSQL gives a prepared
    statement one after five calls, and keeps it until the table's statistics change). Only
    the insert, whose plan reads no table by size, may have a generic plan."""
    from ratchet.domain.model import Outcome, OutcomeKind
    from ratchet.domain.watcher import WatcherSettings

    store = PostgresStore(postgres_store_url, pool_size=1, max_overflow=0)  # one session
    try:
        clock = FakeClock()
        settings = WatcherSettings()

        def done(jobs: list[ClaimedJob]) -> list[Outcome]:
            now = clock.now()
            return [
                Outcome(j.job_id, j.epoch, j.attempt, OutcomeKind.SUCCEEDED, now, now) for j in jobs
            ]

        with store.engine.begin() as conn:
            conn.execute(text("ANALYZE scheduler_job_queue"))  # the empty queue's statistics
            conn.execute(text("ANALYZE scheduler_job"))
        for _ in range(8):  # more than the five calls after which a plan may be generic
            store.insert_jobs([new_job(clock) for _ in range(2)], now=clock.now())
            polled = store.acquire_work("n1", 1, now=clock.now(), settings=settings,
                                        boost_interval=BOOST, without_row=True)  # fmt: skip
            claimed = store.claim("n1", 1, now=clock.now(), boost_interval=BOOST)
            assert len(polled.claimed) == 1 and len(claimed) == 1
            store.record_outcomes("n1", done([*polled.claimed, *claimed]), now=clock.now())
        with store.engine.begin() as conn:
            fill(conn, 20_000, analyze=False, start=clock.now() - timedelta(hours=1))
            prepared = conn.execute(
                text("SELECT statement, generic_plans FROM pg_prepared_statements")
            ).all()
        # The claims and writes are prepared but never given a generic plan; the insert,
        # whose plan reads no table by size, may have one.
        assert any("UPDATE scheduler_job_queue" in s for s, _ in prepared), prepared
        generic = [
            s
            for s, plans in prepared
            if plans and "scheduler_" in s and "INSERT INTO scheduler_job_queue" not in s
        ]
        assert generic == []
        with psycopg.connect(libpq_conninfo(postgres_store_url), autocommit=True) as watcher:
            scanned = _queue_rows_scanned(watcher)
            polled = store.acquire_work("n1", 50, now=clock.now(), settings=settings,
                                        boost_interval=BOOST, without_row=True)  # fmt: skip
            claimed = store.claim("n1", 50, now=clock.now(), boost_interval=BOOST)
            assert len(polled.claimed) == 50 and len(claimed) == 50
            written = store.record_outcomes(
                "n1", done([*polled.claimed, *claimed]), now=clock.now()
            )
            assert written.fenced == ()
            store._run(lambda conn: conn.execute(text("SELECT pg_stat_force_next_flush()")))
            read = _queue_rows_scanned(watcher) - scanned
        assert read < 1_000, f"{read} queue rows read by sequential scans for 100 jobs"
    finally:
        store.close()


def test_claim_skips_rows_locked_by_another_transaction(store: PostgresStore) -> None:
    clock = FakeClock()
    jobs = [
        new_job(clock, scheduled_time=clock.now() - timedelta(seconds=10 - i)) for i in range(3)
    ]
    store.insert_jobs(jobs, now=clock.now())
    with store.engine.connect() as holder:
        holder.execute(
            text("SELECT 1 FROM scheduler_job_queue WHERE job_id = :id FOR UPDATE"),
            {"id": jobs[0].job_id},
        )
        claimed = store.claim("n1", 3, now=clock.now(), boost_interval=BOOST)
        holder.rollback()
    assert [c.job_id for c in claimed] == [jobs[1].job_id, jobs[2].job_id]
    [late] = store.claim("n2", 3, now=clock.now(), boost_interval=BOOST)
    assert late.job_id == jobs[0].job_id


def test_ids_of_claimed_jobs_are_uuids(store: PostgresStore) -> None:
    clock = FakeClock()
    store.insert_jobs([new_job(clock)], now=clock.now())
    [claimed] = store.claim("n1", 1, now=clock.now(), boost_interval=BOOST)
    assert isinstance(claimed.job_id, uuid.UUID)


class DriverStatements:
    """What the driver ran (text, and whether in autocommit) and what went through
    SQLAlchemy's execution path, while installed."""

    def __init__(self, store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
        import psycopg
        from sqlalchemy import event

        self.driver: list[tuple[str, bool]] = []
        self.through_sqlalchemy: list[str] = []
        execute = psycopg.Cursor.execute

        def counted(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            text_of = query.decode() if isinstance(query, bytes) else str(query)
            self.driver.append((text_of, cursor.connection.autocommit))
            return execute(cursor, query, *args, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, "execute", counted)
        fetch = NamedStatement.fetch

        def named(statement: NamedStatement, driver: Any, params: Any) -> Any:
            if driver.prepare_threshold is not None:  # else it runs through a cursor: counted
                self.driver.append((statement.statement.decode(), driver.autocommit))
            return fetch(statement, driver, params)

        monkeypatch.setattr(NamedStatement, "fetch", named)
        event.listen(
            store.engine, "before_cursor_execute", lambda *a: self.through_sqlalchemy.append(a[2])
        )

    def clear(self) -> None:
        self.driver.clear()
        self.through_sqlalchemy.clear()


def test_a_poll_is_one_statement_with_the_node_probe_folded_in(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The poll's probe (the node's state, a possible takeover) runs inside the claim: one
    statement per poll while the node is ALIVE with nothing to take over, and none of the
    probe's answers is lost (a DEAD node claims nothing). The statement goes to the driver
    directly, in autocommit, without SQLAlchemy's execution path."""
    from ratchet.domain.watcher import NodeInfo, WatcherSettings

    clock = FakeClock()
    settings = WatcherSettings()
    store.insert_jobs([new_job(clock) for _ in range(5)], now=clock.now())
    store.register_incarnation(NodeInfo("n1", "web-1", "host", 1, 4), now=clock.now())
    seen = DriverStatements(store, monkeypatch)
    statements = seen.driver

    def poll(node: str, want: int) -> Any:
        statements.clear()
        return store.acquire_work(
            node, want, now=clock.now(), settings=settings, boost_interval=BOOST
        )

    work = poll("n1", 2)
    assert len(work.claimed) == 2 and work.state is not None and work.state.value == "ALIVE"
    assert len(statements) == 1 and statements[0][1] is True, statements
    assert seen.through_sqlalchemy == []
    empty = poll("n1", 0)
    assert empty.claimed == () and statements == []
    assert store.declare_dead(["n1"], now=clock.now()) == ["n1"]
    dead = poll("n1", 3)
    assert dead.state is not None and dead.state.value == "DEAD" and dead.claimed == ()
    assert len(statements) == 1
    unknown = poll("nobody", 3)
    assert unknown.state is None and unknown.claimed == ()
    with store.engine.connect() as conn:
        running = conn.execute(
            text("SELECT count(*) FROM scheduler_job_queue WHERE status = 'RUNNING'")
        ).scalar_one()
    assert running == 2, "the dead and the unknown node claimed nothing"


def test_an_outcome_batch_outside_flows_is_one_driver_statement(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outcomes of jobs in no flow are written by one statement on the bare driver connection
    in autocommit, fenced as ever: an outcome for a job this node does not hold is refused and
    the rest apply. A batch with a flow outcome goes through SQLAlchemy's transaction, where
    the outcome hooks run."""
    from ratchet.domain.model import Outcome, OutcomeKind

    clock = FakeClock()
    store.insert_jobs([new_job(clock) for _ in range(4)], now=clock.now())
    mine = store.claim("n1", 3, now=clock.now(), boost_interval=BOOST)
    [theirs] = store.claim("n2", 1, now=clock.now(), boost_interval=BOOST)

    def done(job: ClaimedJob, *, flow: bool = False) -> Outcome:
        now = clock.now()
        return Outcome(
            job.job_id, job.epoch, job.attempt, OutcomeKind.SUCCEEDED, now, now, result="1",
            flow_effects=flow,
        )  # fmt: skip

    seen = DriverStatements(store, monkeypatch)
    written = store.record_outcomes("n1", [done(j) for j in [*mine[:2], theirs]], now=clock.now())
    assert written.fenced == (theirs.job_id,)
    assert len(seen.driver) == 1 and seen.driver[0][1] is True, seen.driver
    assert seen.through_sqlalchemy == []
    assert [store.get_job(j.job_id).status for j in mine[:2]] == [JobStatus.SUCCEEDED] * 2
    assert store.get_job(theirs.job_id).status is JobStatus.RUNNING
    seen.clear()
    flowing = store.record_outcomes("n1", [done(mine[2], flow=True)], now=clock.now())
    assert flowing.fenced == ()
    assert seen.through_sqlalchemy, "a flow outcome is written in a transaction with its hooks"
    assert store.get_job(mine[2].job_id).status is JobStatus.SUCCEEDED


def test_the_start_check_read_is_one_statement_without_a_transaction(
    store: PostgresStore,
) -> None:
    """``owned_jobs`` (a slot's last look before a late start) answers which jobs this node
    still holds under their epochs, as a single statement in autocommit: no ``BEGIN`` and
    ``COMMIT`` round trips around the read."""
    from sqlalchemy import event

    clock = FakeClock()
    store.insert_jobs([new_job(clock) for _ in range(3)], now=clock.now())
    mine = store.claim("n1", 2, now=clock.now(), boost_interval=BOOST)
    [theirs] = store.claim("n2", 1, now=clock.now(), boost_interval=BOOST)
    seen: list[bool] = []
    event.listen(
        store.engine,
        "before_cursor_execute",
        lambda conn, *a: seen.append(conn.connection.dbapi_connection.autocommit),
    )
    asked = [(c.job_id, c.epoch) for c in [*mine, theirs]] + [(mine[0].job_id, mine[0].epoch + 1)]
    assert store.owned_jobs("n1", asked) == {(c.job_id, c.epoch) for c in mine}
    assert seen == [True]


@pytest.mark.parametrize(
    "statement",
    [
        claim_statement(False),
        claim_statement(True),
        claim_statement(False, gated=True),
        claim_statement(True, gated=True),
        record_statement(),
    ],
    ids=["claim", "claim-boosted", "gated", "gated-boosted", "record"],
)
def test_hot_statements_fit_psycopgs_parse_cache(statement: TextClause) -> None:
    """psycopg re-parses a statement longer than its cache limit on every execution (about
    5 % of a poll's CPU for the gated claim when it was 4,260 bytes)."""
    import psycopg._queries
    from sqlalchemy.dialects.postgresql import psycopg as psycopg_dialect

    assert PSYCOPG_CACHED_LENGTH == psycopg._queries.MAX_CACHED_STATEMENT_LENGTH
    sent = str(statement.compile(dialect=psycopg_dialect.dialect())).encode()
    assert len(sent) <= PSYCOPG_CACHED_LENGTH
    assert b"\n  " not in sent  # compacted, not merely short
