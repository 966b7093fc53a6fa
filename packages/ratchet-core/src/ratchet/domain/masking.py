"""Masking of sensitive fields in what Ratchet shows (docs/security.md, "Masking").

One function, :meth:`MaskingPolicy.mask`, used by every read surface: the app's job look-ups,
the CLI, and the events handed to listeners and observer hooks. A field is sensitive when its
name, lower-cased and without ``-``, ``_``, ``.`` or spaces, contains one of the policy's words
(``password`` matches ``db_password`` and ``passwordHash``; ``token`` matches ``accessToken``).
Its value, whatever it is, is replaced by :data:`MASK`. Free text (error messages) is not
parsed; keep secrets out of exception messages.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MASK = "***"

DEFAULT_SENSITIVE_WORDS = frozenset(
    {
        "password",
        "passwd",
        "secret",
        "token",
        "apikey",
        "authorization",
        "credential",
        "privatekey",
        "ssn",
        "cookie",
        "session",
    }
)

_SEPARATORS = str.maketrans("", "", "-_. ")


def _normalize(name: str) -> str:
    return name.lower().translate(_SEPARATORS)


@dataclass(frozen=True)
class MaskingPolicy:
    """Which field names are sensitive, and whether masking is on.

    :param words: substrings of normalized field names that mark a field sensitive
        (normalized the same way: ``api_key`` and ``apikey`` are one word).
    :param enabled: False shows everything as stored.
    """

    words: frozenset[str] = DEFAULT_SENSITIVE_WORDS
    enabled: bool = True
    _normalized: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        words = frozenset(self.words) if not isinstance(self.words, str) else None
        if words is None or not all(isinstance(w, str) and _normalize(w) for w in words):
            raise ValueError(
                f"masking words must be a collection of non-blank strings, got {self.words!r}"
            )
        object.__setattr__(self, "words", words)
        object.__setattr__(self, "_normalized", tuple(sorted({_normalize(w) for w in words})))

    @classmethod
    def with_words(cls, extra: Iterable[str], *, replace: bool = False) -> MaskingPolicy:
        """The default words plus ``extra`` (only ``extra`` with ``replace=True``)."""
        extra = frozenset(extra)
        return cls(words=extra if replace else DEFAULT_SENSITIVE_WORDS | extra)

    def is_sensitive(self, name: str) -> bool:
        """Whether a field called ``name`` is masked."""
        normalized = _normalize(name)
        return any(word in normalized for word in self._normalized)

    def mask(self, value: Any) -> Any:
        """``value`` with the value of every sensitive key of every nested dict replaced by
        :data:`MASK`. Lists and tuples are walked; nothing else changes and the input is never
        modified (a new container is returned only where something was masked)."""
        if not self.enabled:
            return value
        return self._mask(value)

    def _mask(self, value: Any) -> Any:
        if isinstance(value, Mapping):
            out: dict[Any, Any] | None = None
            for key, item in value.items():
                new = MASK if isinstance(key, str) and self.is_sensitive(key) else self._mask(item)
                if new is not item and out is None:
                    out = dict(value)
                if out is not None:
                    out[key] = new
            return value if out is None else out
        if isinstance(value, (list, tuple)):
            items = [self._mask(item) for item in value]
            if all(new is old for new, old in zip(items, value, strict=True)):
                return value
            return items if isinstance(value, list) else tuple(items)
        return value

    def mask_json_text(self, text: str | None) -> str | None:
        """Stored JSON text with its sensitive fields masked; text that is not JSON, or has
        nothing to mask, is returned as it is."""
        if text is None or not self.enabled or "{" not in text:
            return text
        try:
            doc = json.loads(text)
        except ValueError:
            return text
        masked = self._mask(doc)
        if masked is doc:
            return text
        return json.dumps(masked, separators=(",", ":"), ensure_ascii=False)


NO_MASKING = MaskingPolicy(enabled=False)
