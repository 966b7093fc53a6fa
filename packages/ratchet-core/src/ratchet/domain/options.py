"""Job options and their validation (pure)."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from ratchet.domain.errors import InvalidJobOptions
from ratchet.domain.lifecycle import JobPriority
from ratchet.domain.text import is_storable_text

if TYPE_CHECKING:
    from ratchet.domain.model import JobRecord

MAX_TAG_LENGTH = 64
MAX_BACKOFF = timedelta(hours=24)
MAX_TIMEOUT = timedelta(seconds=2**31 - 1)


class BackoffPolicy(enum.StrEnum):
    """How long to wait before a retry."""

    NONE = "NONE"
    """Retry at once."""
    FIXED = "FIXED"
    """Wait the base delay before every retry."""
    EXPONENTIAL = "EXPONENTIAL"
    """Wait base * 2^(attempt-1), capped at 24 hours."""


def validate_option_text(value: str, what: str) -> str:
    """``value`` unchanged, if every store can keep it as text (see :mod:`ratchet.domain.text`).

    Every option string a user passes (tags, params, names, descriptions) and every string a
    lookup compares with stored ones goes through here, so all stores answer alike. Refused are
    NUL (U+0000: PostgreSQL's ``text`` cannot hold it, SQLite and MariaDB can) and lone
    surrogates (U+D800..U+DFFF alone: not Unicode text, no database stores them as UTF-8). Any
    other character is kept, non-ASCII included. (Text the scheduler writes on its own, such as
    error messages, is escaped with :func:`~ratchet.domain.text.storable_text` instead: a user's
    option is refused, so that what is stored is what was asked for.)

    :param what: what the string is, for the message (``"tag"``, ``"param 'tenant'"``).
    :raises InvalidJobOptions: not a string, or one of those characters (named with its position).
    """
    if not isinstance(value, str):
        raise InvalidJobOptions(f"{what} must be a string, got {type(value).__name__}")
    if is_storable_text(value):
        return value
    shown = repr(value) if len(value) <= 40 else f"{value[:40]!r}..."
    nul = value.find("\x00")
    if nul >= 0:
        raise InvalidJobOptions(
            f"{what} {shown} contains a NUL character (U+0000) at position {nul}; not every "
            "database can store it in text: remove it (put binary data in job arguments)"
        )
    at = next(i for i, c in enumerate(value) if "\ud800" <= c <= "\udfff")
    raise InvalidJobOptions(
        f"{what} {shown} contains a lone surrogate (U+{ord(value[at]):04X}) at position {at}, "
        "which is not valid Unicode text and cannot be stored as UTF-8; it usually comes from "
        "bytes decoded with errors='surrogateescape'"
    )


def normalize_tags(tags: Iterable[str]) -> tuple[str, ...]:
    """Trim and lower-case tags, drop blanks and duplicates, keep first-seen order.

    :raises InvalidJobOptions: a tag is not a string, is longer than 64 characters, or holds a
        character no store can keep (see :func:`validate_option_text`).
    """
    if isinstance(tags, str):
        raise InvalidJobOptions(f"tags must be a collection of strings, not the string {tags!r}")
    seen: dict[str, None] = {}
    for tag in tags:
        if not isinstance(tag, str):
            raise InvalidJobOptions(f"tags must be strings, got {type(tag).__name__}")
        norm = validate_option_text(tag, "tag").strip().lower()
        if not norm:
            continue
        if len(norm) > MAX_TAG_LENGTH:
            raise InvalidJobOptions(
                f"tag {norm[:20]!r}... is {len(norm)} characters; at most {MAX_TAG_LENGTH} allowed"
            )
        seen[norm] = None
    return tuple(seen)


def job_priority(value: object) -> JobPriority:
    """``value`` as a :class:`JobPriority`: a member, or its value 0..4. The one priority scale
    of every API (jobs, batches, recurring masters and their decorator).

    :raises InvalidJobOptions: anything else (``True``, ``2.0``, ``"HIGH"``, 5).
    """
    if isinstance(value, JobPriority):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 4:
        return JobPriority(value)
    raise InvalidJobOptions(
        "priority must be 0..4 (LOWEST 0, LOW 1, NORMAL 2, HIGH 3, CRITICAL 4) or a "
        f"JobPriority, got {value!r}"
    )


@dataclass(frozen=True)
class JobOptions:
    """Everything a job can be told besides its target and arguments."""

    priority: JobPriority = JobPriority.NORMAL
    max_retries: int = 0
    backoff: BackoffPolicy = BackoffPolicy.NONE
    backoff_delay: timedelta = timedelta(0)
    timeout: timedelta | None = None
    tags: tuple[str, ...] = ()
    params: Mapping[str, str] = field(default_factory=dict)
    immediate: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "priority", job_priority(self.priority))
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int):
            raise InvalidJobOptions(f"max_retries must be an int, got {self.max_retries!r}")
        if self.max_retries < 0:
            raise InvalidJobOptions(f"max_retries must be >= 0, got {self.max_retries}")
        if not isinstance(self.backoff, BackoffPolicy):
            try:
                if not isinstance(self.backoff, str):
                    raise ValueError(self.backoff)
                object.__setattr__(self, "backoff", BackoffPolicy(self.backoff.upper()))
            except ValueError:
                raise InvalidJobOptions(
                    f"backoff must be one of NONE, FIXED, EXPONENTIAL; got {self.backoff!r}"
                ) from None
        if not isinstance(self.backoff_delay, timedelta) or self.backoff_delay < timedelta(0):
            raise InvalidJobOptions(
                f"backoff delay must be a non-negative timedelta, got {self.backoff_delay!r}"
            )
        if self.timeout is not None:
            if not isinstance(self.timeout, timedelta) or self.timeout <= timedelta(0):
                raise InvalidJobOptions(
                    f"timeout must be a positive timedelta, got {self.timeout!r}"
                )
            if self.timeout > MAX_TIMEOUT:
                raise InvalidJobOptions("timeout is longer than 2**31-1 seconds")
        object.__setattr__(self, "tags", normalize_tags(self.tags))
        params = dict(self.params)
        for key, value in params.items():
            if not isinstance(key, str) or not key.strip():
                raise InvalidJobOptions(f"param keys must be non-blank strings, got {key!r}")
            if not isinstance(value, str):
                raise InvalidJobOptions(
                    f"param {key!r} must be a string, got {type(value).__name__}"
                )
            validate_option_text(key, "param name")
            validate_option_text(value, f"param {key!r}")
        object.__setattr__(self, "params", params)

    @classmethod
    def from_record(cls, record: JobRecord) -> JobOptions:
        """The options a stored job was submitted with (``immediate`` is not stored: False).

        ``dataclasses.replace(JobOptions.from_record(old), priority=...)`` changes one option
        and keeps the others, e.g. for ``app.replace(..., options=...)``.
        """
        return cls(
            priority=record.priority,
            max_retries=record.max_retries,
            backoff=record.backoff,
            backoff_delay=record.backoff_delay,
            timeout=record.timeout,
            tags=record.tags,
            params=record.params,
        )
