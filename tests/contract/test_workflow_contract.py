"""Batches, chains, workflows and signals on every backend (SQLite, PostgreSQL, MariaDB)."""

from __future__ import annotations

from ratchet.testing.workflow_contract import WorkflowStoreContract


class TestWorkflowStore(WorkflowStoreContract):
    pass
