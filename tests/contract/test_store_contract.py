"""Runs the shipped store conformance suite over every backend."""

from __future__ import annotations

from ratchet.testing.store_contract import StoreContract


class TestStore(StoreContract):
    pass
