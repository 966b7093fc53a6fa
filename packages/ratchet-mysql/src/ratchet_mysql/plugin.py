"""The ``ratchet`` entry-point plugin: the MySQL / MariaDB store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ratchet import hookimpl

if TYPE_CHECKING:
    from ratchet.ports import Store
    from ratchet.registry import StoreRegistry

#: URL schemes (before ``+driver``) served by the store.
STORE_SCHEMES = ("mysql", "mariadb")


def make_mysql_store(url: str, options: dict[str, Any] | None = None) -> Store:
    """A :class:`~ratchet_mysql.store.MySQLStore` for ``url``."""
    from ratchet_mysql.store import MySQLStore

    return MySQLStore(url, **(options or {}))


@hookimpl
def ratchet_register_stores(registry: StoreRegistry) -> None:
    for scheme in STORE_SCHEMES:
        registry.add(scheme, make_mysql_store)
