"""Runs the query API conformance suite over every backend of the ``store`` fixture."""

from __future__ import annotations

from ratchet.testing.query_contract import QueryStoreContract


class TestQueryStore(QueryStoreContract):
    pass
