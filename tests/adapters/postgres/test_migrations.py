"""Migrations on PostgreSQL: several nodes starting at once migrate exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Collection, Iterator

import psycopg
import pytest
from sqlalchemy import inspect, text

from pg_fixtures import libpq_url
from ratchet.sql.migrate import current_revisions, head_revisions
from ratchet.sql.sqlite import SqliteDialect
from ratchet.sql.store import SqlStore
from ratchet_postgres import PostgresStore

pytestmark = pytest.mark.postgres

TABLES = {
    "scheduler_job",
    "scheduler_job_queue",
    "scheduler_job_tag",
    "scheduler_idempotency_key",
    "scheduler_job_execution",
    "scheduler_node",
    "ratchet_alembic_version",
}

MIGRATE_SCRIPT = textwrap.dedent(
    """
    import sys
    from ratchet_postgres import PostgresStore
    store = PostgresStore(sys.argv[1])
    sys.stdin.readline()          # start together
    store.migrate()
    store.close()
    print("migrated")
    """
)


@pytest.fixture
def empty_store(postgres_empty_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(postgres_empty_url)
    yield store
    store.close()


def _schema(store: PostgresStore) -> tuple[set[str], list[str], list[str]]:
    with store.engine.connect() as conn:
        tables = set(inspect(conn).get_table_names())
        versions = list(
            conn.execute(text("SELECT version_num FROM ratchet_alembic_version")).scalars()
        )
        indexes = list(
            conn.execute(
                text(
                    "SELECT indexname FROM pg_indexes WHERE tablename = 'scheduler_job_queue'"
                    " AND indexname = 'idx_queue_pending_claim'"
                )
            ).scalars()
        )
    return tables, sorted(versions), indexes


def test_concurrent_migrations_in_threads_and_processes(
    empty_store: PostgresStore, postgres_empty_url: str
) -> None:
    """Four threads and four processes call migrate() on an empty database at the same time."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", MIGRATE_SCRIPT, postgres_empty_url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
        )
        for _ in range(4)
    ]
    errors: list[BaseException] = []
    start = threading.Barrier(5)

    def migrate_in_thread() -> None:
        store = PostgresStore(postgres_empty_url)
        try:
            start.wait(timeout=60)
            store.migrate()
        except BaseException as exc:
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=migrate_in_thread) for _ in range(4)]
    for t in threads:
        t.start()
    start.wait(timeout=60)  # every thread is at the line; release the processes too
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    for t in threads:
        t.join(timeout=120)
    outputs = [p.communicate(timeout=120) for p in procs]
    assert errors == []
    for p, (out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
        assert out.strip() == "migrated"

    tables, versions, indexes = _schema(empty_store)
    assert tables >= TABLES
    assert versions == sorted(head_revisions(empty_store))
    assert tuple(versions) == current_revisions(empty_store)
    assert indexes == ["idx_queue_pending_claim"]


def _advisory_waiters(url: str) -> int:
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_waiting_node_finds_the_schema_migrated(
    empty_store: PostgresStore, postgres_empty_url: str
) -> None:
    """While one node holds the migration lock, another blocks on it, then migrates alone."""
    done = threading.Event()
    failure: list[BaseException] = []

    def late_node() -> None:
        store = PostgresStore(postgres_empty_url)
        try:
            store.migrate()
        except BaseException as exc:
            failure.append(exc)
        finally:
            store.close()
            done.set()

    with empty_store.engine.begin() as holder, empty_store.dialect.migration_lock(holder):
        thread = threading.Thread(target=late_node)
        thread.start()
        deadline = time.monotonic() + 30
        while _advisory_waiters(postgres_empty_url) != 1:
            assert time.monotonic() < deadline, "the late node never waited for the lock"
            time.sleep(0.02)  # polling the server's lock table
        assert not done.is_set()
    thread.join(timeout=60)
    assert failure == []
    assert done.is_set()
    assert _schema(empty_store)[1] == sorted(head_revisions(empty_store))


def test_migrating_twice_is_a_no_op(postgres_store_url: str) -> None:
    store = PostgresStore(postgres_store_url)
    try:
        before = current_revisions(store)
        store.migrate()
        assert current_revisions(store) == before == tuple(sorted(head_revisions(store)))
    finally:
        store.close()


def test_claim_index_migration_does_nothing_on_sqlite(tmp_path: object) -> None:
    store = SqlStore(f"sqlite:///{tmp_path}/jobs.db", SqliteDialect())
    try:
        store.migrate()
        with store.engine.connect() as conn:
            names = {ix["name"] for ix in inspect(conn).get_indexes("scheduler_job_queue")}
        assert "idx_queue_pending_claim" not in names
        assert "idx_queue_claim" in names
    finally:
        store.close()


PARTIAL = {
    "idx_queue_owner": ("scheduler_job_queue", "picked_by = $1"),
    "idx_queue_waiting_for": ("scheduler_job_queue", "waiting_for = $1::uuid"),
    "idx_queue_signal_key": ("scheduler_job_queue", "signal_key = $1 AND status = 'WAITING'"),
    "idx_queue_signal_deadline": ("scheduler_job_queue", "signal_deadline <= $1::bigint"),
    "idx_job_recurring_master": ("scheduler_job", "recurring_master_id = $1::uuid"),
    "idx_job_batch": ("scheduler_job", "batch_id = $1::uuid"),
}


#: The indexes migration ``pg02`` makes partial (``<column> IS NOT NULL``).
PG02_PARTIAL = {
    "idx_job_depends_on": ("scheduler_job", "depends_on = $1::uuid"),
    "idx_job_encryption_key_id": ("scheduler_job", "encryption_key_id = $1"),
    "uq_queue_business_key": ("scheduler_job_queue", "business_key = $1"),
}

#: The tables whose foreign key to ``scheduler_job`` migration ``pg02`` drops.
REFERRING = {
    "scheduler_job_queue",
    "scheduler_job_tag",
    "scheduler_job_affinity",
    "scheduler_job_execution",
}


def _index_predicates(
    store: PostgresStore, names: Collection[str] = tuple(PARTIAL)
) -> dict[str, str | None]:
    with store.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) FROM pg_index i"
                " JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = ANY(:names)"
            ),
            {"names": list(names)},
        ).all()
    return {name: predicate for name, predicate in rows}


def _tables_referring_to_jobs(store: PostgresStore) -> set[str]:
    with store.engine.connect() as conn:
        return set(
            conn.execute(
                text(
                    "SELECT conrelid::regclass::text FROM pg_constraint"
                    " WHERE contype = 'f' AND confrelid = 'scheduler_job'::regclass"
                )
            ).scalars()
        )


def test_the_null_free_indexes_migrate_to_partial_and_back(empty_store: PostgresStore) -> None:
    """A schema at the previous heads gains the partial indexes on ``migrate()``; the
    downgrade restores the full ones."""
    from alembic import command

    from ratchet.sql.migrate import alembic_config, upgrade

    for revision in ("0002", "0003", "0004", "0005", "0006", "0007", "0008"):
        upgrade(empty_store, revision)
    assert _index_predicates(empty_store) == dict.fromkeys(PARTIAL)
    empty_store.migrate()
    predicates = _index_predicates(empty_store)
    assert predicates == {
        name: f"({columns.split(' ')[0]} IS NOT NULL)" for name, (_, columns) in PARTIAL.items()
    }
    cfg = alembic_config(empty_store)
    with empty_store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0002")
    assert _index_predicates(empty_store) == dict.fromkeys(PARTIAL)
    assert "pg01" not in current_revisions(empty_store)


def test_pg02_drops_the_job_foreign_keys_and_the_null_index_entries_and_back(
    empty_store: PostgresStore,
) -> None:
    """A schema at the revisions before ``pg02`` has the four foreign keys to the job table and
    full indexes on ``depends_on``, ``encryption_key_id`` and the queue's business key;
    ``migrate()`` drops the keys and makes the indexes partial; the downgrade restores both."""
    from alembic import command

    from ratchet.sql.migrate import alembic_config, upgrade

    for revision in ("pg01", "0010", "0011", "0013"):
        upgrade(empty_store, revision)
    assert _tables_referring_to_jobs(empty_store) == REFERRING
    assert _index_predicates(empty_store, PG02_PARTIAL) == dict.fromkeys(PG02_PARTIAL)
    empty_store.migrate()
    assert "pg04" in current_revisions(empty_store)  # the head, past pg02
    assert _tables_referring_to_jobs(empty_store) == set()
    assert _index_predicates(empty_store, PG02_PARTIAL) == {
        name: f"({condition.split(' ')[0]} IS NOT NULL)"
        for name, (_, condition) in PG02_PARTIAL.items()
    }
    cfg = alembic_config(empty_store)
    with empty_store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "pg01")
    assert "pg02" not in current_revisions(empty_store)
    assert _tables_referring_to_jobs(empty_store) == REFERRING
    assert _index_predicates(empty_store, PG02_PARTIAL) == dict.fromkeys(PG02_PARTIAL)


def _queue_indexes(store: PostgresStore) -> set[str]:
    with store.engine.connect() as conn:
        return set(
            conn.execute(
                text("SELECT indexname FROM pg_indexes WHERE tablename = 'scheduler_job_queue'")
            ).scalars()
        )


def test_pg03_drops_the_watch_index_and_back(empty_store: PostgresStore) -> None:
    """At the revisions before ``pg03`` the queue has ``idx_queue_watch`` beside the status and
    owner indexes that replace it; ``migrate()`` drops it, the downgrade creates it again."""
    from alembic import command

    from ratchet.sql.migrate import alembic_config, upgrade

    for revision in ("pg02", "0008", "0012"):
        upgrade(empty_store, revision)
    before = _queue_indexes(empty_store)
    assert {"idx_queue_watch", "idx_queue_status_page", "idx_queue_owner"} <= before
    empty_store.migrate()
    assert "pg04" in current_revisions(empty_store)  # the head, past pg03
    after = _queue_indexes(empty_store)
    assert "idx_queue_watch" not in after
    assert {"idx_queue_status_page", "idx_queue_owner"} <= after
    cfg = alembic_config(empty_store)
    with empty_store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "pg02")
    assert "pg03" not in current_revisions(empty_store)
    assert "idx_queue_watch" in _queue_indexes(empty_store)


def test_pg04_leaves_pending_and_running_rows_out_of_the_status_page_index_and_back(
    empty_store: PostgresStore,
) -> None:
    """At ``pg03`` the status page index holds every queue row; ``migrate()`` leaves out the
    PENDING and RUNNING rows; the downgrade makes it whole again."""
    from alembic import command

    from ratchet.sql.migrate import alembic_config, upgrade

    upgrade(empty_store, "pg03")
    page = ["idx_queue_status_page"]
    assert _index_predicates(empty_store, page) == {"idx_queue_status_page": None}
    empty_store.migrate()
    assert "pg04" in current_revisions(empty_store)
    assert _index_predicates(empty_store, page) == {
        "idx_queue_status_page": (
            "((status)::text <> ALL ((ARRAY['PENDING'::character varying, "
            "'RUNNING'::character varying])::text[]))"
        )
    }
    cfg = alembic_config(empty_store)
    with empty_store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "pg03")
    assert "pg04" not in current_revisions(empty_store)
    assert _index_predicates(empty_store, page) == {"idx_queue_status_page": None}


def test_a_page_of_a_rare_status_reads_the_partial_status_index(
    postgres_store_url: str,
) -> None:
    """With 2,000 PENDING jobs and 5 PAUSED ones, the query API's page of PAUSED jobs reads
    ``idx_queue_status_page`` (its status implies the index's predicate), and a page of
    PENDING jobs, which the index no longer holds, still lists them newest first."""
    from ratchet import JobStatus, Ratchet
    from ratchet.domain.query import JobQuery

    app = Ratchet(postgres_store_url, allowed_modules=["sample_jobs"])
    try:
        import sample_jobs

        handles = app.enqueue_many(sample_jobs.record, [(i,) for i in range(2000)])
        paused = [h.id for h in handles[:5]]
        for job_id in paused:
            assert app.pause_job(job_id)
        store = app.store
        with store.engine.begin() as conn:
            conn.execute(text("ANALYZE scheduler_job_queue"))
        pending_page = store.query_jobs(
            JobQuery(statuses=(JobStatus.PENDING,)), after=None, limit=50
        )
        assert [r.job_id for r in pending_page] == [h.id for h in handles[::-1][:50]]
        paused_page = store.query_jobs(JobQuery(statuses=(JobStatus.PAUSED,)), after=None, limit=50)
        assert [r.job_id for r in paused_page] == paused[::-1]
        from ratchet.sql import query_store

        stmt = query_store._page(store, JobQuery(), None, 50, JobStatus.PAUSED)
        compiled = stmt.compile(store.engine, compile_kwargs={"literal_binds": True})
        with store.engine.connect() as conn:
            plan = "\n".join(conn.execute(text(f"EXPLAIN {compiled}")).scalars())
        assert "idx_queue_status_page" in plan, plan
    finally:
        app.close()


@pytest.mark.parametrize("plan", ["force_custom_plan", "force_generic_plan"])
def test_partial_indexes_serve_their_queries(postgres_store_url: str, plan: str) -> None:
    """Each query shape that reads one of these indexes implies its ``IS NOT NULL``
    predicate, also under a generic plan (parameter values unknown).

    The table's other secondary indexes are dropped inside a rolled-back transaction first: on
    a small table another index (say ``(status, job_id)`` for ``status = 'WAITING'``) can tie
    with the partial one, and which of two usable indexes the planner picks is not the point.
    With the competitors gone and sequential scans off, a predicate the planner cannot prove
    leaves it a full scan of the primary key, and the test fails."""
    with psycopg.connect(libpq_url(postgres_store_url)) as conn:
        for index, (table, condition) in {**PARTIAL, **PG02_PARTIAL}.items():
            conn.execute("SET LOCAL enable_seqscan = off")
            conn.execute(f"SET LOCAL plan_cache_mode = {plan}")
            others = conn.execute(
                "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE i.indrelid = %s::regclass AND c.relname <> %s"
                " AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)",
                (table, index),
            ).fetchall()
            for (other,) in others:
                conn.execute(f"DROP INDEX {other}")
            name = f"q_{index}"
            conn.execute(f"PREPARE {name} AS SELECT 1 FROM {table} WHERE {condition}")
            arg = "0" if "deadline" in index else "'00000000-0000-0000-0000-000000000000'"
            if index in (
                "idx_queue_owner",
                "idx_queue_signal_key",
                "idx_job_encryption_key_id",
                "uq_queue_business_key",
            ):
                arg = "'x'"
            lines = conn.execute(f"EXPLAIN EXECUTE {name}({arg})").fetchall()
            conn.execute(f"DEALLOCATE {name}")
            conn.rollback()
            plan_text = "\n".join(line for (line,) in lines)
            assert f"using {index}" in plan_text.lower() or f"on {index}" in plan_text, plan_text
