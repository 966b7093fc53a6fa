"""Test kit shipped with ratchet-core: FakeClock, the store conformance suite, pytest plugin."""

from __future__ import annotations

from ratchet.testing.clock import FakeClock

__all__ = ["FakeClock"]
