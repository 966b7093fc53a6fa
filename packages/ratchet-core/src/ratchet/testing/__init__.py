"""Test kit shipped with ratchet-core: FakeClock, the store conformance suite, pytest plugin."""
