"""Migrating logs one line of its own, none of Alembic's."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet import Ratchet
from ratchet.sql.migrate import head_revisions

SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(name)s|%(message)s")
from ratchet import Ratchet
Ratchet(sys.argv[1], allowed_modules="x").close()
Ratchet(sys.argv[1], allowed_modules="x").close()
"""


def test_a_fresh_process_creating_the_schema_logs_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, url], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines  # not Alembic's plugins, context or migration docstrings
    assert lines[0].startswith(f"ratchet.migrate|created the Ratchet schema in {url} at revisions")
    assert lines[0].endswith("0014, 0016, sq02")


def test_upgrading_logs_from_and_to_and_a_current_schema_logs_nothing(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    from ratchet.sql.migrate import upgrade

    app = Ratchet(sqlite_url, allowed_modules="x", auto_migrate=False)
    with caplog.at_level(logging.DEBUG):
        upgrade(app.store, "0001")  # type: ignore[arg-type]
        caplog.clear()
        app.store.migrate()
        heads = ", ".join(head_revisions(app.store))  # type: ignore[arg-type]
        assert [r.getMessage() for r in caplog.records] == [
            f"upgraded the Ratchet schema of {sqlite_url} from revision 0001 to revisions {heads}"
        ]
        caplog.clear()
        app.store.migrate()
        assert caplog.records == []
    app.close()


def test_an_alembic_logger_the_application_configured_is_left_alone(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    logger = logging.getLogger("alembic")
    logger.setLevel(logging.INFO)
    try:
        with caplog.at_level(logging.INFO):
            Ratchet(sqlite_url, allowed_modules="x").close()
        assert any(r.name.startswith("alembic") for r in caplog.records)
        assert logger.level == logging.INFO
    finally:
        logger.setLevel(logging.NOTSET)
