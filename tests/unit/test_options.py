"""JobOptions validation and tag normalisation."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratchet.domain.errors import InvalidJobOptions
from ratchet.domain.lifecycle import JobPriority
from ratchet.domain.options import (
    MAX_TAG_LENGTH,
    MAX_TIMEOUT,
    BackoffPolicy,
    JobOptions,
    normalize_tags,
    validate_option_text,
)


def test_defaults() -> None:
    options = JobOptions()
    assert options.priority is JobPriority.NORMAL
    assert options.max_retries == 0
    assert options.backoff is BackoffPolicy.NONE
    assert options.backoff_delay == timedelta(0)
    assert options.timeout is None
    assert options.tags == ()
    assert options.params == {}
    assert options.immediate is False


def test_options_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        JobOptions().max_retries = 3  # type: ignore[misc]


def test_invalid_options_are_value_errors() -> None:
    assert issubclass(InvalidJobOptions, ValueError)


# --------------------------------------------------------------------------- retries


@pytest.mark.parametrize("value", [-1, -100, True, False, 1.0, "3", None])
def test_bad_max_retries_are_refused(value: Any) -> None:
    with pytest.raises(InvalidJobOptions, match="max_retries"):
        JobOptions(max_retries=value)


@pytest.mark.parametrize("value", [0, 1, 25, 10_000])
def test_good_max_retries(value: int) -> None:
    assert JobOptions(max_retries=value).max_retries == value


# --------------------------------------------------------------------------- priority


@pytest.mark.parametrize("value", [0, 1, 2, 3, 4])
def test_int_priorities_become_job_priorities(value: int) -> None:
    priority = JobOptions(priority=value).priority  # type: ignore[arg-type]
    assert isinstance(priority, JobPriority)
    assert priority == value


@pytest.mark.parametrize("value", [-1, 5, 99, "HIGH", "high", "", 2.5, None])
def test_bad_priorities_are_refused(value: Any) -> None:
    with pytest.raises(InvalidJobOptions, match="priority"):
        JobOptions(priority=value)


# --------------------------------------------------------------------------- backoff


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (BackoffPolicy.FIXED, BackoffPolicy.FIXED),
        ("EXPONENTIAL", BackoffPolicy.EXPONENTIAL),
        ("exponential", BackoffPolicy.EXPONENTIAL),
        ("Fixed", BackoffPolicy.FIXED),
        ("none", BackoffPolicy.NONE),
    ],
)
def test_backoff_names_are_case_insensitive(value: Any, expected: BackoffPolicy) -> None:
    assert JobOptions(backoff=value).backoff is expected


@pytest.mark.parametrize("value", ["LINEAR", "", "exp", " fixed", 2])
def test_bad_backoff_is_refused(value: Any) -> None:
    with pytest.raises(InvalidJobOptions, match="backoff"):
        JobOptions(backoff=value)


@pytest.mark.parametrize("value", [timedelta(microseconds=-1), timedelta(days=-1), 5, 1.5, None])
def test_bad_backoff_delay_is_refused(value: Any) -> None:
    with pytest.raises(InvalidJobOptions, match="backoff delay"):
        JobOptions(backoff_delay=value)


def test_zero_and_long_backoff_delays_are_accepted() -> None:
    assert JobOptions(backoff_delay=timedelta(0)).backoff_delay == timedelta(0)
    assert JobOptions(backoff_delay=timedelta(days=7)).backoff_delay == timedelta(days=7)


# --------------------------------------------------------------------------- timeout


@pytest.mark.parametrize(
    "value", [timedelta(0), timedelta(microseconds=-1), timedelta(seconds=-30), 30, 30.0]
)
def test_zero_negative_or_untyped_timeouts_are_refused(value: Any) -> None:
    with pytest.raises(InvalidJobOptions, match="timeout"):
        JobOptions(timeout=value)


def test_timeout_upper_bound() -> None:
    assert JobOptions(timeout=MAX_TIMEOUT).timeout == MAX_TIMEOUT
    with pytest.raises(InvalidJobOptions, match="timeout"):
        JobOptions(timeout=MAX_TIMEOUT + timedelta(seconds=1))


def test_positive_timeout_and_none_are_accepted() -> None:
    assert JobOptions(timeout=timedelta(microseconds=1)).timeout == timedelta(microseconds=1)
    assert JobOptions(timeout=None).timeout is None


# --------------------------------------------------------------------------- tags


def test_tags_are_trimmed_lower_cased_deduplicated_and_blanks_dropped() -> None:
    options = JobOptions(tags=(" Billing ", "billing", "", "   ", "EU", "eu ", "Nightly"))
    assert options.tags == ("billing", "eu", "nightly")


def test_tags_accept_any_iterable() -> None:
    assert JobOptions(tags=["B", "a"]).tags == ("b", "a")  # type: ignore[arg-type]
    assert normalize_tags(t for t in ("X", "y")) == ("x", "y")


def test_tag_length_limit_applies_after_trimming() -> None:
    longest = "a" * MAX_TAG_LENGTH
    assert JobOptions(tags=(f"  {longest}  ",)).tags == (longest,)
    with pytest.raises(InvalidJobOptions, match="64"):
        JobOptions(tags=("a" * (MAX_TAG_LENGTH + 1),))


@pytest.mark.parametrize("tag", [1, None, b"bytes"])
def test_non_string_tags_are_refused(tag: Any) -> None:
    with pytest.raises(InvalidJobOptions, match="tags"):
        JobOptions(tags=("ok", tag))


def test_a_bare_string_is_not_split_into_character_tags() -> None:
    with pytest.raises(InvalidJobOptions):
        JobOptions(tags="urgent")  # type: ignore[arg-type]


tag_text = st.text(alphabet=st.sampled_from("abcXYZ-_.:ÄéÖß 0123\t"), max_size=70)


@given(tags=st.lists(tag_text, max_size=12))
def test_tag_normalisation_properties(tags: list[str]) -> None:
    try:
        result = normalize_tags(tags)
    except InvalidJobOptions:
        assert any(len(t.strip().lower()) > MAX_TAG_LENGTH for t in tags)
        return
    expected: list[str] = []
    for tag in tags:
        norm = tag.strip().lower()
        if norm and norm not in expected:
            expected.append(norm)
    assert list(result) == expected
    assert len(set(result)) == len(result)
    assert all(t and len(t) <= MAX_TAG_LENGTH for t in result)
    assert normalize_tags(result) == result


# --------------------------------------------------------------------------- params


def test_params_are_copied() -> None:
    source = {"tenant": "acme"}
    options = JobOptions(params=source)
    source["tenant"] = "evil"
    assert options.params == {"tenant": "acme"}


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"": "x"}, "keys"),
        ({"  ": "x"}, "keys"),
        ({1: "x"}, "keys"),
        ({"k": 1}, "string"),
        ({"k": None}, "string"),
    ],
)
def test_bad_params_are_refused(params: dict[Any, Any], match: str) -> None:
    with pytest.raises(InvalidJobOptions, match=match):
        JobOptions(params=params)


def test_empty_string_param_values_are_allowed() -> None:
    assert JobOptions(params={"k": ""}).params == {"k": ""}


# --------------------------------------------------------------------------- option text


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("a\x00b", r"tag 'a\\x00b' contains a NUL character \(U\+0000\) at position 1"),
        ("\x00", "NUL character"),
        ("ok\ud800", r"lone surrogate \(U\+D800\) at position 2"),
        ("é\udcff", r"lone surrogate \(U\+DCFF\) at position 1"),
        ("x" * 50 + "\x00", r"'x{40}'\.\.\. contains a NUL"),
        (7, "tag must be a string, got int"),
    ],
)
def test_text_no_store_can_keep_is_refused_with_its_position(value: Any, message: str) -> None:
    with pytest.raises(InvalidJobOptions, match=message) as info:
        validate_option_text(value, "tag")
    str(info.value).encode()  # the message itself is valid text


@pytest.mark.parametrize("value", ["", "plain", "Café", "東京", "🎉 party", "tab\tand\nnewline"])
def test_any_other_text_is_kept_as_it_is(value: str) -> None:
    assert validate_option_text(value, "tag") is value


@given(st.text())
def test_valid_unicode_without_nul_is_always_kept(value: str) -> None:
    if "\x00" in value:
        with pytest.raises(InvalidJobOptions, match="NUL"):
            validate_option_text(value, "x")
    else:
        assert validate_option_text(value, "x") == value


@pytest.mark.parametrize("bad", ["a\x00", "a\udc80"])
def test_tags_and_params_refuse_text_no_store_can_keep(bad: str) -> None:
    with pytest.raises(InvalidJobOptions, match=r"^tag "):
        normalize_tags(["ok", bad])
    with pytest.raises(InvalidJobOptions, match=r"^param name "):
        JobOptions(params={bad: "v"})
    with pytest.raises(InvalidJobOptions, match=r"^param 'k' "):
        JobOptions(params={"k": bad})
