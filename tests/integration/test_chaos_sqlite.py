"""Chaos on SQLite with real worker processes on one machine: SIGKILL, and SIGSTOP past the
deadlines then SIGCONT, while every job records ``(job id, epoch)`` through a fencing token.

At the end every job is terminal, every SUCCEEDED job's result comes from its final epoch, no
write from a stale epoch was accepted (by the store or by the side-effect resource), and only
resumed zombies were ever fenced out. The CI run is small; the full one is marked ``slow``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from chaos import run_chaos

from ratchet import Ratchet

#: Deadlines in seconds. Dn is wide: the processes share one SQLite write lock on two cores,
#: and a heartbeat may wait seconds for it (a false death would fence a live node). D1 + D2 is
#: wide too: a process frozen inside a write holds that lock until the driver sees it (it
#: probes the lock and resumes the process if held) and nobody's checkpoint lands meanwhile.
ARGS = (
    "--heartbeat", "0.5",
    "--orphan-grace", "6",
    "--watcher-interval", "0.5",
    "--running-stall", "5",
    "--timed-out-grace", "5",
    "--takeover-window", "60",
    "--max-takeovers", "10",
    "--prefetch", "1",
)  # fmt: skip


@pytest.fixture
def app(sqlite_url: str) -> Iterator[Ratchet]:
    app = Ratchet(sqlite_url, allowed_modules=["chaos_jobs"])
    yield app
    app.close()


def test_chaos_sqlite_processes(app: Ratchet, sqlite_url: str, tmp_path: Path) -> None:
    figures = run_chaos(
        app,
        sqlite_url,
        tmp_path,
        workers=3,
        jobs=300,
        kills=1,
        freezes=1,
        worker_args=("--concurrency", "3", *ARGS),
        freeze_seconds=12,  # past Dn and D1 + D2
        step_ms=30,
    )
    assert figures["takeovers"] > 0


@pytest.mark.slow
def test_chaos_sqlite_processes_full(app: Ratchet, sqlite_url: str, tmp_path: Path) -> None:
    figures = run_chaos(
        app,
        sqlite_url,
        tmp_path,
        workers=4,
        jobs=5000,
        kills=3,
        freezes=3,
        worker_args=("--concurrency", "4", *ARGS),
        freeze_seconds=12,  # past Dn and D1 + D2
        timeout=900,
    )
    assert figures["takeovers"] > 0
