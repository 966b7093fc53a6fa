"""Payload encryption at rest: AES-256-GCM through the ``cryptography`` package
(``pip install ratchet-core[encryption]``; docs/security.md).

:class:`PayloadCipher` seals the JSON of a job's arguments (and of its result) into a versioned
envelope (:mod:`ratchet.domain.envelope`) with the key a :class:`~ratchet.ports.KeyProvider`
names as current, and opens an envelope with whichever key its id names, so that jobs stored
before a rotation still run. Text that is not an envelope passes through unchanged: rows
written before encryption was turned on still decode.

Only this module imports ``cryptography``, and only when a cipher is created.
"""

from __future__ import annotations

import base64
import binascii
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ratchet.domain.envelope import (
    ALGORITHM,
    ENVELOPE_VERSION,
    Envelope,
    associated_data,
    check_key_id,
    is_envelope,
    parse_envelope,
)
from ratchet.domain.errors import (
    ConfigurationError,
    EncryptionKeyNotFound,
    EncryptionUnavailable,
    TamperedEnvelope,
)

if TYPE_CHECKING:
    from ratchet.ports import KeyProvider

KEY_BYTES = 32
NONCE_BYTES = 12
KEYS_ENV = "RATCHET_ENCRYPTION_KEYS"
"""``id=base64key,id2=base64key``: the keys of :meth:`StaticKeyProvider.from_env`."""
CURRENT_KEY_ENV = "RATCHET_ENCRYPTION_KEY_ID"
"""The id of the current key (default: the last one of :data:`KEYS_ENV`)."""


def generate_key() -> str:
    """A new random 256-bit key, base64 encoded (for :data:`KEYS_ENV` or a secret store)."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode("ascii")


def _key_bytes(key_id: str, key: bytes | str) -> bytes:
    if isinstance(key, str):
        try:
            key = base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError):
            raise ConfigurationError(f"key {key_id!r} is not valid base64") from None
    if not isinstance(key, bytes) or len(key) != KEY_BYTES:
        raise ConfigurationError(
            f"key {key_id!r} must be {KEY_BYTES} bytes (AES-256), got "
            f"{len(key) if isinstance(key, bytes) else type(key).__name__}"
        )
    return key


class StaticKeyProvider:
    """Keys held in memory: ``{key_id: key}`` (32 raw bytes or their base64) and the id of
    the current one. Rotate by adding a new key and making it current; keep the old ones until
    ``ratchet keys report`` shows no job needs them.

    :raises ConfigurationError: a key id or key is malformed, or ``current`` is not among them.
    """

    def __init__(self, keys: Mapping[str, bytes | str], current: str) -> None:
        self._keys: dict[str, bytes] = {}
        for key_id, key in keys.items():
            try:
                check_key_id(key_id)
            except ValueError as exc:
                raise ConfigurationError(str(exc)) from None
            self._keys[key_id] = _key_bytes(key_id, key)
        if current not in self._keys:
            raise ConfigurationError(
                f"the current key id {current!r} is not among the keys {sorted(self._keys)}"
            )
        self._current = current

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> StaticKeyProvider | None:
        """The keys in ``RATCHET_ENCRYPTION_KEYS`` (None when it is unset or empty).

        :raises ConfigurationError: the variable is malformed.
        """
        env = os.environ if environ is None else environ
        spec = env.get(KEYS_ENV, "").strip()
        if not spec:
            return None
        keys: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            key_id, sep, key = part.partition("=")
            if not sep:
                raise ConfigurationError(
                    f"{KEYS_ENV} must be id=base64key pairs separated by commas; "
                    f"{key_id[:20]!r}... has no '='"
                )
            keys[key_id.strip()] = key.strip()
        current = env.get(CURRENT_KEY_ENV, "").strip() or list(keys)[-1]
        return cls(keys, current)

    def current_key_id(self) -> str:
        return self._current

    def key(self, key_id: str) -> bytes | None:
        return self._keys.get(key_id)

    def key_ids(self) -> list[str]:
        """Every key id held."""
        return list(self._keys)


class PayloadCipher:
    """Seals and opens envelopes with a key provider's keys.

    :raises EncryptionUnavailable: ``cryptography`` is not installed.
    :raises ConfigurationError: the provider has no current key.
    """

    def __init__(self, provider: KeyProvider) -> None:
        try:
            from cryptography.exceptions import InvalidTag
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError:
            raise EncryptionUnavailable(
                "payload encryption needs the cryptography package: "
                "pip install 'ratchet-core[encryption]'"
            ) from None
        self._aesgcm = AESGCM
        self._invalid_tag = InvalidTag
        self.provider = provider
        self._ciphers: dict[tuple[str, bytes], Any] = {}
        self._lock = threading.Lock()
        self.current_key_id()  # fail at startup, not at the first submit

    def current_key_id(self) -> str:
        """The provider's current key id, checked.

        :raises ConfigurationError: the id is malformed or the provider lacks that key.
        """
        key_id = self.provider.current_key_id()
        try:
            check_key_id(key_id)
        except ValueError as exc:
            raise ConfigurationError(f"the key provider's current key id: {exc}") from None
        if self.provider.key(key_id) is None:
            raise ConfigurationError(
                f"the key provider names {key_id!r} as its current key but does not have it"
            )
        return key_id

    def _cipher(self, key_id: str, what: str) -> Any:
        key = self.provider.key(key_id)
        if key is None:
            raise EncryptionKeyNotFound(key_id, what)
        key = _key_bytes(key_id, key)
        found = self._ciphers.get((key_id, key))
        if found is None:
            found = self._aesgcm(key)
            with self._lock:
                if len(self._ciphers) > 1000:
                    self._ciphers.clear()
                self._ciphers[(key_id, key)] = found
        return found

    def seal(self, text: str, purpose: str) -> str:
        """``text`` sealed with the current key, as an envelope's text."""
        key_id = self.current_key_id()
        nonce = os.urandom(NONCE_BYTES)
        aad = associated_data(ENVELOPE_VERSION, key_id, ALGORITHM, purpose)
        sealed = self._cipher(key_id, purpose).encrypt(nonce, text.encode(), aad)
        return Envelope(ENVELOPE_VERSION, key_id, ALGORITHM, nonce, sealed).to_text()

    def open(self, text: str, purpose: str) -> str:
        """The plain text of an envelope (text that is no envelope is returned as it is).

        :raises EncryptionKeyNotFound: the provider lacks the envelope's key.
        :raises TamperedEnvelope: the envelope does not authenticate.
        :raises UnsupportedEnvelopeVersion: written by a newer Ratchet.
        """
        if not is_envelope(text):
            return text
        envelope = parse_envelope(text)
        cipher = self._cipher(envelope.key_id, purpose)
        try:
            plain = cipher.decrypt(
                envelope.nonce, envelope.ciphertext, envelope.associated_data(purpose)
            )
        except self._invalid_tag:
            raise TamperedEnvelope(
                f"the stored {purpose} (key {envelope.key_id!r}) failed authentication: it was "
                "changed outside Ratchet, or the key under that id is not the one that sealed it"
            ) from None
        try:
            return bytes(plain).decode()
        except UnicodeDecodeError:
            raise TamperedEnvelope(f"the stored {purpose} decrypted to invalid text") from None
