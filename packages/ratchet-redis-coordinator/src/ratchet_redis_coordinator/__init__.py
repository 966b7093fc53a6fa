"""Redis pub/sub wakeup coordinator for Ratchet for Python.

>>> Ratchet(db_url, coordinator="redis://localhost:6379/0?cluster=shop")  # doctest: +SKIP

The names below load :mod:`ratchet_redis_coordinator.coordinator` (and redis-py) on first use,
so that merely having the plugin installed costs an application nothing at start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

try:  # the wheel's own copy of ratchet-core's install check (see pyproject.toml)
    from ratchet_redis_coordinator._distribution import check_adapter
except ModuleNotFoundError:  # a source checkout, where `ratchet` is the workspace's own
    from ratchet._distribution import check_adapter

if TYPE_CHECKING:
    from ratchet_redis_coordinator.coordinator import (
        CoordinatorState,
        CoordinatorStats,
        RedisClusterCoordinator,
        RedisSettings,
        channel_name,
        parse_url,
        redact_url,
    )

__all__ = [
    "CoordinatorState",
    "CoordinatorStats",
    "RedisClusterCoordinator",
    "RedisSettings",
    "channel_name",
    "parse_url",
    "redact_url",
]
__version__ = "0.2.0"

# Before anything is imported from ``ratchet``: that may be another project's package.
check_adapter("ratchet-redis-coordinator", __version__)


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("ratchet_redis_coordinator.coordinator"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
