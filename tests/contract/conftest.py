"""The ``store`` fixture: one parametrized fixture runs the contract over every backend."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ratchet.plugins import Plugins, make_plugin_manager

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres15", marks=pytest.mark.postgres),
    pytest.param("mysql", id="mysql-mariadb10.11", marks=pytest.mark.mysql),
    # The optional C driver (mysqlclient, ``mysql+mysqldb://``) on the same server.
    pytest.param("mysqlclient", id="mysql-mariadb10.11-mysqlclient", marks=pytest.mark.mysql),
]


@pytest.fixture
def sqlite_store_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Iterator[Any]:
    url = request.getfixturevalue(f"{request.param}_store_url")
    plugins = Plugins(make_plugin_manager())
    store = plugins.store_factory(url)(url, None)
    store.migrate()
    yield store
    store.close()
