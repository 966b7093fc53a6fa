"""Fixtures shared by the end-to-end tests on SQLite."""

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
