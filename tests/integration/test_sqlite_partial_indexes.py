"""SQLite keeps no index entries for the NULL columns of a plain job (migration ``sq01``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ratchet import Ratchet
from ratchet.sql.migrate import alembic_config, current_revisions, upgrade
from ratchet.sql.store import SqlStore

#: index -> (table, a query shape that reads it, with one bound parameter)
PARTIAL = {
    "idx_queue_owner": ("scheduler_job_queue", "picked_by = ?"),
    "idx_queue_waiting_for": ("scheduler_job_queue", "waiting_for = ?"),
    "idx_queue_signal_key": ("scheduler_job_queue", "signal_key = ? AND status = 'WAITING'"),
    "idx_queue_signal_deadline": ("scheduler_job_queue", "signal_deadline <= ?"),
    "idx_job_recurring_master": ("scheduler_job", "recurring_master_id = ?"),
    "idx_job_batch": ("scheduler_job", "batch_id = ?"),
    "idx_job_encryption_key_id": ("scheduler_job", "encryption_key_id = ?"),
    "idx_job_depends_on": ("scheduler_job", "depends_on IN (?, 'x')"),
}


def _path(url: str) -> str:
    return url.split("///", 1)[1]


def _index_sql(url: str) -> dict[str, str]:
    with sqlite3.connect(_path(url)) as db:
        rows = db.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND name IN"
            f" ({', '.join('?' for _ in PARTIAL)})",
            list(PARTIAL),
        ).fetchall()
    return {name: " ".join(sql.split()) for name, sql in rows}


def _partial(sql: str) -> bool:
    """Whether the index's ``CREATE INDEX`` ends with ``WHERE <first column> IS NOT NULL``."""
    column = sql.split("(", 1)[1].split(",")[0].split(")")[0].strip().strip('"')
    return sql.endswith(f"WHERE {column} IS NOT NULL")


def test_a_fresh_schema_has_the_partial_indexes(sqlite_url: str) -> None:
    Ratchet(sqlite_url, allowed_modules="x").close()
    found = _index_sql(sqlite_url)
    assert sorted(found) == sorted(PARTIAL)
    assert [sql for sql in found.values() if not _partial(sql)] == []


def test_the_null_free_indexes_migrate_to_partial_and_back(sqlite_url: str) -> None:
    """A schema at the heads before ``sq01`` gains the partial indexes on ``migrate()``; the
    downgrade restores the full ones."""
    from alembic import command

    app = Ratchet(sqlite_url, allowed_modules="x", auto_migrate=False)
    store = app.store
    assert isinstance(store, SqlStore)
    for revision in ("0006", "0010", "0011"):
        upgrade(store, revision)
    assert not any(_partial(sql) for sql in _index_sql(sqlite_url).values())
    store.migrate()
    assert "sq02" in current_revisions(store)  # a head that descends from sq01
    assert all(_partial(sql) for sql in _index_sql(sqlite_url).values())
    cfg = alembic_config(store)
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0011")
    assert not {"sq01", "sq02"} & set(current_revisions(store))
    found = _index_sql(sqlite_url)
    assert sorted(found) == sorted(PARTIAL)
    assert not any(_partial(sql) for sql in found.values())
    app.close()


@pytest.mark.parametrize("index", sorted(PARTIAL))
def test_partial_indexes_serve_their_queries(tmp_path: Path, index: str) -> None:
    """Each query shape that reads one of these indexes implies its ``IS NOT NULL``
    predicate, with the value a bound parameter. The table's other secondary indexes are
    dropped inside a rolled-back transaction first, so that the plan either uses the partial
    index or scans the table (and the test fails)."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    Ratchet(url, allowed_modules="x").close()
    table, condition = PARTIAL[index]
    db = sqlite3.connect(_path(url), isolation_level=None)
    try:
        db.execute("BEGIN")
        others = db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?"
            " AND name <> ? AND sql IS NOT NULL",
            (table, index),
        ).fetchall()
        for (other,) in others:
            db.execute(f"DROP INDEX {other}")
        plan = db.execute(
            f"EXPLAIN QUERY PLAN SELECT 1 FROM {table} WHERE {condition}", ("k",)
        ).fetchall()
        db.execute("ROLLBACK")
    finally:
        db.close()
    text = " ".join(str(row[-1]) for row in plan)
    assert f"INDEX {index} " in text + " ", text
