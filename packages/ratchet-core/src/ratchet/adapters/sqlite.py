"""Built-in plugin: the SQLite store (the embedded default)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ratchet import hookimpl

if TYPE_CHECKING:
    from ratchet.ports import Store
    from ratchet.registry import StoreRegistry


def make_sqlite_store(url: str, options: dict[str, Any] | None = None) -> Store:
    """A :class:`~ratchet.sql.store.SqlStore` on a SQLite file.

    ``options`` go to SQLAlchemy's ``create_engine``, except ``background_checkpoints``
    (default True): False leaves the write-ahead log's checkpoints to the commits, as SQLite
    does by default, and starts no thread (:mod:`ratchet.sql.sqlite_checkpoint`).

    :raises ConfigurationError: ``background_checkpoints`` is not a bool.
    """
    from ratchet.domain.errors import ConfigurationError
    from ratchet.sql.sqlite import SqliteDialect
    from ratchet.sql.store import SqlStore

    engine_options = dict(options or {})
    background = engine_options.pop("background_checkpoints", True)
    if not isinstance(background, bool):
        raise ConfigurationError(
            f"store option background_checkpoints must be True or False, got {background!r}"
        )
    return SqlStore(url, SqliteDialect(background_checkpoints=background), **engine_options)


@hookimpl
def ratchet_register_stores(registry: StoreRegistry) -> None:
    registry.add("sqlite", make_sqlite_store)
