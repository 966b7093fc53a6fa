"""The coordinator contract over every coordinator: local, redis and (when installed) postgres.

Each backend is a fixture named ``{name}_coordinator_backend`` returning a
:class:`CoordinatorBackend`. The postgres one is a hook: whoever owns the PostgreSQL
LISTEN/NOTIFY coordinator defines ``postgres_coordinator_backend`` (e.g. in
``tests/contract/conftest.py``); until then its cases skip (or fail when postgres is required).
"""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from ratchet.adapters.local_coordinator import LocalClusterCoordinator
from ratchet.testing.coordinator_contract import CoordinatorContract, NodeFactory
from ratchet.testing.pytest_plugin import backend_unavailable


@dataclass
class CoordinatorBackend:
    """What the contract needs from one coordinator implementation."""

    factory: NodeFactory
    broker: Any = None
    """An object with ``restart()``, or None (in-process: nothing to restart)."""


COORDINATORS = [
    pytest.param("local", id="local"),
    pytest.param("redis", id="redis", marks=pytest.mark.redis),
]
if importlib.util.find_spec("ratchet_postgres") is not None:
    COORDINATORS.append(pytest.param("postgres", id="postgres", marks=pytest.mark.postgres))


@pytest.fixture
def local_coordinator_backend() -> Iterator[CoordinatorBackend]:
    # In-process: every "node" of one process shares the app's coordinator.
    shared = LocalClusterCoordinator()
    with NodeFactory(lambda: shared) as factory:
        yield CoordinatorBackend(factory)


@pytest.fixture
def redis_coordinator_backend(redis_server: Any) -> Iterator[CoordinatorBackend]:
    from ratchet_redis_coordinator import RedisClusterCoordinator

    # A cluster of its own per test: nodes of other tests never hear these hints.
    url = f"{redis_server.url()}?cluster=contract-{uuid.uuid4().hex[:12]}&reconnect_max=0.5"
    broker = redis_server if hasattr(redis_server, "restart") else None
    with NodeFactory(lambda: RedisClusterCoordinator(url)) as factory:
        yield CoordinatorBackend(factory, broker)


@pytest.fixture(params=COORDINATORS)
def coordinator_backend(request: pytest.FixtureRequest) -> CoordinatorBackend:
    name = f"{request.param}_coordinator_backend"
    try:
        backend: CoordinatorBackend = request.getfixturevalue(name)
    except pytest.FixtureLookupError:
        backend_unavailable(request.config, request.param, f"no fixture {name!r} is defined yet")
    return backend


@pytest.fixture
def coordinator_factory(coordinator_backend: CoordinatorBackend) -> NodeFactory:
    return coordinator_backend.factory


@pytest.fixture
def broker(coordinator_backend: CoordinatorBackend) -> Any:
    return coordinator_backend.broker


class TestCoordinator(CoordinatorContract):
    pass
