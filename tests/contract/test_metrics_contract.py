"""Runs the queue-gauge conformance suite over every backend of the ``store`` fixture."""

from __future__ import annotations

from ratchet.testing.metrics_contract import QueueGaugeStoreContract


class TestQueueGaugeStore(QueueGaugeStoreContract):
    pass
