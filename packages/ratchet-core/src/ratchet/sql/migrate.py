"""Running the Alembic migrations shipped with ratchet-core."""

from __future__ import annotations

from typing import TYPE_CHECKING

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

if TYPE_CHECKING:
    from ratchet.sql.store import SqlStore

VERSION_TABLE = "ratchet_alembic_version"


def alembic_config(store: SqlStore) -> Config:
    """An Alembic config pointing at the packaged migrations."""
    cfg = Config()
    cfg.set_main_option("script_location", "ratchet.sql:migrations")
    cfg.attributes["ratchet_dialect"] = store.dialect
    return cfg


def upgrade(store: SqlStore, revision: str = "head") -> None:
    """Upgrade the schema under the dialect's migration lock (safe when nodes start together)."""
    cfg = alembic_config(store)
    with store.engine.begin() as conn:
        with store.dialect.migration_lock(conn):
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)


def current_revision(store: SqlStore) -> str | None:
    """The revision the database is at, or None when it has no schema yet."""
    with store.read_engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return ctx.get_current_revision()


def head_revision(store: SqlStore) -> str | None:
    """The newest revision shipped with this version of ratchet-core."""
    return ScriptDirectory.from_config(alembic_config(store)).get_current_head()
