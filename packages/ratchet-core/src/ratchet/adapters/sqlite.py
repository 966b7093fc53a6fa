"""Built-in plugin: the SQLite store (the embedded default)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ratchet import hookimpl

if TYPE_CHECKING:
    from ratchet.ports import Store
    from ratchet.registry import StoreRegistry


def make_sqlite_store(url: str, options: dict[str, Any] | None = None) -> Store:
    """A :class:`~ratchet.sql.store.SqlStore` on a SQLite file."""
    from ratchet.sql.sqlite import SqliteDialect
    from ratchet.sql.store import SqlStore

    return SqlStore(url, SqliteDialect(), **(options or {}))


@hookimpl
def ratchet_register_stores(registry: StoreRegistry) -> None:
    registry.add("sqlite", make_sqlite_store)
