"""PostgreSQL for Ratchet: the store dialect and the LISTEN/NOTIFY wakeup coordinator.

Installing this distribution is all it takes: ``Ratchet("postgresql+psycopg://...")`` picks the
store by URL scheme and ``coordinator="postgres"`` picks the coordinator (both registered through
the ``ratchet`` entry-point group).
"""

from __future__ import annotations

try:  # the wheel's own copy of ratchet-core's install check (see pyproject.toml)
    from ratchet_postgres._distribution import check_adapter
except ModuleNotFoundError:  # a source checkout, where `ratchet` is the workspace's own
    from ratchet._distribution import check_adapter

__version__ = "0.2.0"

# Before anything is imported from ``ratchet``: that may be another project's package.
check_adapter("ratchet-postgres", __version__)

from ratchet_postgres.coordinator import (  # noqa: E402
    CHANNEL,
    CoordinatorState,
    PostgresClusterCoordinator,
)
from ratchet_postgres.dialect import PostgresDialect  # noqa: E402
from ratchet_postgres.store import PostgresStore, normalize_url  # noqa: E402

__all__ = [
    "CHANNEL",
    "CoordinatorState",
    "PostgresClusterCoordinator",
    "PostgresDialect",
    "PostgresStore",
    "normalize_url",
]
