"""Plugin hooks: registers the Redis coordinator under the ``redis`` and ``rediss`` schemes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ratchet import hookimpl

if TYPE_CHECKING:
    from ratchet.ports import ClusterCoordinator, CoordinatorContext
    from ratchet.registry import CoordinatorRegistry


def _factory(spec: str, context: CoordinatorContext) -> ClusterCoordinator:
    from ratchet_redis_coordinator.coordinator import RedisClusterCoordinator

    return RedisClusterCoordinator(spec)


@hookimpl
def ratchet_register_coordinators(registry: CoordinatorRegistry) -> None:
    """``Ratchet(..., coordinator="redis://host:6379/0?cluster=name")`` (or ``rediss://``)."""
    registry.add("redis", _factory)
    registry.add("rediss", _factory)
