"""The system clock (tests use :class:`ratchet.testing.FakeClock`)."""

from __future__ import annotations

from datetime import UTC, datetime


class SystemClock:
    """Reads the machine's clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)
