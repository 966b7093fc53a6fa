"""JSON payloads and results. Never pickle.

Arguments may be JSON-native values (None, bool, int, float, str, list, dict with string keys)
plus datetime, date, UUID, Decimal and Enum members, which round-trip exactly through a tagged
object ``{"__ratchet__": kind, "v": value}``. Anything else is refused at submit.
"""

from __future__ import annotations

import enum
import importlib
import json
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from ratchet.domain.errors import (
    PayloadDecodeError,
    PayloadTooLargeError,
    ResultTooLargeError,
    UnserializableArgument,
)

TAG = "__ratchet__"


def _encode(value: Any, path: str) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        cls = type(value)
        return {
            TAG: "enum",
            "t": f"{cls.__module__}:{cls.__qualname__}",
            "v": _encode(value.value, path),
        }
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UnserializableArgument(
                f"{path}: {value!r} is not a finite number; JSON cannot hold it"
            )
        return value
    if isinstance(value, datetime):
        return {TAG: "datetime", "v": value.isoformat()}
    if isinstance(value, date):
        return {TAG: "date", "v": value.isoformat()}
    if isinstance(value, uuid.UUID):
        return {TAG: "uuid", "v": str(value)}
    if isinstance(value, Decimal):
        return {TAG: "decimal", "v": str(value)}
    if isinstance(value, list):
        return [_encode(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise UnserializableArgument(
                    f"{path}: dict keys must be strings to survive JSON, got {type(key).__name__}"
                )
            if key == TAG:
                raise UnserializableArgument(f"{path}: the key {TAG!r} is reserved")
            out[key] = _encode(item, f"{path}[{key!r}]")
        return out
    hint = " (use a list)" if isinstance(value, (tuple, set, frozenset)) else ""
    raise UnserializableArgument(
        f"{path}: {type(value).__name__} cannot be stored as a job argument{hint}; allowed are "
        "JSON values, datetime, date, UUID, Decimal and Enum members. Pass an id and load the "
        "object inside the job instead."
    )


EnumResolver = Callable[[str], type[enum.Enum]]
"""Turns a stored enum reference (``module:qualname``) into the class."""


def _decode(value: Any, resolve_enum: EnumResolver) -> Any:
    if isinstance(value, list):
        return [_decode(item, resolve_enum) for item in value]
    if isinstance(value, dict):
        kind = value.get(TAG)
        if kind is None:
            return {k: _decode(v, resolve_enum) for k, v in value.items()}
        raw = value["v"]
        if kind == "datetime":
            return datetime.fromisoformat(raw)
        if kind == "date":
            return date.fromisoformat(raw)
        if kind == "uuid":
            return uuid.UUID(raw)
        if kind == "decimal":
            return Decimal(raw)
        if kind == "enum":
            return resolve_enum(value["t"])(_decode(raw, resolve_enum))
        raise ValueError(f"unknown tagged value {kind!r} in stored payload")
    return value


def _import_enum(ref: str) -> type[enum.Enum]:
    module_name, _, qualname = ref.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise PayloadDecodeError(f"enum class {ref} no longer imports ({exc})") from None
    if not (isinstance(obj, type) and issubclass(obj, enum.Enum)):
        raise PayloadDecodeError(f"{ref} is not an Enum class")
    return obj


#: What decoding stored JSON raises when the text is damaged: JSONDecodeError and bad dates or
#: enum members (ValueError), a missing key, a value of the wrong type (TypeError, or
#: AttributeError from ``UUID``), a bad Decimal, nesting past the recursion limit.
_DECODE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, ArithmeticError, RecursionError)
_RESUBMIT = (
    "the row was changed outside Ratchet, or the code it names changed since (a renamed or "
    "removed enum class or member): restore that code, or submit the job again"
)


def _load(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except _DECODE_ERRORS as exc:
        raise PayloadDecodeError(f"stored {what}: not valid JSON ({exc}); {_RESUBMIT}") from None


def _decode_stored(doc: Any, resolve_enum: EnumResolver, what: str) -> Any:
    try:
        return _decode(doc, resolve_enum)
    except PayloadDecodeError as exc:
        raise PayloadDecodeError(f"stored {what}: {exc}; {_RESUBMIT}") from None
    except _DECODE_ERRORS as exc:
        raise PayloadDecodeError(
            f"stored {what}: {type(exc).__name__}: {exc}; {_RESUBMIT}"
        ) from None


#: Types that JSON holds as they are (no tagging, no checks): the common arguments.
_PLAIN = frozenset({int, str, bool, type(None)})
_PAYLOAD_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode_payload(args: Sequence[Any], kwargs: Mapping[str, Any], max_bytes: int) -> str:
    """Serialise call arguments to compact JSON.

    :raises UnserializableArgument: an argument is not storable.
    :raises PayloadTooLargeError: the JSON is longer than ``max_bytes``.
    """
    plain = _PLAIN
    if all(type(a) in plain for a in args) and all(type(v) in plain for v in kwargs.values()):
        doc = {"args": list(args), "kwargs": dict(kwargs)}
    else:
        doc = {
            "args": [_encode(a, f"argument {i}") for i, a in enumerate(args)],
            "kwargs": {k: _encode(v, f"argument {k!r}") for k, v in kwargs.items()},
        }
    text = _PAYLOAD_JSON.encode(doc)
    size = len(text) if text.isascii() else len(text.encode())
    if size > max_bytes:
        raise PayloadTooLargeError(
            f"job arguments are {size} bytes of JSON; the cap is {max_bytes} bytes. Store large "
            "data elsewhere and pass a reference, or raise max_payload_bytes."
        )
    return text


def decode_payload(
    text: str, resolve_enum: EnumResolver = _import_enum
) -> tuple[list[Any], dict[str, Any]]:
    """The ``(args, kwargs)`` stored by :func:`encode_payload`.

    :raises PayloadDecodeError: the text is not such a payload (any more): not JSON, not an
        object with an ``args`` list and a ``kwargs`` object, or a tagged value that no longer
        decodes (an enum class or member that is gone, a malformed date...).
    """
    doc = _load(text, "job arguments")
    if not (
        isinstance(doc, dict)
        and isinstance(doc.get("args"), list)
        and isinstance(doc.get("kwargs"), dict)
    ):
        raise PayloadDecodeError(
            "stored job arguments: not an object with an 'args' list and a 'kwargs' object; "
            f"{_RESUBMIT}"
        )
    decoded = _decode_stored([doc["args"], doc["kwargs"]], resolve_enum, "job arguments")
    return decoded[0], decoded[1]


def encode_result(value: Any, max_bytes: int) -> str | None:
    """A job's return value as JSON (None stays NULL).

    :raises UnserializableArgument: the value is not storable.
    :raises ResultTooLargeError: the JSON is longer than ``max_bytes``.
    """
    if value is None:
        return None
    text = json.dumps(_encode(value, "result"), separators=(",", ":"), allow_nan=False)
    if len(text.encode()) > max_bytes:
        raise ResultTooLargeError(
            f"job result is {len(text.encode())} bytes of JSON; the cap is {max_bytes} bytes"
        )
    return text


def decode_result(text: str | None) -> Any:
    """The value stored by :func:`encode_result`."""
    if text is None:
        return None
    return _decode_stored(_load(text, "result"), _import_enum, "result")
