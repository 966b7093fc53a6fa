"""Runs the fleet conformance suite (affinity, T14, takeover policies) over every backend."""

from __future__ import annotations

from ratchet.testing.fleet_contract import FleetStoreContract


class TestFleetStore(FleetStoreContract):
    pass
