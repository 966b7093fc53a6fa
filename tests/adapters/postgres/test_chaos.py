"""Chaos on PostgreSQL with real worker processes: SIGKILL, and SIGSTOP past the deadlines then
SIGCONT, while every job records ``(job id, epoch)`` through a fencing token (in the same
database).

At the end every job is terminal, every SUCCEEDED job's result comes from its final epoch, no
write from a stale epoch was accepted (by the store or by the side-effect resource), and every
``FencedOut`` was logged by a resumed zombie. The CI run is bounded (three workers, 500 jobs,
one SIGKILL, one SIGSTOP/SIGCONT); the full run (four workers, 5,000 jobs) is ``slow``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ratchet import Ratchet

SUPPORT = Path(__file__).resolve().parents[2] / "support"
if str(SUPPORT) not in sys.path:  # chaos helpers and jobs live with the other process helpers
    sys.path.insert(0, str(SUPPORT))

from chaos import run_chaos  # noqa: E402

pytestmark = pytest.mark.postgres

#: Deadlines in seconds: wide enough that a live node on a busy two-core machine (four workers,
#: the server and the test on two cores) is never mistaken for a stalled or dead one.
ARGS = (
    "--heartbeat", "0.5",
    "--orphan-grace", "4",
    "--watcher-interval", "0.5",
    "--running-stall", "3",
    "--timed-out-grace", "3",
    "--takeover-window", "60",
    "--max-takeovers", "10",
    "--prefetch", "2",
)  # fmt: skip


@pytest.fixture
def app(postgres_store_url: str) -> Iterator[Ratchet]:
    app = Ratchet(postgres_store_url, allowed_modules=["chaos_jobs"])
    yield app
    app.close()


def test_chaos_postgres_processes(app: Ratchet, postgres_store_url: str, tmp_path: Path) -> None:
    figures = run_chaos(
        app,
        postgres_store_url,
        tmp_path,
        workers=3,
        jobs=500,
        kills=1,
        freezes=1,
        worker_args=("--concurrency", "6", *ARGS),
        freeze_seconds=8,  # past Dn and D1 + D2
        effects=postgres_store_url,
        step_ms=20,
    )
    assert figures["takeovers"] > 0


@pytest.mark.slow
def test_chaos_postgres_processes_full(
    app: Ratchet, postgres_store_url: str, tmp_path: Path
) -> None:
    figures = run_chaos(
        app,
        postgres_store_url,
        tmp_path,
        workers=4,
        jobs=5000,
        kills=4,
        freezes=4,
        worker_args=("--concurrency", "8", *ARGS),
        freeze_seconds=8,  # past Dn and D1 + D2
        effects=postgres_store_url,
        timeout=900,
    )
    assert figures["takeovers"] > 0
