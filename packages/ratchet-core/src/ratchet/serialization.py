"""JSON payloads and results. Never pickle.

Arguments may be JSON-native values (None, bool, int, float, str, list, dict with string keys)
plus datetime, date, UUID, Decimal and Enum members, which round-trip exactly through a tagged
object ``{"__ratchet__": kind, "v": value}``. Anything else is refused at submit.

An enum member is stored with its class's ``module:qualname``, so decoding imports that module.
Every such import goes through the class policy (:class:`EnumPolicy`): a member of a class the
policy refuses is refused at submit, and a stored reference to one is refused before anything is
imported, so a tampered row cannot make a worker or a reader run a module's top-level code.
"""

from __future__ import annotations

import enum
import importlib
import itertools
import json
import json.scanner
import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ratchet.domain.errors import (
    ClassPolicyViolation,
    PayloadDecodeError,
    PayloadTooLargeError,
    ResultTooLargeError,
    UnserializableArgument,
)

if TYPE_CHECKING:
    from ratchet.ports import ClassPolicy

TAG = "__ratchet__"

MAX_NESTING = 100
"""How deep lists and dicts may nest in arguments, results and signal payloads (far below
Python's recursion limit, so every reader can decode what was stored)."""

EnumResolver = Callable[[str], type[enum.Enum]]
"""Turns a stored enum reference (``module:qualname``) into the class."""


class EnumPolicy:
    """The enum classes stored JSON may name: those whose module and qualname the class policy
    allows (the policy that decides which job targets may run).

    Call it with a stored reference to resolve the class (an :data:`EnumResolver`): the policy
    is asked before anything is imported.

    :param policy: the app's class policy.
    :param allowed_modules: the configured prefixes, quoted in refusals (None: not known).
    """

    def __init__(self, policy: ClassPolicy, allowed_modules: Sequence[str] | None = None) -> None:
        self.policy = policy
        self._allowed = None if allowed_modules is None else list(allowed_modules)
        self._classes: dict[str, type[enum.Enum]] = {}

    def _advice(self) -> str:
        now = "" if self._allowed is None else f" (now {self._allowed})"
        return f"add its module prefix to allowed_modules{now} if you trust that module"

    def check(self, cls: type[enum.Enum], path: str) -> str:
        """The stored reference of ``cls``, after the policy allowed it.

        :raises ClassPolicyViolation: the policy refuses the class.
        :raises UnserializableArgument: the class cannot be imported by name (defined inside a
            function).
        """
        module, qualname = cls.__module__, cls.__qualname__
        ref = f"{module}:{qualname}"
        if "<" in qualname:
            raise UnserializableArgument(
                f"{path}: enum class {ref} is defined inside a function; another process cannot "
                "import it by name. Define it at module level."
            )
        if not self.policy.is_allowed(module, qualname):
            raise ClassPolicyViolation(
                f"{path}: the class policy does not allow the enum class {ref}, so a worker could "
                f"not decode it; {self._advice()}, or pass the member's value instead"
            )
        return ref

    def __call__(self, ref: str) -> type[enum.Enum]:
        """The enum class a stored reference names, imported only if the policy allows it.

        :raises ClassPolicyViolation: the policy refuses it (nothing was imported).
        :raises PayloadDecodeError: the reference is malformed, or no longer names an Enum class.
        """
        if not isinstance(ref, str):
            raise PayloadDecodeError(f"enum reference {ref!r} is not a string")
        module, sep, qualname = ref.partition(":")
        if not (sep and _dotted(module) and _dotted(qualname)):
            raise PayloadDecodeError(f"enum reference {ref!r} is not of the form module:qualname")
        if not self.policy.is_allowed(module, qualname):
            raise ClassPolicyViolation(
                f"stored data names the enum class {ref}, which the class policy does not allow, "
                f"so it was not imported; {self._advice()}"
            )
        found = self._classes.get(ref)
        if found is None:
            found = import_enum(ref)
            if len(self._classes) < 10_000:
                self._classes[ref] = found
        return found


def _dotted(name: str) -> bool:
    return all(part.isidentifier() for part in name.split("."))


def refuse_enums(ref: str) -> type[enum.Enum]:
    """An :data:`EnumResolver` for readers without a class policy: refuses every enum class.

    :raises ClassPolicyViolation: always (nothing is imported).
    """
    raise ClassPolicyViolation(
        f"stored data names the enum class {ref}, but no class policy was given to decode it; "
        "it was not imported"
    )


def _encode(value: Any, path: str, enums: EnumPolicy | None, depth: int = 0) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        cls = type(value)
        ref = f"{cls.__module__}:{cls.__qualname__}" if enums is None else enums.check(cls, path)
        return {TAG: "enum", "t": ref, "v": _encode(value.value, path, enums, depth)}
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
    if isinstance(value, (list, dict)) and depth >= MAX_NESTING:
        where = path if len(path) <= 60 else f"{path[:60]}..."
        raise UnserializableArgument(
            f"{where}: lists and dicts are nested more than {MAX_NESTING} levels deep; flatten "
            "the data, or store it elsewhere and pass a reference"
        )
    depth += 1
    if isinstance(value, list):
        return [_encode(item, f"{path}[{i}]", enums, depth) for i, item in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise UnserializableArgument(
                    f"{path}: dict keys must be strings to survive JSON, got {type(key).__name__}"
                )
            if key == TAG:
                raise UnserializableArgument(f"{path}: the key {TAG!r} is reserved")
            out[key] = _encode(item, f"{path}[{key!r}]", enums, depth)
        return out
    hint = " (use a list)" if isinstance(value, (tuple, set, frozenset)) else ""
    raise UnserializableArgument(
        f"{path}: {type(value).__name__} cannot be stored as a job argument{hint}; allowed are "
        "JSON values, datetime, date, UUID, Decimal and Enum members. Pass an id and load the "
        "object inside the job instead."
    )


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


def import_enum(ref: str) -> type[enum.Enum]:
    """The enum class ``module:qualname``, imported WITHOUT asking any class policy.

    Only for text already decoded under the policy (the processes executor's child decodes the
    payload its worker decoded before sending it); everything else uses an :class:`EnumPolicy`.

    :raises PayloadDecodeError: the module or class is gone, or is not an Enum class.
    """
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


#: The C scanner behind ``json.loads``, called directly: ``json.loads`` adds a type check and
#: two whitespace matches in Python around it, a third of its time for a short payload.
_SCAN_JSON: Any = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _load(text: str, what: str) -> Any:
    try:
        value, end = _SCAN_JSON(text, 0)
        if end == len(text):
            return value
    except (StopIteration, *_DECODE_ERRORS):
        pass  # not compact JSON on its own: json.loads says what it is (or what is wrong)
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


#: The payload of a call without arguments.
NO_ARGUMENTS = '{"args":[],"kwargs":{}}'

#: Types that JSON holds as they are (no tagging, no checks): the common arguments.
_PLAIN = frozenset({int, str, bool, type(None)})
_PAYLOAD_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
#: The same encoding of plain arguments, made once (``JSONEncoder.encode`` makes its C encoder
#: on every call); without the circular-reference check, which plain values cannot need.
_C_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)
_PLAIN_ENCODE: Any = (
    None
    if _C_ENCODER is None
    else _C_ENCODER(None, None, json.encoder.encode_basestring, None, ":", ",", False, False, False)
)


def encode_payload(
    args: Sequence[Any], kwargs: Mapping[str, Any], max_bytes: int, *, enums: EnumPolicy
) -> str:
    """Serialise call arguments to compact JSON.

    :param enums: the enum classes arguments may be members of (the app's ``enums``).
    :raises UnserializableArgument: an argument is not storable.
    :raises ClassPolicyViolation: an argument is a member of an enum class the policy refuses.
    :raises PayloadTooLargeError: the JSON is longer than ``max_bytes``.
    """
    plain = _PLAIN
    if plain.issuperset(map(type, args)) and (
        not kwargs or plain.issuperset(map(type, kwargs.values()))
    ):
        doc = {"args": list(args), "kwargs": dict(kwargs)}
        if _PLAIN_ENCODE is not None and (not kwargs or all(type(k) is str for k in kwargs)):
            text = "".join(_PLAIN_ENCODE(doc, 0))
        else:
            text = _PAYLOAD_JSON.encode(doc)
    else:
        doc = {
            "args": [_encode(a, f"argument {i}", enums) for i, a in enumerate(args)],
            "kwargs": {k: _encode(v, f"argument {k!r}", enums) for k, v in kwargs.items()},
        }
        text = _PAYLOAD_JSON.encode(doc)
    try:
        size = len(text) if text.isascii() else len(text.encode())
    except UnicodeEncodeError:
        raise _lone_surrogate(args, kwargs) from None
    if size > max_bytes:
        raise PayloadTooLargeError(
            f"job arguments are {size} bytes of JSON; the cap is {max_bytes} bytes. Store large "
            "data elsewhere and pass a reference, or raise max_payload_bytes."
        )
    return text


def _lone_surrogate(args: Sequence[Any], kwargs: Mapping[str, Any]) -> UnserializableArgument:
    """The error naming the first string of the arguments that is not valid Unicode text."""
    found = next(
        itertools.chain(
            (p for i, a in enumerate(args) if (p := _surrogate_in(a, f"argument {i}"))),
            (f"argument name {k!r}" for k in kwargs if _has_surrogate(k)),
            (p for k, v in kwargs.items() if (p := _surrogate_in(v, f"argument {k!r}"))),
        ),
        "an argument",
    )
    return UnserializableArgument(
        f"{found}: a string holds a lone surrogate (U+D800..U+DFFF alone), which is not valid "
        "Unicode text and cannot be stored as UTF-8; it usually comes from bytes decoded with "
        "errors='surrogateescape'. Decode the bytes properly, or pass them as base64 text."
    )


def _has_surrogate(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def _surrogate_in(value: Any, path: str) -> str | None:
    """The path of the first string in ``value`` (encoded already: at most MAX_NESTING deep) that
    holds a lone surrogate, or None."""
    if isinstance(value, str):
        return path if _has_surrogate(value) else None
    if isinstance(value, enum.Enum):
        return _surrogate_in(value.value, path)
    if isinstance(value, list):
        items: Any = ((f"{path}[{i}]", item) for i, item in enumerate(value))
    elif isinstance(value, dict):
        for key in value:
            if _has_surrogate(key):
                return f"{path} (the key {key!r})"
        items = ((f"{path}[{key!r}]", item) for key, item in value.items())
    else:
        return None
    return next((p for sub_path, item in items if (p := _surrogate_in(item, sub_path))), None)


def decode_payload(text: str, resolve_enum: EnumResolver) -> tuple[list[Any], dict[str, Any]]:
    """The ``(args, kwargs)`` stored by :func:`encode_payload`.

    :param resolve_enum: turns stored enum references into classes: the app's ``enums`` (an
        :class:`EnumPolicy`), which asks the class policy before importing.
    :raises ClassPolicyViolation: an enum class named in the text is refused by the policy.
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
    if TAG not in text and "\\" not in text:
        # No tagged value can be in it (a tag is the literal key, unescaped): plain JSON.
        return doc["args"], doc["kwargs"]
    decoded = _decode_stored([doc["args"], doc["kwargs"]], resolve_enum, "job arguments")
    return decoded[0], decoded[1]


def encode_result(value: Any, max_bytes: int, enums: EnumPolicy | None = None) -> str | None:
    """A job's return value as JSON (None stays NULL).

    :param enums: when given, enum members must be of classes it allows (as for arguments);
        without it any enum is stored, and a reader whose policy refuses the class cannot
        decode it (:func:`decode_result` refuses it).
    :raises UnserializableArgument: the value is not storable.
    :raises ClassPolicyViolation: ``enums`` refuses an enum class in the value.
    :raises ResultTooLargeError: the JSON is longer than ``max_bytes``.
    """
    if value is None:
        return None
    text = json.dumps(_encode(value, "result", enums), separators=(",", ":"), allow_nan=False)
    if len(text.encode()) > max_bytes:
        raise ResultTooLargeError(
            f"job result is {len(text.encode())} bytes of JSON; the cap is {max_bytes} bytes"
        )
    return text


def decode_result(text: str | None, resolve_enum: EnumResolver) -> Any:
    """The value stored by :func:`encode_result`.

    :param resolve_enum: as for :func:`decode_payload` (the app's ``enums``), or
        :func:`refuse_enums` where no class policy is at hand.
    :raises ClassPolicyViolation: an enum class named in the text is refused by the policy.
    :raises PayloadDecodeError: the text does not decode (any more).
    """
    if text is None:
        return None
    return _decode_stored(_load(text, "result"), resolve_enum, "result")
