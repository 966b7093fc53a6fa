"""Runs the retention, dead-letter and job-log conformance suite over every backend."""

from __future__ import annotations

from ratchet.testing.retention_contract import RetentionStoreContract


class TestRetentionStore(RetentionStoreContract):
    pass
