"""Text every store can hold.

Every supported database stores any string of Unicode scalar values except one: PostgreSQL's
``text`` refuses U+0000 (NUL). A Python ``str`` may also hold lone surrogates (U+D800-U+DFFF,
e.g. from ``os.fsdecode`` of undecodable bytes or ``"\\ud800"`` in code), which no UTF-8
encoder accepts, so no database driver can send them. Text the scheduler writes on its own
(error messages, tracebacks, node names) goes through :func:`storable_text`, which rewrites
exactly those characters as visible escapes and leaves every other string unchanged.
"""

from __future__ import annotations

import json
import traceback

_NUL = "\x00"
#: The longest error description stored (a longer one is cut, ending in ``...``).
MAX_ERROR_CHARS = 4000
#: The longest traceback stored (a longer one keeps its newest frames).
MAX_TRACEBACK_CHARS = 16_000


def is_storable_text(text: str) -> bool:
    """Whether every store can hold ``text`` as it is (no NUL, no lone surrogate)."""
    if _NUL in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable_text(text: str) -> str:
    """``text`` with NUL written as ``\\x00`` and each lone surrogate as ``\\udXXX``.

    Returns ``text`` itself when it is storable already (the common case costs one scan).
    """
    if is_storable_text(text):
        return text
    return text.replace(_NUL, "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def describe_error(exc: BaseException) -> str:
    """``module.Type: message``, storable on every database, at most ``MAX_ERROR_CHARS``."""
    remote = getattr(exc, "ratchet_description", None)  # an error reported by a child process
    if isinstance(remote, str):
        text = remote
    else:
        klass = type(exc)
        name = (
            klass.__qualname__
            if klass.__module__ == "builtins"
            else f"{klass.__module__}.{klass.__qualname__}"
        )
        try:
            message = str(exc)
        except Exception as unprintable:  # a job's exception type may break its own __str__
            message = f"<message unavailable: its __str__ raised {type(unprintable).__name__}>"
        text = f"{name}: {message}"
    text = storable_text(text)
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def describe_traceback(exc: BaseException) -> str:
    """``exc``'s traceback as Python prints it (its causes included), storable on every
    database, at most ``MAX_TRACEBACK_CHARS``: a longer one keeps its end, where it was raised."""
    remote = getattr(exc, "remote_traceback", None)  # raised in a child process
    if isinstance(remote, str) and remote:
        text = remote
    else:
        try:
            text = "".join(traceback.format_exception(exc))
        except Exception as broken:  # a job's exception may break formatting (its __str__)
            text = f"<traceback unavailable: formatting it raised {type(broken).__name__}>"
    text = storable_text(text)
    if len(text) > MAX_TRACEBACK_CHARS:
        text = "...\n" + text[-(MAX_TRACEBACK_CHARS - 4) :]
    return text


def json_object_of(text: str | None) -> dict[str, object]:
    """The JSON object ``text`` holds (empty for None, empty text, text that is not JSON, or
    JSON that is not an object): for reading small documents a store keeps, never raising."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
