"""A clock that only moves when told to."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta


class FakeClock:
    """Deterministic time for tests: starts at ``start`` and moves with :meth:`advance`."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise ValueError("FakeClock needs an aware start time")
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta | float) -> datetime:
        """Move forward by ``delta`` (seconds if a number); returns the new time."""
        step = delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        if step < timedelta(0):
            raise ValueError("time does not go backwards; use set() to jump")
        with self._lock:
            self._now += step
            return self._now

    def set(self, when: datetime) -> None:
        """Jump to ``when`` (forwards or backwards: clock jumps are part of what tests cover)."""
        with self._lock:
            self._now = when
