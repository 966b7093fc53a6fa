"""MySQL / MariaDB adapter tests: every test here needs the server the test run starts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ratchet.plugins import Plugins, make_plugin_manager

HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    # Registers the fixtures once, whether or not tests/conftest.py lists it in pytest_plugins.
    config.pluginmanager.import_plugin("mysql_fixtures")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.mysql)


@pytest.fixture
def store(mysql_store_url: str) -> Iterator[Any]:
    """The contract suite's store, chosen through the plugin registry as users get it."""
    plugins = Plugins(make_plugin_manager())
    store = plugins.store_factory(mysql_store_url)(mysql_store_url, None)
    store.migrate()
    yield store
    store.close()
