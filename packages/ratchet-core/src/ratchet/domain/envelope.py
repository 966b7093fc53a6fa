"""The versioned envelope of an encrypted payload or result (docs/security.md).

An envelope is one JSON object stored where the plain JSON would be::

    {"__ratchet__":"aead","v":1,"kid":"2026-12","alg":"A256GCM","n":"<nonce>","ct":"<sealed>"}

``__ratchet__`` is the tag key that plain arguments and results can never hold at the top of a
dict (the serializer refuses it), so an envelope is never mistaken for user data. ``v`` is the
envelope version, ``kid`` the id of the key that sealed it, ``n`` the 96-bit nonce and ``ct``
the ciphertext with its 128-bit tag (both base64). The header (version, key id, algorithm) and
the purpose (``payload`` or ``result``) are the associated data: changing any of them, or
moving a result into a payload column, fails authentication.

Pure: building and parsing only; the cipher lives in :mod:`ratchet.encryption`.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from ratchet.domain.errors import (
    PayloadDecryptionError,
    TamperedEnvelope,
    UnsupportedEnvelopeVersion,
)

ENVELOPE_VERSION = 1
"""The version this code writes (and the newest it reads)."""
ALGORITHM = "A256GCM"
PREFIX = '{"__ratchet__":"aead"'
"""How every envelope's text starts (a cheap test before any parsing)."""
MAX_KEY_ID_LENGTH = 128
"""The ``encryption_key_id`` column's size."""
PURPOSES = ("payload", "result")


@dataclass(frozen=True)
class Envelope:
    """A parsed envelope."""

    version: int
    key_id: str
    algorithm: str
    nonce: bytes
    ciphertext: bytes

    def associated_data(self, purpose: str) -> bytes:
        """What the tag authenticates besides the ciphertext."""
        return associated_data(self.version, self.key_id, self.algorithm, purpose)

    def to_text(self) -> str:
        """The stored form (compact JSON, fixed key order)."""
        doc = {
            "__ratchet__": "aead",
            "v": self.version,
            "kid": self.key_id,
            "alg": self.algorithm,
            "n": base64.b64encode(self.nonce).decode("ascii"),
            "ct": base64.b64encode(self.ciphertext).decode("ascii"),
        }
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=True)


def associated_data(version: int, key_id: str, algorithm: str, purpose: str) -> bytes:
    """The associated data of an envelope: header fields and purpose, NUL-separated."""
    if purpose not in PURPOSES:
        raise ValueError(f"purpose must be one of {PURPOSES}, got {purpose!r}")
    return f"ratchet\0{version}\0{key_id}\0{algorithm}\0{purpose}".encode()


_LOOSE_PREFIX = re.compile(r'\{\s*"__ratchet__"\s*:\s*"aead"')


def is_envelope(text: str | None) -> bool:
    """Whether stored text is an envelope (by its start, whitespace allowed; no parsing).
    Plain arguments and results can never start this way: the serializer refuses the tag key
    in user dicts."""
    if text is None:
        return False
    if text.startswith(PREFIX):
        return True
    if text.startswith('{"'):  # a first key without space before it: the tag key or no envelope
        return text.startswith('{"__ratchet__"') and _LOOSE_PREFIX.match(text) is not None
    return text.startswith("{") and _LOOSE_PREFIX.match(text) is not None


def envelope_key_id(text: str | None) -> str | None:
    """The key id of an envelope's text, or None for plain text (or an unreadable envelope)."""
    if not is_envelope(text):
        return None
    try:
        return parse_envelope(text).key_id  # type: ignore[arg-type]
    except PayloadDecryptionError:
        return None


def check_key_id(key_id: object) -> str:
    """``key_id`` if it can name a key (1 to 128 printable ASCII characters).

    :raises ValueError: otherwise.
    """
    if not (
        isinstance(key_id, str)
        and 0 < len(key_id) <= MAX_KEY_ID_LENGTH
        and key_id.isascii()
        and key_id.isprintable()
    ):
        raise ValueError(
            f"a key id is 1 to {MAX_KEY_ID_LENGTH} printable ASCII characters, got {key_id!r}"
        )
    return key_id


def parse_envelope(text: str) -> Envelope:
    """The envelope stored as ``text``.

    :raises UnsupportedEnvelopeVersion: a version newer than this code reads, or an unknown
        algorithm.
    :raises TamperedEnvelope: text that is not a well-formed envelope.
    """
    try:
        doc: Any = json.loads(text)
    except ValueError:
        raise TamperedEnvelope(
            "the stored envelope is not valid JSON (the row was changed outside Ratchet)"
        ) from None
    if not isinstance(doc, dict) or doc.get("__ratchet__") != "aead":
        raise TamperedEnvelope("the stored text is not an encryption envelope")
    version = doc.get("v")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise TamperedEnvelope(f"envelope version {version!r} is not a version number")
    if version > ENVELOPE_VERSION:
        raise UnsupportedEnvelopeVersion(
            f"envelope version {version} was written by a newer Ratchet (this one reads up to "
            f"{ENVELOPE_VERSION}); upgrade this node, or let an upgraded node run the job"
        )
    algorithm = doc.get("alg")
    if algorithm != ALGORITHM:
        raise UnsupportedEnvelopeVersion(f"envelope algorithm {algorithm!r} is not {ALGORITHM}")
    try:
        key_id = check_key_id(doc.get("kid"))
        nonce = base64.b64decode(doc["n"], validate=True)
        ciphertext = base64.b64decode(doc["ct"], validate=True)
    except (KeyError, TypeError, ValueError, binascii.Error) as exc:
        raise TamperedEnvelope(
            f"malformed envelope ({exc}): the row was changed outside Ratchet"
        ) from None
    return Envelope(version, key_id, algorithm, nonce, ciphertext)
