"""A SQLite store checkpoints its write-ahead log on a thread of its own, not in commits."""

from __future__ import annotations

import gc
import logging
import os
import signal
import sqlite3
import threading
from pathlib import Path

import pytest
from sample_jobs import record

from ratchet import Ratchet
from ratchet.domain.errors import ConfigurationError
from ratchet.sql.sqlite import SqliteDialect
from ratchet.sql.sqlite_checkpoint import BACKSTOP_PAGES, WalCheckpointer

#: SQLite's own ``wal_autocheckpoint`` (pages).
SQLITE_DEFAULT_AUTOCHECKPOINT = 1000


@pytest.fixture(autouse=True)
def _earlier_threads() -> None:
    """Apps of other tests in this process that were never closed keep their checkpointers:
    the tests here count only the threads started since they began."""
    _BEFORE.clear()
    _BEFORE.update(threading.enumerate())


_BEFORE: set[threading.Thread] = set()


def _checkpoint_threads() -> list[threading.Thread]:
    """The checkpoint threads started since the test began that still run."""
    return [t for t in threading.enumerate() if t.name == "ratchet-checkpoint" and t not in _BEFORE]


def _write_connection_setting(app: Ratchet, pragma: str) -> int:
    engine = app.store.engine  # type: ignore[attr-defined]
    raw = engine.raw_connection()
    try:
        return int(raw.driver_connection.execute(f"PRAGMA {pragma}").fetchone()[0])
    finally:
        raw.close()


def _dialect(app: Ratchet) -> SqliteDialect:
    dialect = app.store.dialect  # type: ignore[attr-defined]
    assert isinstance(dialect, SqliteDialect)
    return dialect


def _wal_database(path: Path) -> sqlite3.Connection:
    """A database in WAL mode whose commits never checkpoint: its pages stay in the log."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE t (n INTEGER PRIMARY KEY, text TEXT)")
    return db


def _fill(db: sqlite3.Connection, rows: int, start: int = 0) -> None:
    db.executemany(
        "INSERT INTO t VALUES (?, ?)", [(n, "x" * 200) for n in range(start, start + rows)]
    )


def test_a_store_leaves_checkpoints_to_its_thread_and_stops_it_on_close(tmp_path: Path) -> None:
    app = Ratchet(f"sqlite:///{tmp_path}/jobs.db", allowed_modules=["sample_jobs"])
    database = tmp_path / "jobs.db"
    try:
        app.enqueue(record, 1).submit()
        checkpointer = _dialect(app).checkpointer
        assert checkpointer is not None and checkpointer.path == str(database)
        assert len(_checkpoint_threads()) == 1
        assert _write_connection_setting(app, "wal_autocheckpoint") == BACKSTOP_PAGES
        before = database.stat().st_size
        for n in range(200):
            app.enqueue(record, n).submit()
        done = checkpointer.checkpoints
        assert checkpointer.wait_for_checkpoints(done + 1, timeout=30)
        # The submissions' pages reached the database file (they were only in the log).
        assert database.stat().st_size > before
    finally:
        app.close()
    assert _checkpoint_threads() == []
    assert (tmp_path / "jobs.db-wal").exists() is False  # SQLite's last close took the log


def test_background_checkpoints_can_be_turned_off(tmp_path: Path) -> None:
    app = Ratchet(
        f"sqlite:///{tmp_path}/jobs.db",
        allowed_modules=["sample_jobs"],
        store_options={"background_checkpoints": False},
    )
    try:
        app.enqueue(record, 1).submit()
        assert _dialect(app).checkpointer is None
        assert _checkpoint_threads() == []
        setting = _write_connection_setting(app, "wal_autocheckpoint")
        assert setting == SQLITE_DEFAULT_AUTOCHECKPOINT
    finally:
        app.close()


def test_a_background_checkpoints_option_that_is_not_a_bool_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="background_checkpoints must be True or False"):
        Ratchet(
            f"sqlite:///{tmp_path}/jobs.db",
            allow_empty_class_policy=True,
            store_options={"background_checkpoints": "yes"},
        )


def test_a_database_in_memory_gets_no_checkpointer() -> None:
    app = Ratchet("sqlite://", allowed_modules=["sample_jobs"])
    try:
        app.enqueue(record, 1).submit()
        assert _dialect(app).checkpointer is None
        assert _checkpoint_threads() == []
    finally:
        app.close()


def test_run_once_checkpoints_a_log_that_changed_and_only_then(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    db = _wal_database(path)
    _fill(db, 500)
    checkpointer = WalCheckpointer(str(path))
    try:
        before = path.stat().st_size
        assert checkpointer.run_once() is True
        assert checkpointer.checkpoints == 1
        assert path.stat().st_size > before  # the log's pages were copied into the file
        assert checkpointer.run_once() is False  # nothing written since
        assert checkpointer.checkpoints == 1
        _fill(db, 10, start=500)
        assert checkpointer.run_once() is True
        assert checkpointer.checkpoints == 2
    finally:
        checkpointer.stop()
        db.close()


def test_run_once_without_a_log_does_nothing(tmp_path: Path) -> None:
    checkpointer = WalCheckpointer(str(tmp_path / "absent.db"))
    assert checkpointer.run_once() is False
    assert checkpointer.checkpoints == 0 and checkpointer.failures == 0
    assert not (tmp_path / "absent.db").exists()


def test_a_failing_checkpoint_is_logged_once_and_never_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A log beside a "database" that is a directory: SQLite cannot open it.
    (tmp_path / "broken.db").mkdir()
    wal = tmp_path / "broken.db-wal"
    wal.write_bytes(b"not a log")
    checkpointer = WalCheckpointer(str(tmp_path / "broken.db"))
    with caplog.at_level(logging.WARNING, logger="ratchet.store"):
        assert checkpointer.run_once() is False
        wal.write_bytes(b"still not a log, and longer")
        os.utime(wal, ns=(1, 1))
        assert checkpointer.run_once() is False
    assert checkpointer.failures == 2 and checkpointer.checkpoints == 0
    warnings = [
        r for r in caplog.records if "checkpoint of the SQLite write-ahead log" in r.message
    ]
    assert len(warnings) == 1
    assert str(wal) in warnings[0].message and str(BACKSTOP_PAGES) in warnings[0].message
    checkpointer.stop()


def test_the_thread_starts_once_and_not_after_stop(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    db = _wal_database(path)
    checkpointer = WalCheckpointer(str(path), interval=0.001)
    try:
        checkpointer.ensure_running()
        checkpointer.ensure_running()
        assert len(_checkpoint_threads()) == 1
        _fill(db, 100)
        assert checkpointer.wait_for_checkpoints(1, timeout=30)
    finally:
        checkpointer.stop()
        db.close()
    assert _checkpoint_threads() == []
    checkpointer.ensure_running()
    assert _checkpoint_threads() == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_runs_a_checkpointer_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    db = _wal_database(path)
    checkpointer = WalCheckpointer(str(path), interval=0.001)
    checkpointer.ensure_running()
    try:
        with checkpointer._lock:  # held by another thread at the moment of the fork
            pid = os.fork()
            if pid == 0:  # the child: report through the exit status only
                code = 1
                signal.alarm(30)  # a child stuck on the parent's lock dies instead of hanging
                try:
                    child_db = sqlite3.connect(path, isolation_level=None)
                    child_db.execute("PRAGMA wal_autocheckpoint=0")
                    before = checkpointer.checkpoints
                    checkpointer.ensure_running()
                    child_db.execute("INSERT INTO t VALUES (1, 'child')")
                    if checkpointer.wait_for_checkpoints(before + 1, timeout=30):
                        code = 0 if len(_checkpoint_threads()) == 1 else 2
                    checkpointer.stop()
                finally:
                    os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert len(_checkpoint_threads()) == 1  # the parent's still runs
    finally:
        checkpointer.stop()
        db.close()


def test_a_store_dropped_without_close_stops_its_thread_once_collected(tmp_path: Path) -> None:
    app = Ratchet(f"sqlite:///{tmp_path}/jobs.db", allowed_modules=["sample_jobs"])
    app.enqueue(record, 1).submit()
    (thread,) = _checkpoint_threads()
    del app
    gc.collect()
    thread.join(timeout=30)
    assert not thread.is_alive()
