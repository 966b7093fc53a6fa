"""Built-in plugin: the SQLite store (the embedded default)."""

from __future__ import annotations

from typing import Any

from ratchet import hookimpl


def make_sqlite_store(url: str, options: dict[str, Any] | None = None) -> Any:
    """A :class:`~ratchet.sql.store.SqlStore` on a SQLite file."""
    from ratchet.sql.sqlite import SqliteDialect
    from ratchet.sql.store import SqlStore

    return SqlStore(url, SqliteDialect(), **(options or {}))


@hookimpl
def ratchet_register_stores(registry: Any) -> None:
    registry.add("sqlite", make_sqlite_store)
