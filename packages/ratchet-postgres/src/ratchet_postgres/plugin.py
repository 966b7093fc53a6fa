"""The ``ratchet`` entry-point plugin: the PostgreSQL store and the ``postgres`` coordinator."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ratchet import hookimpl

if TYPE_CHECKING:
    from ratchet.ports import ClusterCoordinator, CoordinatorContext, Store
    from ratchet.registry import CoordinatorRegistry, StoreRegistry

#: URL schemes (before ``+driver``) served by the store.
STORE_SCHEMES = ("postgresql", "postgres")
#: Names and URL schemes that select the LISTEN/NOTIFY coordinator.
COORDINATOR_NAMES = ("postgres", "postgresql", "postgresql+psycopg")


def make_postgres_store(url: str, options: dict[str, Any] | None = None) -> Store:
    """A :class:`~ratchet_postgres.store.PostgresStore` for ``url``."""
    from ratchet_postgres.store import PostgresStore

    return PostgresStore(url, **(options or {}))


def make_postgres_coordinator(spec: str, context: CoordinatorContext) -> ClusterCoordinator:
    """A :class:`~ratchet_postgres.coordinator.PostgresClusterCoordinator`.

    ``spec`` is ``postgres`` (use the app's store database) or a ``postgresql://`` URL.
    """
    from ratchet.domain.errors import ConfigurationError
    from ratchet_postgres.coordinator import PostgresClusterCoordinator
    from ratchet_postgres.store import split_pgbouncer, split_serialize_claims

    if "://" in spec:
        url = spec
    else:
        url = context.store_url or ""
        if not url.split(":", 1)[0].startswith("postgres"):
            raise ConfigurationError(
                "coordinator='postgres' needs a PostgreSQL store, or a postgresql:// URL as the "
                f"coordinator spec (the store is {url or 'unknown'!r})"
            )
    url, pgbouncer = split_pgbouncer(url)
    url, _ = split_serialize_claims(url)  # the store's switch: libpq would refuse it
    if pgbouncer == "transaction":
        raise ConfigurationError(
            "the postgres coordinator LISTENs on a connection of its own for as long as the "
            "node runs, which PgBouncer in transaction pooling cannot keep: give the coordinator "
            "a direct postgresql:// URL to the server (coordinator='postgresql://...'), or use "
            "the Redis coordinator (see docs/deployment.md#pgbouncer)"
        )
    return PostgresClusterCoordinator(url)


@hookimpl
def ratchet_register_stores(registry: StoreRegistry) -> None:
    for scheme in STORE_SCHEMES:
        registry.add(scheme, make_postgres_store)


@hookimpl
def ratchet_register_coordinators(registry: CoordinatorRegistry) -> None:
    for name in COORDINATOR_NAMES:
        registry.add(name, make_postgres_coordinator)
