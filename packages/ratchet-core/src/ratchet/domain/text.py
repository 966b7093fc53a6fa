"""Text every store can hold.

Every supported database stores any string of Unicode scalar values except one: PostgreSQL's
``text`` refuses U+0000 (NUL). A Python ``str`` may also hold lone surrogates (U+D800-U+DFFF,
e.g. from ``os.fsdecode`` of undecodable bytes or ``"\\ud800"`` in code), which no UTF-8
encoder accepts, so no database driver can send them. Text the scheduler writes on its own
(error messages, tracebacks, node names) goes through :func:`storable_text`, which rewrites
exactly those characters as visible escapes and leaves every other string unchanged.
"""

from __future__ import annotations

_NUL = "\x00"


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
