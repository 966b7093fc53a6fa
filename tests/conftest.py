"""Shared test configuration: Hypothesis profiles and common fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from ratchet.testing import FakeClock

# Per-test databases on the throwaway servers the run starts (see those modules).
pytest_plugins = ["pg_fixtures", "mysql_fixtures", "tripwire_fixtures"]

# CI: a fixed example budget, derandomised, no per-example deadline (2-core machine, shared CPU).
settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

SUPPORT = Path(__file__).parent / "support"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'jobs.db'}"


@pytest.fixture
def support_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Make ``tests/support`` importable (job modules for end-to-end tests)."""
    monkeypatch.syspath_prepend(str(SUPPORT))
    yield SUPPORT


@pytest.fixture(autouse=True)
def _heap_left_unfrozen() -> Iterator[None]:
    """The ``worker`` command freezes the start-up heap of its process; run in this process by a
    test, it would keep the test run's objects out of cycle collection for good."""
    import gc

    yield
    if gc.get_freeze_count():
        gc.unfreeze()
