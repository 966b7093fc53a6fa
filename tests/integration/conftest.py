"""Fixtures shared by the end-to-end tests: on SQLite, and on SQLite then PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ratchet import Ratchet


@pytest.fixture
def app(sqlite_url: str) -> Iterator[Ratchet]:
    """An app on a fresh SQLite file whose class policy allows the ``sample_jobs`` module (a
    test module may define its own ``app`` instead)."""
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"])
    yield app
    app.close()


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres15", marks=pytest.mark.postgres),
    ]
)
def sqlite_or_postgres_url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    """A fresh database on SQLite, then on the test PostgreSQL server (one test each)."""
    if request.param == "sqlite":
        return sqlite_url
    return str(request.getfixturevalue("postgres_store_url"))
