"""A missing or outdated schema is one typed error naming the command that fixes it.

The check reads the migration version table once per store, on its first operation; submit(),
a worker's start and every CLI command raise :class:`SchemaNotReady` instead of the driver's
``no such table`` traceback.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sample_jobs
from sqlalchemy import event, text

from ratchet import Ratchet, SchemaNotReady
from ratchet.sql.migrate import upgrade


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ratchet.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
    )


@pytest.fixture
def unmigrated(sqlite_url: str) -> Iterator[Ratchet]:
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], auto_migrate=False)
    yield app
    app.close()


def test_submit_on_sqlite_without_a_schema(unmigrated: Ratchet, sqlite_url: str) -> None:
    with pytest.raises(SchemaNotReady) as info:
        unmigrated.enqueue(sample_jobs.noop).submit()
    assert str(info.value) == (
        f"the database at {sqlite_url} has no Ratchet schema: run "
        f"`ratchet db upgrade --url {sqlite_url}`, or create the app with auto_migrate=True"
    )


def test_a_worker_does_not_start_without_a_schema(unmigrated: Ratchet) -> None:
    worker = unmigrated.worker()
    with pytest.raises(SchemaNotReady, match="has no Ratchet schema"):
        worker.start()


def test_a_transactional_submit_checks_too(unmigrated: Ratchet) -> None:
    with unmigrated.store.connect() as conn, pytest.raises(SchemaNotReady):  # type: ignore[attr-defined]
        unmigrated.enqueue(sample_jobs.noop).submit(connection=conn)


def test_an_outdated_schema_names_the_missing_revisions(unmigrated: Ratchet) -> None:
    upgrade(unmigrated.store, "0001")  # type: ignore[arg-type]
    with pytest.raises(
        SchemaNotReady,
        match=r"lacks Ratchet schema revisions 000\d, .*0014, 0016, sq02 \(it is at revision 0001\): run `ratchet db upgrade",
    ):
        unmigrated.list_jobs()


def test_after_the_upgrade_the_same_app_works(unmigrated: Ratchet, sqlite_url: str) -> None:
    with pytest.raises(SchemaNotReady):
        unmigrated.list_jobs()
    done = cli("db", "upgrade", "--url", sqlite_url)
    assert done.returncode == 0, done.stderr
    assert unmigrated.enqueue(sample_jobs.noop).submit().status().value == "PENDING"


def test_the_check_reads_the_version_table_once_per_store(unmigrated: Ratchet) -> None:
    unmigrated.store.migrate()
    fresh = Ratchet(unmigrated.store.url, allowed_modules=["sample_jobs"], auto_migrate=False)
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    store: Any = fresh.store
    engines = {id(e): e for e in (store.engine, store.read_engine)}.values()
    for engine in engines:
        event.listen(engine, "before_cursor_execute", seen)
    try:
        for _ in range(5):
            fresh.enqueue(sample_jobs.noop).submit()
        fresh.list_jobs()
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", seen)
        fresh.close()
    assert sum("FROM ratchet_alembic_version" in s for s in statements) == 1


def test_a_schema_from_a_newer_ratchet_is_logged_not_refused(
    unmigrated: Ratchet, caplog: pytest.LogCaptureFixture
) -> None:
    unmigrated.store.migrate()
    with unmigrated.store.connect() as conn, conn.begin():  # type: ignore[attr-defined]
        conn.execute(text("INSERT INTO ratchet_alembic_version VALUES ('9999_future')"))
    newer = Ratchet(unmigrated.store.url, allowed_modules=["sample_jobs"], auto_migrate=False)
    with caplog.at_level(logging.WARNING, logger="ratchet.migrate"):
        newer.enqueue(sample_jobs.noop).submit()
    newer.close()
    assert "a newer version of Ratchet upgraded it" in caplog.text


def test_cli_commands_say_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    import sqlite3

    sqlite3.connect(tmp_path / "empty.db").close()  # a database file, but no schema
    for args in (
        ("jobs", "list", "--url", url),
        ("jobs", "show", "--url", url, "01a2323b-222e-71aa-a09e-914cf5371c25"),
        ("jobs", "cancel", "--url", url, "01a2323b-222e-71aa-a09e-914cf5371c25"),
        ("jobs", "retry", "--url", url, "01a2323b-222e-71aa-a09e-914cf5371c25"),
    ):
        done = cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.splitlines() == [
            f"error: the database at {url} has no Ratchet schema: run "
            f"`ratchet db upgrade --url {url}`, or create the app with auto_migrate=True"
        ], args


# ------------------------------------------------------------------------------- PostgreSQL
@pytest.mark.postgres
def test_postgres_without_a_schema(postgres_empty_url: str, tmp_path: Path) -> None:
    from sqlalchemy.engine import make_url

    url = make_url(postgres_empty_url)
    assert url.password, "the fixture's URL carries a password: the message must mask it"
    masked = url.render_as_string(hide_password=True)
    app = Ratchet(postgres_empty_url, allowed_modules=["sample_jobs"])
    try:
        with pytest.raises(SchemaNotReady) as info:
            app.enqueue(sample_jobs.noop).submit()
        message = str(info.value)
        assert message.startswith(f"the database at {masked} has no Ratchet schema: run ")
        assert url.password not in message
        assert "(with the real password)" in message
        with pytest.raises(SchemaNotReady):
            app.worker().start()
    finally:
        app.close()

    listed = cli("jobs", "list", "--url", postgres_empty_url)
    assert listed.returncode == 2
    assert len(listed.stderr.splitlines()) == 1 and "has no Ratchet schema" in listed.stderr

    (tmp_path / "pg_app.py").write_text(
        "from ratchet import Ratchet\n"
        f"app = Ratchet({postgres_empty_url!r}, allowed_modules=['sample_jobs'])\n"
    )
    worker = cli("worker", "pg_app:app", cwd=tmp_path)
    assert worker.returncode == 2
    assert worker.stderr.strip().splitlines()[-1].startswith("error: the database at ")
    assert "Traceback" not in worker.stderr

    upgraded = cli("db", "upgrade", "--url", postgres_empty_url)
    assert upgraded.returncode == 0, upgraded.stderr
    app = Ratchet(postgres_empty_url, allowed_modules=["sample_jobs"])
    try:
        assert app.enqueue(sample_jobs.noop).submit().status().value == "PENDING"
    finally:
        app.close()
