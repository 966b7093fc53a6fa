"""SQLite keeps the queue and idempotency key rows in their key's B-tree and indexes only the
business keys that are set (migration ``sq02``): a single submission changes fewer pages."""

from __future__ import annotations

import os
import sqlite3

import pytest
import sample_jobs

from ratchet import Ratchet
from ratchet.domain.errors import DuplicateBusinessKeyError
from ratchet.domain.lifecycle import JobStatus
from ratchet.sql.migrate import alembic_config, current_revisions, upgrade
from ratchet.sql.store import SqlStore

TABLES = ("scheduler_job_queue", "scheduler_idempotency_key")


def _path(url: str) -> str:
    return url.split("///", 1)[1]


def _layout(url: str) -> dict[str, str]:
    """Each of :data:`TABLES`'s ``CREATE TABLE`` and the business key's index or constraint."""
    with sqlite3.connect(_path(url)) as db:
        rows = db.execute(
            "SELECT name, sql FROM sqlite_master WHERE name IN (?, ?, 'uq_queue_business_key')",
            TABLES,
        ).fetchall()
    return {name: " ".join(sql.split()) for name, sql in rows}


def _key_ordered(url: str) -> bool:
    layout = _layout(url)
    tables = all(layout[t].endswith("WITHOUT ROWID") for t in TABLES)
    index = layout.get("uq_queue_business_key", "")
    partial = index.startswith("CREATE UNIQUE INDEX") and index.endswith(
        "WHERE business_key IS NOT NULL"
    )
    assert tables == partial, layout  # the migration changes all three or none
    return tables


def _frames(path: str) -> int:
    """Frames in the write-ahead log (each one page a commit changed)."""
    return (os.path.getsize(path + "-wal") - 32) // (4096 + 24)


def test_a_single_submission_changes_eight_pages(sqlite_url: str) -> None:
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"])
    assert _key_ordered(sqlite_url)
    for i in range(20):
        app.enqueue(sample_jobs.record, i).submit()
    path = _path(sqlite_url)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    app.enqueue(sample_jobs.record, 20).submit()
    # the job row, its key and target page index; the queue row, its claim and status page
    # indexes; the idempotency key row and its creation time index (eleven before sq02)
    assert _frames(path) <= 8
    app.close()


def test_business_keys_stay_unique_among_live_jobs(app: Ratchet) -> None:
    first = app.enqueue(sample_jobs.record, 1).with_business_key("order-7").submit()
    with pytest.raises(DuplicateBusinessKeyError):
        app.enqueue(sample_jobs.record, 2).with_business_key("order-7").submit()
    app.enqueue(sample_jobs.record, 3).submit()
    app.enqueue(sample_jobs.record, 4).submit()  # jobs without a key never conflict
    assert first.status() is JobStatus.PENDING


def _rows(url: str) -> tuple[int, int]:
    with sqlite3.connect(_path(url)) as db:
        return tuple(db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES)


def test_the_tables_are_rebuilt_with_their_rows_both_ways(sqlite_url: str) -> None:
    """A schema at the heads before ``sq02`` is rebuilt by ``migrate()``; the downgrade and a
    second upgrade keep every row, the keys and the business key's uniqueness."""
    from alembic import command

    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], auto_migrate=False)
    store = app.store
    assert isinstance(store, SqlStore)
    for revision in ("sq01", "0003", "0004", "0007", "0009", "0012", "0013", "0014", "0015"):
        upgrade(store, revision)
    assert "sq02" not in current_revisions(store) and not _key_ordered(sqlite_url)
    store.migrate()
    assert "sq02" in current_revisions(store) and _key_ordered(sqlite_url)
    kept = (  # a key given, so that the key table has a row for each job
        app.enqueue(sample_jobs.record, 1).with_business_key("b-1").with_idempotency_key("k-0")
    ).submit()
    keyed = app.enqueue(sample_jobs.record, 2).with_idempotency_key("k-1").submit()
    cfg = alembic_config(store)
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "sq01")
    assert "sq02" not in current_revisions(store) and not _key_ordered(sqlite_url)
    assert _rows(sqlite_url) == (2, 2)
    store.migrate()
    assert _key_ordered(sqlite_url) and _rows(sqlite_url) == (2, 2)
    assert kept.status() is JobStatus.PENDING
    again = app.enqueue(sample_jobs.record, 3).with_idempotency_key("k-1").submit()
    assert again.id == keyed.id
    with pytest.raises(DuplicateBusinessKeyError):
        app.enqueue(sample_jobs.record, 4).with_business_key("b-1").submit()
    app.close()
