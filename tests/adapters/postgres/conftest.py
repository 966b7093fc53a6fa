"""PostgreSQL adapter tests: a fresh database per test (see ``tests/pg_fixtures.py``), and
``ratchet worker`` subprocesses running ``pg_jobs:app`` against it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import IO

import pytest

import pg_fixtures

HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    """Make the per-test database fixtures of ``tests/pg_fixtures.py`` available."""
    if not config.pluginmanager.has_plugin("pg_fixtures"):
        config.pluginmanager.register(pg_fixtures, "pg_fixtures")


RATCHET = Path(sys.executable).with_name("ratchet")


def worker_env(url: str, coordinator: str = "local") -> dict[str, str]:
    """Environment of a worker subprocess: ``pg_jobs`` importable, bytecode cached."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    env["RATCHET_PG_TEST_URL"] = url
    env["RATCHET_PG_TEST_COORDINATOR"] = coordinator
    return env


class WorkerProcesses:
    """``ratchet worker pg_jobs:app`` subprocesses, each logging to its own file."""

    def __init__(self, url: str, directory: Path) -> None:
        self.url = url
        self.directory = directory
        self.procs: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []

    def start(self, count: int, *args: str, coordinator: str = "local") -> None:
        for _ in range(count):
            index = len(self.procs)
            log = (self.directory / f"worker-{index}.log").open("wb")
            self._logs.append(log)
            self.procs.append(
                subprocess.Popen(
                    [str(RATCHET), "worker", "pg_jobs:app", "--log-level", "INFO", *args],
                    env=worker_env(self.url, coordinator),
                    cwd=self.directory,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def assert_running(self) -> None:
        for i, p in enumerate(self.procs):
            assert p.poll() is None, (
                f"worker {i} exited with {p.returncode}:\n{self.log(i)[-3000:]}"
            )

    def stop(self, timeout: float = 60.0) -> list[int]:
        """SIGTERM every worker (they drain) and return their exit codes."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(p.wait())
        for log in self._logs:
            log.close()
        return codes

    def log(self, index: int) -> str:
        return (self.directory / f"worker-{index}.log").read_text(errors="replace")

    def logs(self) -> str:
        return "\n".join(self.log(i) for i in range(len(self.procs)))

    def kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in self._logs:
            log.close()


@pytest.fixture
def workers(postgres_store_url: str, tmp_path: Path) -> Iterator[WorkerProcesses]:
    """Worker subprocesses on this test's database (killed if a test leaves them running)."""
    procs = WorkerProcesses(postgres_store_url, tmp_path)
    yield procs
    procs.kill_all()


@pytest.fixture
def pg_jobs(monkeypatch: pytest.MonkeyPatch, postgres_store_url: str) -> ModuleType:
    """The job module, importable in this process too (its app points at this test's DB)."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv("RATCHET_PG_TEST_URL", postgres_store_url)
    import pg_jobs

    return pg_jobs
