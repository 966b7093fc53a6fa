"""Jobs and the app of the Redis wakeup tests (imported by worker subprocesses as ``redis_jobs``).

The app is built on first access to ``redis_jobs.app`` (``ratchet worker redis_jobs:app``) from
``RATCHET_TEST_DB_URL`` and ``RATCHET_TEST_COORDINATOR``; importing the module for its jobs
builds nothing.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ratchet import Ratchet

_app: Ratchet | None = None


def now_ns() -> int:
    """CLOCK_MONOTONIC in nanoseconds: one clock for every process of this machine."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def record_start(path: str, tag: str) -> None:
    """Append ``tag start_ns pid`` to ``path`` the moment the job starts."""
    line = f"{tag} {now_ns()} {os.getpid()}\n"
    with open(path, "a", encoding="utf-8") as file:
        file.write(line)


def read_starts(path: str) -> dict[str, tuple[int, int]]:
    """``tag -> (start_ns, pid)`` of every recorded start."""
    starts: dict[str, tuple[int, int]] = {}
    try:
        with open(path, encoding="utf-8") as file:
            for line in file:
                parts = line.split()
                if len(parts) == 3:
                    starts[parts[0]] = (int(parts[1]), int(parts[2]))
    except FileNotFoundError:
        pass
    return starts


def make_app(db_url: str, coordinator: str, **options: Any) -> Ratchet:
    """An app that may run this module's jobs."""
    return Ratchet(db_url, allowed_modules=[__name__], coordinator=coordinator, **options)


def __getattr__(name: str) -> Any:
    global _app
    if name == "app":
        if _app is None:
            _app = make_app(
                os.environ["RATCHET_TEST_DB_URL"], os.environ["RATCHET_TEST_COORDINATOR"]
            )
        return _app
    raise AttributeError(name)
