"""JSON payloads: exact round trips for the supported types, clear refusals for the rest."""

from __future__ import annotations

import enum
import http
import json
import sys
import uuid
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratchet.adapters.class_policy import PackagePrefixClassPolicy
from ratchet.domain.errors import (
    ClassPolicyViolation,
    PayloadDecodeError,
    PayloadTooLargeError,
    ResultTooLargeError,
    UnserializableArgument,
)
from ratchet.domain.retry import is_do_not_retry
from ratchet.serialization import (
    MAX_NESTING,
    EnumPolicy,
    decode_payload,
    decode_result,
    encode_payload,
    encode_result,
    refuse_enums,
)
from tripwire_fixtures import Tripwire


class Mood(enum.Enum):
    CALM = "calm"
    BUSY = 2


#: The class policy of an app allowing this module only.
ENUMS = EnumPolicy(PackagePrefixClassPolicy([Mood.__module__]), [Mood.__module__])


json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
    | st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30))]))
    | st.datetimes()
    | st.dates()
    | st.uuids()
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.sampled_from(list(Mood))
)
values = st.recursive(
    json_leaves,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(max_size=8).filter(lambda k: k != "__ratchet__"), inner, max_size=4
        )
    ),
    max_leaves=20,
)


def same(a: Any, b: Any) -> bool:
    """Equality that also checks types (1 vs True vs 1.0, date vs datetime)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, datetime):
        return (a == b and a.tzinfo == b.tzinfo) or (a.utcoffset() == b.utcoffset() and a == b)
    return bool(a == b)


@given(
    args=st.lists(values, max_size=4),
    kwargs=st.dictionaries(st.text(max_size=6), values, max_size=3),
)
def test_payload_round_trips_exactly(args: list[Any], kwargs: dict[str, Any]) -> None:
    text = encode_payload(args, kwargs, max_bytes=10_000_000, enums=ENUMS)
    back_args, back_kwargs = decode_payload(text, ENUMS)
    assert same(back_args, args) and same(back_kwargs, kwargs)


@given(value=values)
def test_result_round_trips_exactly(value: Any) -> None:
    assert same(decode_result(encode_result(value, 10_000_000), ENUMS), value)


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        ((1, 2), "use a list"),
        ({1, 2}, "use a list"),
        (object(), "object cannot be stored"),
        (b"bytes", "bytes cannot be stored"),
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        ({1: "x"}, "keys must be strings"),
        ({"__ratchet__": 1}, "reserved"),
        (timedelta(seconds=1), "timedelta cannot be stored"),
    ],
)
def test_unserialisable_arguments_are_refused_with_a_reason(value: Any, hint: str) -> None:
    with pytest.raises(UnserializableArgument, match=hint):
        encode_payload([value], {}, max_bytes=10_000, enums=ENUMS)


def test_payload_cap() -> None:
    encode_payload(["x" * 900], {}, max_bytes=1000, enums=ENUMS)
    with pytest.raises(PayloadTooLargeError, match="cap is 1000 bytes"):
        encode_payload(["x" * 1000], {}, max_bytes=1000, enums=ENUMS)


def test_payload_cap_counts_utf8_bytes() -> None:
    with pytest.raises(PayloadTooLargeError):
        encode_payload(["é" * 600], {}, max_bytes=1000, enums=ENUMS)


def test_result_cap() -> None:
    with pytest.raises(ResultTooLargeError):
        encode_result("y" * 100, max_bytes=50)
    assert encode_result(None, 1) is None


def test_rich_types_keep_their_types() -> None:
    when = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)
    args, _ = decode_payload(
        encode_payload(
            [when, date(2026, 1, 2), uuid.UUID(int=7), Decimal("1.10"), Mood.BUSY],
            {},
            1000,
            enums=ENUMS,
        ),
        ENUMS,
    )
    assert args == [when, date(2026, 1, 2), uuid.UUID(int=7), Decimal("1.10"), Mood.BUSY]
    assert str(args[3]) == "1.10"
    assert type(args[1]) is date


def test_a_tag_written_with_json_escapes_is_still_decoded() -> None:
    # Plain payloads skip the walk for tagged values when the tag's text cannot be in them; a
    # row written by another JSON writer may spell the tag with escapes, and must decode the same.
    plain = '{"args": [{"__ratchet__": "uuid", "v": "00000000-0000-0000-0000-000000000007"}], "kwargs": {}}'
    escaped = plain.replace("__ratchet__", "\\u005f\\u005fratchet\\u005f\\u005f")
    assert "__ratchet__" not in escaped
    assert (
        decode_payload(escaped, ENUMS) == decode_payload(plain, ENUMS) == ([uuid.UUID(int=7)], {})
    )


def test_a_payload_without_tagged_values_decodes_to_its_json() -> None:
    args, kwargs = decode_payload(
        '{"args": [1, "a", {"b": [null, 2.5]}], "kwargs": {"k": true}}', ENUMS
    )
    assert (args, kwargs) == ([1, "a", {"b": [None, 2.5]}], {"k": True})


@given(
    st.lists(st.integers() | st.text(max_size=8) | st.none(), max_size=4),
    st.sampled_from(["", " ", "\n\t "]),
    st.sampled_from(["", " ", "\r\n"]),
)
def test_a_payload_decodes_with_or_without_whitespace_around_it(
    args: list[Any], before: str, after: str
) -> None:
    """The compact text the store holds and any JSON spacing of it decode alike (the compact
    one through the scanner alone, the others as ``json.loads`` reads them)."""
    compact = encode_payload(args, {}, 10_000, enums=ENUMS)
    spaced = before + json.dumps(json.loads(compact), indent=1) + after
    assert decode_payload(compact, ENUMS) == decode_payload(spaced, ENUMS) == (args, {})


def test_a_payload_followed_by_more_text_is_refused() -> None:
    with pytest.raises(PayloadDecodeError, match="not valid JSON"):
        decode_payload('{"args":[],"kwargs":{}}{"args":[1],"kwargs":{}}', ENUMS)
    with pytest.raises(PayloadDecodeError, match="not valid JSON"):
        decode_result("1 2", ENUMS)


def _tagged(kind: str, value: Any, **extra: Any) -> str:
    return json.dumps({"args": [{"__ratchet__": kind, "v": value, **extra}], "kwargs": {}})


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        pytest.param('{"args": [1', "not valid JSON", id="truncated"),
        pytest.param("", "not valid JSON", id="empty"),
        pytest.param("[" * 5000 + "]" * 5000, "not valid JSON", id="deeper-than-recursion"),
        pytest.param('{"args": [1]}', "'kwargs' object", id="no-kwargs"),
        pytest.param('{"args": 1, "kwargs": {}}', "'args' list", id="args-not-a-list"),
        pytest.param(_tagged("enum", "calm", t=f"{__name__}:Gone"), "Gone", id="enum-class-gone"),
        pytest.param(
            _tagged("enum", "calm", t=f"{Mood.__module__}.no_such_module:Mood"),
            "no_such_module",
            id="enum-module-gone",
        ),
        pytest.param(_tagged("enum", "sad", t=f"{__name__}:Mood"), "'sad'", id="member-gone"),
        pytest.param(_tagged("enum", 1, t=f"{__name__}:same"), "not an Enum", id="not-an-enum"),
        pytest.param(_tagged("enum", 1), "KeyError: 't'", id="enum-without-class"),
        pytest.param(_tagged("date", "yesterday"), "yesterday", id="bad-date"),
        pytest.param(_tagged("uuid", 7), "AttributeError", id="uuid-of-int"),
        pytest.param(_tagged("decimal", "1,5"), "decimal", id="bad-decimal"),
        pytest.param(_tagged("tuple", [1]), "'tuple'", id="unknown-tag"),
    ],
)
def test_payloads_that_do_not_decode_raise_a_permanent_typed_error(text: str, hint: str) -> None:
    with pytest.raises(PayloadDecodeError, match="stored job arguments") as info:
        decode_payload(text, ENUMS)
    assert hint.lower() in str(info.value).lower()
    assert "submit the job again" in str(info.value)
    assert is_do_not_retry(info.value) and isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "text", ['{"v": 1', json.dumps({"__ratchet__": "enum", "t": f"{Mood.__module__}:Y", "v": 1})]
)
def test_results_that_do_not_decode_raise_a_permanent_typed_error(text: str) -> None:
    with pytest.raises(PayloadDecodeError, match="stored result"):
        decode_result(text, ENUMS)


# --------------------------------------------------------------------------- enums and the policy


def _enum_payload(ref: str, value: Any = "red") -> str:
    return json.dumps({"args": [{"__ratchet__": "enum", "t": ref, "v": value}], "kwargs": {}})


def test_an_enum_member_of_a_class_the_policy_refuses_is_refused_at_encode() -> None:
    with pytest.raises(ClassPolicyViolation, match=r"argument 'status'.*http:HTTPStatus") as info:
        encode_payload([Mood.CALM], {"status": http.HTTPStatus.OK}, 10_000, enums=ENUMS)
    assert "allowed_modules" in str(info.value) and Mood.__module__ in str(info.value)
    with pytest.raises(ClassPolicyViolation, match=r"argument 0\[0\]\['k'\]"):
        encode_payload([[{"k": http.HTTPStatus.OK}]], {}, 10_000, enums=ENUMS)


def test_a_result_or_signal_is_checked_when_a_policy_is_given() -> None:
    with pytest.raises(ClassPolicyViolation, match="result"):
        encode_result([http.HTTPStatus.OK], 10_000, ENUMS)
    assert encode_result([Mood.CALM], 10_000, ENUMS) is not None


def test_an_enum_defined_inside_a_function_is_refused_at_encode() -> None:
    Local = enum.Enum("Local", "A")
    Local.__module__ = Mood.__module__
    Local.__qualname__ = "f.<locals>.Local"
    with pytest.raises(UnserializableArgument, match="inside a function"):
        encode_payload([Local.A], {}, 10_000, enums=ENUMS)


def test_decoding_asks_the_policy_before_importing(tripwire: Tripwire) -> None:
    for decode in (
        lambda: decode_payload(_enum_payload(tripwire.enum_ref), ENUMS),
        lambda: decode_result(
            json.dumps([{"__ratchet__": "enum", "t": tripwire.enum_ref, "v": "red"}]), ENUMS
        ),
    ):
        with pytest.raises(ClassPolicyViolation, match="was not imported") as info:
            decode()
        assert tripwire.enum_ref in str(info.value) and is_do_not_retry(info.value)
        assert not tripwire.imported, "the refused module's top-level code ran"
    # The same text under a policy that allows the module imports it: the tripwire works.
    trusting = EnumPolicy(PackagePrefixClassPolicy([tripwire.module]))
    [member], _ = decode_payload(_enum_payload(tripwire.enum_ref), trusting)
    assert member.value == "red" and tripwire.imported


def test_a_reader_without_a_policy_imports_nothing(tripwire: Tripwire) -> None:
    text = json.dumps({"__ratchet__": "enum", "t": tripwire.enum_ref, "v": "red"})
    with pytest.raises(ClassPolicyViolation, match="no class policy"):
        decode_result(text, refuse_enums)
    assert not tripwire.imported


@pytest.mark.parametrize("ref", ["", "no_colon", ":Mood", "a:", "a:b:c", "a..b:C", "a:b c", 7])
def test_a_malformed_enum_reference_does_not_decode(ref: Any) -> None:
    with pytest.raises(PayloadDecodeError, match="enum reference"):
        decode_payload(_enum_payload(ref), ENUMS)


def test_the_policy_sees_the_module_and_qualname_of_the_enum() -> None:
    asked: list[tuple[str, str]] = []

    class Recording:
        def is_allowed(self, module: str, qualname: str) -> bool:
            asked.append((module, qualname))
            return True

    enums = EnumPolicy(Recording())
    text = encode_payload([Mood.BUSY], {}, 10_000, enums=enums)
    assert decode_payload(text, enums) == ([Mood.BUSY], {})
    assert asked == [(Mood.__module__, "Mood"), (Mood.__module__, "Mood")]


# --------------------------------------------------------------------------- text and nesting


class Odd(enum.Enum):
    BROKEN = "\udcff"


def nested(depth: int, leaf: Any = 1, *, dicts: bool = False) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"k": value} if dicts else [value]
    return value


@pytest.mark.parametrize(
    ("args", "kwargs", "path"),
    [
        pytest.param(["bad \ud800"], {}, "argument 0:", id="plain-argument"),
        pytest.param([1, "ok", "\udc80"], {}, "argument 2:", id="plain-among-plain"),
        pytest.param([], {"name": "x\udfff"}, "argument 'name':", id="keyword-argument"),
        pytest.param([], {"\ud800": 1}, "argument name '\\ud800'", id="keyword-name"),
        pytest.param([{"a": [1, "é", "\ud800"]}], {}, "argument 0['a'][2]:", id="nested-value"),
        pytest.param([[{"k\udc80": 1}]], {}, "argument 0[0] (the key 'k\\udc80')", id="nested-key"),
        pytest.param([Odd.BROKEN], {}, "argument 0:", id="enum-value"),
    ],
)
def test_lone_surrogates_are_refused_naming_the_argument(
    args: list[Any], kwargs: dict[str, Any], path: str
) -> None:
    enums = EnumPolicy(PackagePrefixClassPolicy([Mood.__module__]))
    with pytest.raises(UnserializableArgument, match="lone surrogate") as info:
        encode_payload(args, kwargs, 10_000, enums=enums)
    assert str(info.value).startswith(path), str(info.value)
    str(info.value).encode()  # the message itself is storable


def test_valid_non_ascii_text_and_nul_characters_round_trip() -> None:
    args = ["é中文🎉", "a\x00b", {"k\x00é": ["\x00", "\U0001f600"]}]
    text = encode_payload(args, {"nul\x00": "\x00"}, 10_000, enums=ENUMS)
    assert "\x00" not in text and "\\u0000" in text, "NUL is stored escaped, as JSON does"
    assert decode_payload(text, ENUMS) == (args, {"nul\x00": "\x00"})


@pytest.mark.parametrize("dicts", [False, True], ids=["lists", "dicts"])
def test_nesting_is_capped_with_a_typed_error(dicts: bool) -> None:
    deepest = nested(MAX_NESTING, dicts=dicts)
    text = encode_payload([deepest], {}, 10_000, enums=ENUMS)
    assert decode_payload(text, ENUMS) == ([deepest], {})
    assert decode_result(encode_result(deepest, 10_000), ENUMS) == deepest
    for too_deep in (nested(MAX_NESTING + 1, dicts=dicts), nested(5000, dicts=dicts)):
        with pytest.raises(UnserializableArgument, match=f"nested more than {MAX_NESTING}"):
            encode_payload([too_deep], {}, 10_000_000, enums=ENUMS)
        with pytest.raises(UnserializableArgument, match=r"^argument 'x'"):
            encode_payload([], {"x": too_deep}, 10_000_000, enums=ENUMS)
        with pytest.raises(UnserializableArgument, match=r"^result"):
            encode_result(too_deep, 10_000_000)


def test_the_nesting_cap_sits_far_below_the_recursion_limit() -> None:
    assert sys.getrecursionlimit() > MAX_NESTING * 4
