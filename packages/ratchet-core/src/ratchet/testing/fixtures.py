"""Test your own jobs: an app on a throwaway SQLite database, jobs run on the test's thread.

Enable the fixtures in a ``conftest.py``::

    pytest_plugins = ["ratchet.testing.fixtures"]

and name the modules your jobs live in, either in ``pytest.ini`` / ``pyproject.toml``
(``ratchet_allowed_modules = myapp``) or by overriding the ``ratchet_allowed_modules`` fixture.
Then a test takes ``ratchet_app`` (a :class:`~ratchet.Ratchet` on a fresh database under
``tmp_path``, driven by ``ratchet_clock``, a :class:`~ratchet.testing.FakeClock`) and calls
:func:`run_jobs` to run every due job synchronously, or :func:`running_worker` for a real
worker with its threads. The helpers work without pytest too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ratchet.engine.app import Ratchet
from ratchet.testing.clock import FakeClock
from ratchet.testing.jobs import make_test_app, run_jobs, running_worker

__all__ = [
    "make_test_app",
    "ratchet_allowed_modules",
    "ratchet_app",
    "ratchet_clock",
    "run_jobs",
    "running_worker",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "ratchet_allowed_modules",
        "module prefixes whose callables the ratchet_app fixture may run as jobs",
        type="linelist",
        default=[],
    )


@pytest.fixture
def ratchet_allowed_modules(request: pytest.FixtureRequest) -> list[str]:
    """The ``ratchet_allowed_modules`` ini value; override the fixture to choose per test."""
    allowed = list(request.config.getini("ratchet_allowed_modules"))
    if not allowed:
        pytest.fail(
            "ratchet_app needs the modules your jobs live in: set ratchet_allowed_modules in "
            "pytest.ini (or [tool.pytest.ini_options]) or override the ratchet_allowed_modules "
            "fixture",
            pytrace=False,
        )
    return allowed


@pytest.fixture
def ratchet_clock() -> FakeClock:
    """The clock of ``ratchet_app``: time moves only when the test advances it."""
    return FakeClock()


@pytest.fixture
def ratchet_app(
    tmp_path: Path, ratchet_allowed_modules: list[str], ratchet_clock: FakeClock
) -> Iterator[Ratchet]:
    """An app on a fresh SQLite database for this test, closed afterwards."""
    app = make_test_app(ratchet_allowed_modules, tmp_path, clock=ratchet_clock)
    try:
        yield app
    finally:
        app.close()
