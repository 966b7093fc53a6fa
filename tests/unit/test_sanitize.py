"""The error sanitiser: a planted secret never survives, the exception class always does."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from ratchet.domain.errors import ConfigurationError
from ratchet.domain.sanitize import (
    DEFAULT_SECRET_KEYS,
    REDACTED,
    REDACTED_EMAIL,
    SanitizePolicy,
    sanitize_text,
)

POLICY = SanitizePolicy()
SECRET_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.~%+/!$*"
#: Secrets long enough that they cannot turn up by chance in the surrounding text.
secrets = st.text(SECRET_CHARS, min_size=8, max_size=40).filter(lambda s: "***" not in s)
filler = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=60
)
classes = st.sampled_from(["ValueError", "db.errors.OperationalError", "myapp.jobs.Failure"])
keys = st.sampled_from(
    [k for k in DEFAULT_SECRET_KEYS if k != "session"]
    + ["db_password", "X-Api-Key", "access_token", "client_secret", "AWS_SECRET_ACCESS_KEY"]
)


def pair(key: str, secret: str, style: int) -> str:
    return [
        f"{key}={secret}",
        f"{key}: {secret}",
        f'"{key}": "{secret}"',
        f"{key}='{secret}'",
        f"?{key}={secret}&next=1",
        f"{key} = {secret};",
    ][style]


@given(classes, filler, keys, secrets, st.integers(0, 5), filler)
def test_a_secret_pair_never_survives(
    klass: str, before: str, key: str, secret: str, style: int, after: str
) -> None:
    assume(secret not in before + after)
    text = f"{klass}: {before} {pair(key, secret, style)} {after}"
    cleaned = sanitize_text(text, POLICY)
    assert secret not in cleaned
    assert cleaned.startswith(f"{klass}: "), "the exception class is kept"


@given(
    classes,
    st.sampled_from(["postgresql", "mysql+pymysql", "https", "redis", "amqp"]),
    st.text("abcdefgh0123", min_size=1, max_size=10),
    secrets,
    filler,
)
def test_a_password_in_a_url_never_survives(
    klass: str, scheme: str, user: str, secret: str, after: str
) -> None:
    assume(secret not in after)
    text = f"{klass}: cannot reach {scheme}://{user}:{secret}@db.internal:5432/prod {after}"
    cleaned = sanitize_text(text, POLICY)
    assert secret not in cleaned
    assert f"{scheme}://{REDACTED}@db.internal:5432/prod" in cleaned, "the host stays"


@given(
    st.text("abcdefghij._+-", min_size=3, max_size=12).filter(lambda s: s[0].isalpha()),
    st.sampled_from(["example.org", "mail.example.co.uk", "corp.internal.net"]),
    filler,
)
def test_an_email_address_never_survives(local: str, domain: str, before: str) -> None:
    text = f"ValueError: {before} unknown customer {local}@{domain}"
    cleaned = sanitize_text(text, POLICY)
    assert f"{local}@{domain}" not in cleaned and REDACTED_EMAIL in cleaned


@given(secrets)
def test_bearer_tokens_never_survive(secret: str) -> None:
    assume(secret not in "HTTPError: 401 with Authorization: Bearer")
    cleaned = sanitize_text(f"HTTPError: 401 with Authorization: Bearer {secret}", POLICY)
    assert secret not in cleaned


@given(filler)
def test_the_result_is_bounded_and_storable(text: str) -> None:
    policy = SanitizePolicy(max_chars=40, max_traceback_chars=40)
    for traceback in (False, True):
        cleaned = sanitize_text(text * 3, policy, traceback=traceback)
        assert len(cleaned) <= 40 and "\x00" not in cleaned
        cleaned.encode("utf-8")


def test_a_long_traceback_keeps_its_end() -> None:
    tb = "Traceback (most recent call last):\n" + "  frame\n" * 5000 + "ValueError: the end"
    cleaned = sanitize_text(tb, POLICY, traceback=True)
    assert cleaned.startswith("...\n") and cleaned.endswith("ValueError: the end")
    assert len(cleaned) == POLICY.max_traceback_chars


def test_text_without_secrets_is_unchanged() -> None:
    text = "KeyError: 'order 42' missing in https://api.example.com/v1/orders?page=2"
    assert sanitize_text(text, POLICY) == text


def test_a_class_named_like_a_key_does_not_shield_its_value() -> None:
    assert sanitize_text("Password: hunter2", POLICY) == f"Password: {REDACTED}"
    assert sanitize_text("PasswordError: wrong", POLICY) == "PasswordError: wrong"


def test_the_policy_is_configurable() -> None:
    text = "ValueError: pin=1234 for bob@example.org at https://u:p4ss@h/x"
    keep_all = SanitizePolicy(keys=(), urls=False, emails=False)
    assert sanitize_text(text, keep_all) == text
    pins = SanitizePolicy(keys=("pin",), emails=False)
    assert (
        sanitize_text(text, pins)
        == f"ValueError: pin={REDACTED} for bob@example.org at https://{REDACTED}@h/x"
    )


@pytest.mark.parametrize(
    "fields", [{"keys": ("pass word",)}, {"keys": (3,)}, {"max_chars": 2}, {"max_chars": True}]
)
def test_bad_policies_are_configuration_errors(fields: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        SanitizePolicy(**fields)  # type: ignore[arg-type]
