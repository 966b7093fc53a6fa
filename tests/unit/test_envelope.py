"""The encryption envelope (pure) and the AES-256-GCM cipher over it."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratchet.domain.envelope import (
    PREFIX,
    envelope_key_id,
    is_envelope,
    parse_envelope,
)
from ratchet.domain.errors import (
    ConfigurationError,
    EncryptionKeyNotFound,
    TamperedEnvelope,
    UnsupportedEnvelopeVersion,
)
from ratchet.encryption import PayloadCipher, StaticKeyProvider, generate_key
from ratchet.serialization import NO_ARGUMENTS, encode_result

K1, K2 = generate_key(), generate_key()
CIPHER = PayloadCipher(StaticKeyProvider({"k1": K1, "k2": K2}, "k2"))


@given(st.text(max_size=200))
def test_seal_then_open_round_trips(text: str) -> None:
    sealed = CIPHER.seal(text, "payload")
    assert is_envelope(sealed) and sealed.startswith(PREFIX)
    assert envelope_key_id(sealed) == "k2"
    assert CIPHER.open(sealed, "payload") == text


def test_each_seal_uses_a_fresh_nonce() -> None:
    a, b = CIPHER.seal("same", "payload"), CIPHER.seal("same", "payload")
    assert parse_envelope(a).nonce != parse_envelope(b).nonce


def test_plain_text_passes_through() -> None:
    assert CIPHER.open(NO_ARGUMENTS, "payload") == NO_ARGUMENTS
    assert not is_envelope(NO_ARGUMENTS) and envelope_key_id(NO_ARGUMENTS) is None


def test_results_can_never_look_like_an_envelope() -> None:
    with pytest.raises(Exception, match="reserved"):
        encode_result({"__ratchet__": "aead", "v": 1}, 1000)


def tamper(sealed: str, **changes: object) -> str:
    doc = json.loads(sealed)
    doc.update(changes)
    return json.dumps(doc, separators=(",", ":"))


def test_any_change_fails_authentication() -> None:
    sealed = CIPHER.seal('{"args":[1],"kwargs":{}}', "payload")
    doc = json.loads(sealed)
    flipped = bytearray(base64.b64decode(doc["ct"]))
    flipped[-1] ^= 0x80
    cases = [
        tamper(sealed, ct=base64.b64encode(bytes(flipped)).decode()),
        tamper(sealed, n=base64.b64encode(b"\0" * 12).decode()),
        tamper(sealed, kid="k1"),  # another key under another id
    ]
    for case in cases:
        with pytest.raises(TamperedEnvelope):
            CIPHER.open(case, "payload")
    with pytest.raises(TamperedEnvelope, match="result"):
        CIPHER.open(sealed, "result")  # a payload moved into a result column
    with pytest.raises(TamperedEnvelope, match="malformed"):
        CIPHER.open(tamper(sealed, ct="***"), "payload")
    with pytest.raises(TamperedEnvelope, match="not valid JSON"):
        CIPHER.open(PREFIX + ",", "payload")


def test_a_newer_envelope_version_is_refused_with_advice() -> None:
    sealed = CIPHER.seal("x", "payload")
    with pytest.raises(UnsupportedEnvelopeVersion, match="newer Ratchet"):
        CIPHER.open(tamper(sealed, v=2), "payload")
    with pytest.raises(UnsupportedEnvelopeVersion, match="algorithm"):
        CIPHER.open(tamper(sealed, alg="XC20P"), "payload")


def test_a_missing_key_names_it() -> None:
    sealed = CIPHER.seal("x", "payload")
    only_k1 = PayloadCipher(StaticKeyProvider({"k1": K1}, "k1"))
    with pytest.raises(EncryptionKeyNotFound, match="key 'k2'") as info:
        only_k1.open(sealed, "payload")
    assert info.value.key_id == "k2"


def test_a_provider_without_its_current_key_is_refused_at_once() -> None:
    class Broken:
        def current_key_id(self) -> str:
            return "gone"

        def key(self, key_id: str) -> bytes | None:
            return None

    with pytest.raises(ConfigurationError, match="does not have it"):
        PayloadCipher(Broken())
