"""Plugin hooks: registers the Redis coordinator under the ``redis`` and ``rediss`` schemes."""

from __future__ import annotations

from typing import Any

from ratchet import hookimpl


def _factory(spec: str, context: dict[str, Any] | None = None) -> Any:
    from ratchet_redis_coordinator.coordinator import RedisClusterCoordinator

    return RedisClusterCoordinator(spec)


@hookimpl
def ratchet_register_coordinators(registry: Any) -> None:
    """``Ratchet(..., coordinator="redis://host:6379/0?cluster=name")`` (or ``rediss://``)."""
    registry.add("redis", _factory)
    registry.add("rediss", _factory)
