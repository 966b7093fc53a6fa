"""Runs the recurring-master conformance suite over every backend of the ``store`` fixture."""

from __future__ import annotations

from ratchet.testing.recurring_contract import RecurringStoreContract


class TestRecurringStore(RecurringStoreContract):
    pass
