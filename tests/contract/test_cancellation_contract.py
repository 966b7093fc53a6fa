"""Runs the cancellation-request conformance suite over every backend of the ``store`` fixture."""

from __future__ import annotations

from ratchet.testing.cancellation_contract import CancellationStoreContract


class TestCancellationStore(CancellationStoreContract):
    pass
