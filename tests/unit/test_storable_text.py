"""Text every store can hold: what the scheduler writes on its own is always storable."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratchet.config import RatchetConfig
from ratchet.domain.errors import ConfigurationError
from ratchet.domain.model import Outcome, OutcomeKind
from ratchet.domain.text import MAX_ERROR_CHARS, describe_error, is_storable_text, storable_text

#: Any Python string, lone surrogates and NUL included.
ANY_TEXT = st.text(alphabet=st.characters(codec=None, blacklist_categories=()))


@given(ANY_TEXT)
def test_storable_text_is_valid_utf8_without_nul(text: str) -> None:
    stored = storable_text(text)
    assert "\x00" not in stored
    assert stored.encode("utf-8").decode("utf-8") == stored
    assert is_storable_text(stored)


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")))
def test_storable_text_leaves_storable_text_alone(text: str) -> None:
    assert is_storable_text(text)
    assert storable_text(text) is text


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        ("bad\x00nul", "bad\\x00nul"),
        ("bad \ud800 x", "bad \\ud800 x"),
        ("\udcff\x00é", "\\udcff\\x00é"),
        ("ünïcode ✓ 𝄞", "ünïcode ✓ 𝄞"),
    ],
)
def test_unstorable_characters_become_visible_escapes(text: str, stored: str) -> None:
    assert storable_text(text) == stored


@given(ANY_TEXT)
def test_outcome_errors_and_results_are_always_storable(text: str) -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    outcome = Outcome(uuid.uuid4(), 1, 1, OutcomeKind.DEAD, at, at, result=text, error=text)
    assert outcome.error is not None and is_storable_text(outcome.error)
    assert outcome.result is not None and is_storable_text(outcome.result)


@given(ANY_TEXT)
def test_described_errors_are_storable_and_bounded(message: str) -> None:
    described = describe_error(ValueError(message * 3))
    assert is_storable_text(described)
    assert len(described) <= MAX_ERROR_CHARS


@pytest.mark.parametrize("name", ["node\x00a", "node-\ud800", "", "n" * 61])
def test_a_node_name_no_store_can_hold_is_refused(name: str) -> None:
    with pytest.raises(ConfigurationError, match="node_name"):
        RatchetConfig(node_name=name)
