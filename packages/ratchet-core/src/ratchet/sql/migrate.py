"""Running the Alembic migrations shipped with ratchet-core."""

from __future__ import annotations

import logging
import os
import shlex
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection
from sqlalchemy.engine import make_url

if TYPE_CHECKING:
    from alembic.config import Config

    from ratchet.sql.store import SqlStore

# Alembic is imported inside ``quiet_alembic()``: importing it logs its plugins at INFO.

VERSION_TABLE = "ratchet_alembic_version"

log = logging.getLogger("ratchet.migrate")

_quiet_lock = threading.Lock()
_quiet_depth = 0


@contextmanager
def quiet_alembic() -> Iterator[None]:
    """Hold back Alembic's INFO lines (its plugins, its context, every migration's docstring)
    while Ratchet migrates or reads its revision; warnings still pass. An ``alembic`` logger
    whose level the application set itself is left alone."""
    global _quiet_depth
    logger = logging.getLogger("alembic")
    with _quiet_lock:
        if _quiet_depth == 0 and logger.level != logging.NOTSET:
            owned = False
        else:
            owned = True
            _quiet_depth += 1
            logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        if owned:
            with _quiet_lock:
                _quiet_depth -= 1
                if _quiet_depth == 0:
                    logger.setLevel(logging.NOTSET)


def safe_url(url: str) -> str:
    """``url`` with its password masked, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("@", 1)[-1] if "@" in url else url


def alembic_config(store: SqlStore) -> Config:
    """An Alembic config pointing at the packaged migrations: ratchet-core's, then those the
    store's dialect ships in its own package (``SqlDialect.migration_locations``)."""
    with quiet_alembic():
        from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", "ratchet.sql:migrations")
    core = Path(__file__).resolve().parent / "migrations" / "versions"
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option(
        "version_locations", os.pathsep.join([str(core), *store.dialect.migration_locations])
    )
    cfg.attributes["ratchet_dialect"] = store.dialect
    return cfg


def _revisions_of(conn: Connection) -> tuple[str, ...]:
    from alembic.runtime.migration import MigrationContext

    ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    return tuple(sorted(ctx.get_current_heads()))


def upgrade(store: SqlStore, revision: str = "heads") -> None:
    """Upgrade the schema under the dialect's migration lock (safe when nodes start together).

    Each feature's migrations form their own branch from the baseline, so ``heads`` (all of
    them) is the default target. Logs one line when it created or changed the schema.
    """
    cfg = alembic_config(store)
    with quiet_alembic(), store.engine.begin() as conn, store.dialect.migration_lock(conn):
        from alembic import command

        before = _revisions_of(conn)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
        after = _revisions_of(conn)
    if after == before:
        return
    where = safe_url(store.url)
    if before:
        log.info(
            "upgraded the Ratchet schema of %s from %s to %s",
            where,
            revisions_text(before),
            revisions_text(after),
        )
    else:
        log.info("created the Ratchet schema in %s at %s", where, revisions_text(after))


def revisions_text(revisions: tuple[str, ...]) -> str:
    """``revision 0008`` or ``revisions 0002, 0003``."""
    return ("revision " if len(revisions) == 1 else "revisions ") + ", ".join(revisions)


def head_revisions(store: SqlStore) -> tuple[str, ...]:
    """The newest revision of every migration branch shipped with ratchet-core and the store's
    dialect."""
    with quiet_alembic():
        from alembic.script import ScriptDirectory

        return tuple(sorted(ScriptDirectory.from_config(alembic_config(store)).get_heads()))


@lru_cache(maxsize=16)
def _shipped(locations: tuple[str, ...]) -> tuple[frozenset[str], frozenset[str]]:
    """The head revisions and every revision of the migrations in ``locations`` (read once)."""
    with quiet_alembic():
        from alembic.config import Config
        from alembic.script import ScriptDirectory

        cfg = Config()
        cfg.set_main_option("script_location", "ratchet.sql:migrations")
        cfg.set_main_option("path_separator", "os")
        cfg.set_main_option("version_locations", os.pathsep.join(locations))
        script = ScriptDirectory.from_config(cfg)
        known = frozenset(rev.revision for rev in script.walk_revisions())
        return frozenset(script.get_heads()), known


def upgrade_command(url: str) -> str:
    """The command that brings the database at ``url`` to the newest schema (password masked)."""
    shown = safe_url(url)
    masked = " (with the real password)" if shown != url else ""
    return f"`ratchet db upgrade --url {shlex.quote(shown)}`{masked}"


def schema_problem(store: SqlStore) -> str | None:
    """None when the database is at every revision this installation ships; else one line that
    says what is missing and how to fix it (one read of the version table).

    A database at revisions this installation does not know was upgraded by a newer version of
    Ratchet: that is logged, not refused, so that older nodes keep running through a rolling
    upgrade.
    """
    core = str(Path(__file__).resolve().parent / "migrations" / "versions")
    heads, known = _shipped((core, *store.dialect.migration_locations))
    current = frozenset(current_revisions(store))
    if current == heads:
        return None
    where = safe_url(store.url)
    unknown = current - known
    if unknown:
        log.warning(
            "the Ratchet schema of %s is at %s, which this installation does not know: a newer "
            "version of Ratchet upgraded it; upgrade ratchet-core and its adapters here too",
            where,
            revisions_text(tuple(sorted(unknown))),
        )
        return None
    fix = f"run {upgrade_command(store.url)}, or create the app with auto_migrate=True"
    if not current:
        return f"the database at {where} has no Ratchet schema: {fix}"
    return (
        f"the database at {where} lacks Ratchet schema {revisions_text(tuple(sorted(heads - current)))} "
        f"(it is at {revisions_text(tuple(sorted(current)))}): {fix}"
    )


def current_revisions(store: SqlStore) -> tuple[str, ...]:
    """The revisions the database is at (one per branch)."""
    with quiet_alembic(), store.read_engine.connect() as conn:
        return _revisions_of(conn)
