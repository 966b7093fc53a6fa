"""Redacting secrets from error messages and tracebacks before they are stored or logged.

A job's exception often carries what it was working with: a connection URL with its password,
``token=...`` from a request, a customer's e-mail address. :func:`sanitize_text` replaces such
values with :data:`REDACTED`, keeps the ``module.Class:`` that starts an error description, and
bounds the length. The worker applies it, through the ``ratchet_sanitize_error`` hook, to every
error and traceback before the outcome write, the events and its log lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ratchet.domain.errors import ConfigurationError
from ratchet.domain.text import MAX_ERROR_CHARS, MAX_TRACEBACK_CHARS, storable_text

#: What a redacted value becomes.
REDACTED = "***"
#: What a redacted e-mail address becomes.
REDACTED_EMAIL = "<email>"

#: Key names whose values are secrets (matched case-insensitively anywhere in a key, so
#: ``db_password``, ``X-Api-Key`` and ``access_token`` are caught too).
DEFAULT_SECRET_KEYS: tuple[str, ...] = (
    "password",
    "passwd",
    "pwd",
    "secret",
    "token",
    "api_key",
    "api-key",
    "apikey",
    "access_key",
    "private_key",
    "credential",
    "authorization",
    "auth",
    "session",
    "cookie",
    "signature",
)

_KEY_CHARS = r"[A-Za-z0-9_.\-]"
# scheme://userinfo@ : everything up to the last @ of the URL goes (a password may hold an
# unescaped "/" or "@"), the host stays. Errs on the side of redacting too much.
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)[^\s'\"<>]*@")
_BEARER = re.compile(r"\b(?P<kind>[Bb]earer|BEARER|Basic)(?P<sp>\s+)[^\s'\"<>,;]+")
_EMAIL = re.compile(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}")
_PREFIX = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*: ")
_KEY_CHARS_RE = re.compile(r"[A-Za-z0-9_\-]+")


@dataclass(frozen=True)
class SanitizePolicy:
    """What :func:`sanitize_text` redacts and how long its result may be.

    :param keys: key names whose values are secrets in ``key=value``, ``key: value`` and
        ``"key": "value"`` pairs (case-insensitive, matched within longer names).
    :param urls: redact the user and password of ``scheme://user:password@host`` URLs.
    :param emails: redact e-mail addresses.
    :param max_chars: the longest message kept (longer ones are cut, ending in ``...``).
    :param max_traceback_chars: the longest traceback kept (longer ones keep their end).
    """

    keys: tuple[str, ...] = DEFAULT_SECRET_KEYS
    urls: bool = True
    emails: bool = True
    max_chars: int = MAX_ERROR_CHARS
    max_traceback_chars: int = MAX_TRACEBACK_CHARS

    def __post_init__(self) -> None:
        if isinstance(self.keys, str):
            object.__setattr__(self, "keys", (self.keys,))
        for key in self.keys:
            if not isinstance(key, str) or not _KEY_CHARS_RE.fullmatch(key):
                raise ConfigurationError(
                    f"secret key name {key!r} must be letters, digits, '_' or '-'"
                )
        for name in ("max_chars", "max_traceback_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 16:
                raise ConfigurationError(f"{name} must be an integer of at least 16, got {value!r}")
        object.__setattr__(self, "keys", tuple(k.lower() for k in self.keys))

    def pair_pattern(self) -> re.Pattern[str] | None:
        """The pattern of ``key=value`` pairs whose key names a secret (None: no keys)."""
        return _pair_pattern(self.keys)


_PAIR_CACHE: dict[tuple[str, ...], re.Pattern[str] | None] = {}


def _pair_pattern(keys: tuple[str, ...]) -> re.Pattern[str] | None:
    if keys in _PAIR_CACHE:
        return _PAIR_CACHE[keys]
    pattern = None
    if keys:
        names = "|".join(re.escape(k) for k in sorted(keys, key=len, reverse=True))
        pattern = re.compile(
            rf"(?i)(?P<key>{_KEY_CHARS}*(?:{names}){_KEY_CHARS}*)"
            r"(?P<q>['\"]?)(?P<sep>\s*[=:]\s*)"
            r"(?P<value>\"[^\"]*\"|'[^']*'|[^\s&;,'\"<>()\[\]{}]+)"
        )
    _PAIR_CACHE[keys] = pattern
    return pattern


def _redact_pair(match: re.Match[str]) -> str:
    value = match.group("value")
    quote = value[0] if value[:1] in ("'", '"') and len(value) > 1 else ""
    return f"{match.group('key')}{match.group('q')}{match.group('sep')}{quote}{REDACTED}{quote}"


def redact(text: str, policy: SanitizePolicy) -> str:
    """``text`` with the secrets ``policy`` names replaced (no length bound)."""
    if policy.urls:
        text = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)
    pairs = policy.pair_pattern()
    if pairs is not None:
        text = _BEARER.sub(lambda m: f"{m.group('kind')}{m.group('sp')}{REDACTED}", text)
        text = pairs.sub(_redact_pair, text)
    if policy.emails:
        text = _EMAIL.sub(REDACTED_EMAIL, text)
    return text


def sanitize_text(text: str, policy: SanitizePolicy, *, traceback: bool = False) -> str:
    """``text`` redacted, storable on every database and bounded.

    An error description (``module.Class: message``) keeps its class as it is; only the
    message is redacted. A message is cut at ``policy.max_chars``; a traceback
    (``traceback=True``) at ``policy.max_traceback_chars``, keeping its end, where the error
    was raised.
    """
    prefix = "" if traceback else _class_prefix(text, policy)
    body = storable_text(prefix + redact(text[len(prefix) :], policy))
    if traceback:
        limit = policy.max_traceback_chars
        return body if len(body) <= limit else "...\n" + body[-(limit - 4) :]
    limit = policy.max_chars
    return body if len(body) <= limit else body[: limit - 3] + "..."


def _class_prefix(text: str, policy: SanitizePolicy) -> str:
    """The ``module.Class: `` an error description starts with ('' if it has none, or if it
    is a secret's key, as in ``Password: hunter2``)."""
    match = _PREFIX.match(text)
    if match is None:
        return ""
    name = match.group(0)[:-2].rsplit(".", 1)[-1].lower()
    return "" if name in policy.keys else match.group(0)
