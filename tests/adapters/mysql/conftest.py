"""MySQL / MariaDB adapter tests: every test here needs the server the test run starts.

The conformance suite runs on MariaDB from ``tests/contract`` (param ``mysql-mariadb10.11``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    # Registers the fixtures once, whether or not tests/conftest.py lists it in pytest_plugins.
    config.pluginmanager.import_plugin("mysql_fixtures")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.mysql)
