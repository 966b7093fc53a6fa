"""Built-in plugin: the permit-all authorization policy and the environment's encryption keys.

Both answer last (``trylast``), so any installed plugin's answer wins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ratchet import hookimpl
from ratchet.domain.authorization import PermitAll

if TYPE_CHECKING:
    from ratchet.config import RatchetConfig
    from ratchet.ports import JobAuthorizationPolicy, KeyProvider


@hookimpl(trylast=True)
def ratchet_authorization_policy(config: RatchetConfig) -> JobAuthorizationPolicy:
    return PermitAll()


@hookimpl(trylast=True)
def ratchet_key_provider(config: RatchetConfig) -> KeyProvider | None:
    """The keys of ``RATCHET_ENCRYPTION_KEYS`` (None when it is not set)."""
    from ratchet.encryption import StaticKeyProvider

    return StaticKeyProvider.from_env()
