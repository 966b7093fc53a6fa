"""Fixtures of the Redis coordinator tests (the server itself is the plugin's ``redis_server``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent


def cluster_url(server: Any, **query: object) -> str:
    """The server's URL with a fresh cluster name (and fast reconnects unless overridden)."""
    params = {"cluster": f"t-{uuid.uuid4().hex[:12]}", "reconnect_max": 0.5, **query}
    return f"{server.url()}?" + "&".join(f"{k}={v}" for k, v in params.items())


@pytest.fixture
def redis_url(redis_server: Any) -> str:
    """A coordinator URL on the session Redis with a cluster of this test's own."""
    return cluster_url(redis_server)


@pytest.fixture
def make_coordinator(redis_url: str) -> Iterator[Callable[..., Any]]:
    """``make_coordinator(url=redis_url, **kwargs)``: coordinators closed after the test."""
    from ratchet_redis_coordinator import RedisClusterCoordinator

    made: list[Any] = []

    def make(url: str | None = None, **kwargs: Any) -> Any:
        coordinator = RedisClusterCoordinator(url or redis_url, **kwargs)
        made.append(coordinator)
        return coordinator

    try:
        yield make
    finally:
        for coordinator in made:
            coordinator.close()


@pytest.fixture
def stoppable_redis(redis_server: Any) -> Iterator[Any]:
    """The session Redis, for tests that stop it; it is running again after the test."""
    if not hasattr(redis_server, "stop"):
        pytest.skip("N/A: an external Redis (RATCHET_TEST_REDIS_URL) cannot be stopped")
    try:
        yield redis_server
    finally:
        if not redis_server.running:
            redis_server.start()


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The ``redis_jobs`` module, imported under the name worker subprocesses use."""
    import importlib

    monkeypatch.syspath_prepend(str(HERE))
    return importlib.import_module("redis_jobs")
