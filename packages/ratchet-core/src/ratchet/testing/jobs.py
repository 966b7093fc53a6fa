"""Run your own jobs in tests and scripts: a throwaway app, due jobs run on this thread.

:func:`make_test_app` builds an app on a new SQLite database file, :func:`run_jobs` runs every
due job synchronously (no threads), :func:`running_worker` runs a real worker for a block. The
pytest fixtures in :mod:`ratchet.testing.fixtures` are built on these.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ratchet.engine.app import Ratchet
from ratchet.engine.worker import Worker
from ratchet.ports import Clock


def make_test_app(
    allowed_modules: Sequence[str],
    directory: str | Path,
    *,
    clock: Clock | None = None,
    **options: Any,
) -> Ratchet:
    """A :class:`~ratchet.Ratchet` on a new SQLite database file in ``directory`` (migrated)."""
    path = Path(directory) / "ratchet-test-jobs.db"
    return Ratchet(
        f"sqlite:///{path}", allowed_modules=list(allowed_modules), clock=clock, **options
    )


def run_jobs(app: Ratchet, *, limit: int | None = None) -> int:
    """Run every job due now on this thread, one claim after another, until none is due (or
    ``limit`` ran); returns how many ran. Retries and delayed jobs become due when the app's
    clock reaches their time (advance a FakeClock, then call this again)."""
    worker: Worker = app.worker(concurrency=16, batch_size=16)
    return worker.run_due(limit=limit)


@contextmanager
def running_worker(app: Ratchet, **options: Any) -> Iterator[Worker]:
    """A started worker (poller, writer, heartbeat threads) that drains and stops at exit.

    Wait for what you expect with ``worker.wait_until(predicate, timeout)``; with real time,
    create the app without a FakeClock.
    """
    worker = app.worker(**options)
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()
