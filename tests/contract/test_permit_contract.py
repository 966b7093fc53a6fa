"""Runs the resource-permit conformance suite over every backend of the ``store`` fixture."""

from __future__ import annotations

from ratchet.testing.permit_contract import PermitStoreContract


class TestPermitStore(PermitStoreContract):
    pass
