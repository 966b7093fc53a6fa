"""Running the Alembic migrations shipped with ratchet-core."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

if TYPE_CHECKING:
    from ratchet.sql.store import SqlStore

VERSION_TABLE = "ratchet_alembic_version"


def alembic_config(store: SqlStore) -> Config:
    """An Alembic config pointing at the packaged migrations: ratchet-core's, then those the
    store's dialect ships in its own package (``SqlDialect.migration_locations``)."""
    cfg = Config()
    cfg.set_main_option("script_location", "ratchet.sql:migrations")
    core = Path(__file__).resolve().parent / "migrations" / "versions"
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option(
        "version_locations", os.pathsep.join([str(core), *store.dialect.migration_locations])
    )
    cfg.attributes["ratchet_dialect"] = store.dialect
    return cfg


def upgrade(store: SqlStore, revision: str = "heads") -> None:
    """Upgrade the schema under the dialect's migration lock (safe when nodes start together).

    Each feature's migrations form their own branch from the baseline, so ``heads`` (all of
    them) is the default target.
    """
    cfg = alembic_config(store)
    with store.engine.begin() as conn, store.dialect.migration_lock(conn):
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def head_revisions(store: SqlStore) -> tuple[str, ...]:
    """The newest revision of every migration branch shipped with ratchet-core and the store's
    dialect."""
    return tuple(sorted(ScriptDirectory.from_config(alembic_config(store)).get_heads()))


def current_revisions(store: SqlStore) -> tuple[str, ...]:
    """The revisions the database is at (one per branch)."""
    with store.read_engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return tuple(sorted(ctx.get_current_heads()))
