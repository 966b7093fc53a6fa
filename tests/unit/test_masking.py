"""The masking policy: properties of the one function every read surface uses."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratchet.domain.masking import DEFAULT_SENSITIVE_WORDS, MASK, MaskingPolicy

POLICY = MaskingPolicy()

plain_keys = st.sampled_from(["id", "user", "amount", "region", "items", "note", "when"])
sensitive_keys = st.sampled_from(
    ["password", "db_password", "accessToken", "X-Api-Key", "client.secret", "SSN", "Cookie"]
)
keys = st.one_of(plain_keys, sensitive_keys)
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8))
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=20,
)


def sensitive_values(value: Any) -> list[Any]:
    """Every value stored under a sensitive key, anywhere in ``value``."""
    found: list[Any] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if POLICY.is_sensitive(k):
                found.append(v)
            else:
                found.extend(sensitive_values(v))
    elif isinstance(value, list):
        for item in value:
            found.extend(sensitive_values(item))
    return found


def shape(value: Any) -> Any:
    """The structure without sensitive values (what masking must keep)."""
    if isinstance(value, dict):
        return {k: "?" if POLICY.is_sensitive(k) else shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    return value


@given(documents)
def test_no_sensitive_value_survives(doc: Any) -> None:
    masked = POLICY.mask(doc)
    assert all(v == MASK for v in sensitive_values(masked))


@given(documents)
def test_everything_else_is_kept(doc: Any) -> None:
    assert shape(POLICY.mask(doc)) == shape(doc)


@given(documents)
def test_the_input_is_never_modified(doc: Any) -> None:
    before = copy.deepcopy(doc)
    POLICY.mask(doc)
    assert doc == before


@given(documents)
def test_masking_is_idempotent(doc: Any) -> None:
    once = POLICY.mask(doc)
    assert POLICY.mask(once) == once


@given(documents)
def test_nothing_to_mask_returns_the_same_object(doc: Any) -> None:
    if not sensitive_values(doc):
        assert POLICY.mask(doc) is doc


@given(documents)
def test_json_text_matches_the_value_function(doc: Any) -> None:
    text = json.dumps(doc)
    shown = POLICY.mask_json_text(text)
    assert json.loads(shown or "null") == POLICY.mask(doc)
    if not sensitive_values(doc):
        assert shown is text, "untouched text is returned as stored"


@given(documents)
def test_disabled_masks_nothing(doc: Any) -> None:
    assert MaskingPolicy(enabled=False).mask(doc) is doc


@pytest.mark.parametrize(
    ("name", "sensitive"),
    [
        ("password", True),
        ("PASSWORD", True),
        ("db_password", True),
        ("passwordHash", True),
        ("api_key", True),
        ("X-Api-Key", True),
        ("refresh.token", True),
        ("session_id", True),
        ("user", False),
        ("amount", False),
        ("keys", False),
        ("pass", False),
    ],
)
def test_field_names(name: str, sensitive: bool) -> None:
    assert POLICY.is_sensitive(name) is sensitive


def test_words_are_configurable() -> None:
    more = MaskingPolicy.with_words(["iban"])
    assert more.is_sensitive("IBAN") and more.is_sensitive("password")
    only = MaskingPolicy.with_words(["iban"], replace=True)
    assert only.is_sensitive("iban") and not only.is_sensitive("password")
    assert MaskingPolicy.with_words([]).words == DEFAULT_SENSITIVE_WORDS


def test_tuples_stay_tuples_and_text_that_is_not_json_stays() -> None:
    assert POLICY.mask(({"token": 1}, 2)) == ({"token": MASK}, 2)
    assert POLICY.mask_json_text("not json {") == "not json {"
    assert POLICY.mask_json_text(None) is None


@pytest.mark.parametrize("bad", ["password", ["", "x"], [" - "], [1]])
def test_bad_words_are_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="non-blank strings"):
        MaskingPolicy(words=bad)
