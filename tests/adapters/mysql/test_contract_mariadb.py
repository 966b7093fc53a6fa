"""The store conformance suite on MariaDB 10.11 (the server the test run starts)."""

from __future__ import annotations

from ratchet.testing.store_contract import StoreContract


class TestStoreContractMariaDB1011(StoreContract):
    pass
