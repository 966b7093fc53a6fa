"""The coordinator contract over every coordinator: local, redis, (when installed) postgres, and
the shared broker coordinator over an in-memory broker (``tests/support/memory_broker.py``).

Each backend is a fixture named ``{name}_coordinator_backend`` returning a
:class:`~ratchet.testing.coordinator_contract.CoordinatorBackend`. The postgres one is a hook:
the PostgreSQL LISTEN/NOTIFY coordinator's tests define ``postgres_coordinator_backend`` (e.g. in
``tests/contract/conftest.py``), for example::

    @pytest.fixture
    def postgres_coordinator_backend(postgres_server, postgres_store_url):
        with NodeFactory(lambda: PostgresClusterCoordinator(postgres_store_url)) as factory:
            yield CoordinatorBackend(factory, broker=postgres_server)

Until it exists, the postgres cases skip (or fail when postgres is a required backend).
"""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from ratchet.adapters.local_coordinator import LocalClusterCoordinator
from ratchet.testing.coordinator_contract import (
    CoordinatorBackend,
    CoordinatorContract,
    NodeFactory,
)
from ratchet.testing.pytest_plugin import backend_unavailable

COORDINATORS = [
    pytest.param("local", id="local"),
    pytest.param("memory", id="memory"),
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
def memory_coordinator_backend() -> Iterator[CoordinatorBackend]:
    from memory_broker import MemoryBroker, memory_coordinator

    broker = MemoryBroker()
    with NodeFactory(lambda: memory_coordinator(broker, reconnect_max=0.5)) as factory:
        yield CoordinatorBackend(factory, broker)


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
    except pytest.FixtureLookupError as exc:
        if exc.argname != name:  # the hook exists but needs something missing: show that
            raise
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
