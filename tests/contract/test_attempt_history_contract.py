"""Runs the attempt history conformance suite over every backend."""

from __future__ import annotations

from ratchet.testing.attempt_history_contract import AttemptHistoryContract


class TestAttemptHistory(AttemptHistoryContract):
    pass
