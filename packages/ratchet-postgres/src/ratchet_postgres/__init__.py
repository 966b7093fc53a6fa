"""PostgreSQL for Ratchet: the store dialect and the LISTEN/NOTIFY wakeup coordinator.

Installing this distribution is all it takes: ``Ratchet("postgresql+psycopg://...")`` picks the
store by URL scheme and ``coordinator="postgres"`` picks the coordinator (both registered through
the ``ratchet`` entry-point group).
"""

from __future__ import annotations

__version__ = "0.2.0"

from ratchet_postgres.coordinator import CHANNEL, CoordinatorState, PostgresClusterCoordinator
from ratchet_postgres.dialect import PostgresDialect
from ratchet_postgres.store import PostgresStore, normalize_url

__all__ = [
    "CHANNEL",
    "CoordinatorState",
    "PostgresClusterCoordinator",
    "PostgresDialect",
    "PostgresStore",
    "normalize_url",
]
