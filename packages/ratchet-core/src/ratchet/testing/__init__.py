"""Test kit shipped with ratchet-core: FakeClock, polling with a deadline, the store conformance
suite, pytest plugin."""

from __future__ import annotations

from ratchet.testing.clock import FakeClock
from ratchet.testing.polling import assert_eventually, wait_until

__all__ = ["FakeClock", "assert_eventually", "wait_until"]
