"""Runs the security conformance suite (caller principals, encryption key ids) over every
backend of the ``store`` fixture."""

from __future__ import annotations

from ratchet.testing.security_contract import SecurityStoreContract


class TestSecurityStore(SecurityStoreContract):
    pass
