"""The values of the query API: what to look for, a page of jobs, its cursor, queue health.

Pages are keyset pages: jobs come newest first (job id descending; ids are UUIDv7, so this is
creation order), and a page's cursor names the last job it holds. The next page starts strictly
after that id, so every page costs an index range scan of ``limit`` rows however deep it is,
and jobs created while a caller pages never shift the pages after them.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ratchet.domain.errors import RatchetError
from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.model import AttemptRecord, JobRecord
from ratchet.domain.options import validate_option_text
from ratchet.domain.workflow import WorkflowCondition

#: The largest page a caller may ask for.
MAX_PAGE = 1000
#: The page size when none is given.
DEFAULT_PAGE = 50

_CURSOR_VERSION = 1
_CURSOR_LEN = 1 + 16 + 8 + 8  # version, job id, query fingerprint, checksum
_CHECK_KEY = b"ratchet-cursor-v1"


class InvalidQuery(RatchetError, ValueError):
    """A query's filters or page size are out of range; the message says which and why."""


class InvalidCursor(InvalidQuery):
    """A cursor is not one this API made, was altered, or belongs to a query with other
    filters."""


@dataclass(frozen=True)
class JobQuery:
    """Which jobs to list. Every field left empty matches everything; the fields combine with
    AND, and ``statuses`` with OR among themselves.

    Times are bounds on ``created_at`` / ``terminated_at``: ``*_after`` inclusive, ``*_before``
    exclusive. ``workflow_id`` matches the flow's first job and every job created with it (chain
    steps and branches). ``batch_id`` matches the batch's children.
    """

    statuses: tuple[JobStatus, ...] = ()
    target: str | None = None
    tag: str | None = None
    business_key: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    finished_after: datetime | None = None
    finished_before: datetime | None = None
    recurring_master_id: uuid.UUID | None = None
    batch_id: uuid.UUID | None = None
    workflow_id: uuid.UUID | None = None

    def __post_init__(self) -> None:
        statuses = self.statuses
        if isinstance(statuses, (str, JobStatus)):
            statuses = (statuses,)
        try:
            normal = tuple(dict.fromkeys(JobStatus(str(s).upper()) for s in statuses))
        except ValueError:
            known = ", ".join(s.value for s in JobStatus)
            raise InvalidQuery(f"unknown status in {list(statuses)!r}; known: {known}") from None
        object.__setattr__(self, "statuses", normal)
        for name in ("target", "tag", "business_key"):
            value = getattr(self, name)
            if value is not None:
                validate_option_text(value, name)
                if not value:
                    raise InvalidQuery(f"{name} must not be empty (leave it out to match all)")
        if self.tag is not None:
            object.__setattr__(self, "tag", self.tag.lower())
        for name in ("created_after", "created_before", "finished_after", "finished_before"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
                raise InvalidQuery(f"{name} must be a timezone-aware datetime, got {value!r}")
        for low, high in (
            (self.created_after, self.created_before),
            (self.finished_after, self.finished_before),
        ):
            if low is not None and high is not None and low >= high:
                raise InvalidQuery(
                    f"empty time range: {low.isoformat()} is not before {high.isoformat()}"
                )
        for name in ("recurring_master_id", "batch_id", "workflow_id"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, uuid.UUID):
                raise InvalidQuery(f"{name} must be a UUID, got {value!r}")

    def fingerprint(self) -> bytes:
        """Eight bytes that differ, in practice, between queries with different filters."""
        parts = [
            ",".join(s.value for s in sorted(self.statuses, key=lambda s: s.value)),
            self.target,
            self.tag,
            self.business_key,
            *(
                None if t is None else str(int(t.timestamp() * 1_000_000))
                for t in (
                    self.created_after,
                    self.created_before,
                    self.finished_after,
                    self.finished_before,
                )
            ),
            *(
                None if i is None else i.hex
                for i in (self.recurring_master_id, self.batch_id, self.workflow_id)
            ),
        ]
        text = "\x1f".join("\x1e" if p is None else p for p in parts)
        return hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()


def check_limit(limit: int) -> int:
    """``limit`` if it is a page size the API serves (1..:data:`MAX_PAGE`).

    :raises InvalidQuery: anything else.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidQuery(f"limit must be an integer from 1 to {MAX_PAGE}, got {limit!r}")
    return limit


def _checksum(body: bytes) -> bytes:
    return hashlib.blake2b(body, key=_CHECK_KEY, digest_size=8).digest()


def encode_cursor(last_id: uuid.UUID, query: JobQuery) -> str:
    """The opaque cursor of the page after the one ending with ``last_id``, bound to
    ``query``'s filters. URL-safe text without padding."""
    body = bytes([_CURSOR_VERSION]) + last_id.bytes + query.fingerprint()
    return base64.urlsafe_b64encode(body + _checksum(body)).decode("ascii").rstrip("=")


def decode_cursor(cursor: str, query: JobQuery) -> uuid.UUID:
    """The job id a cursor continues after.

    :raises InvalidCursor: ``cursor`` is not text this API made, was altered (its checksum
        fails), or was made for a query with other filters.
    """
    if not isinstance(cursor, str) or not cursor or len(cursor) > 64:
        raise InvalidCursor("not a cursor of this API (pass the next_cursor of a page as it is)")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (ValueError, TypeError):
        raise InvalidCursor("not a cursor of this API (it is not URL-safe base64)") from None
    if len(raw) != _CURSOR_LEN or raw[0] != _CURSOR_VERSION:
        raise InvalidCursor("not a cursor of this API (wrong length or version)")
    body, check = raw[:-8], raw[-8:]
    if _checksum(body) != check:
        raise InvalidCursor("the cursor was altered (its checksum does not match)")
    if body[17:25] != query.fingerprint():
        raise InvalidCursor(
            "the cursor belongs to a query with other filters: page with the filters that "
            "returned it, or start again without a cursor"
        )
    return uuid.UUID(bytes=body[1:17])


@dataclass(frozen=True)
class JobPage:
    """One page of a listing: its jobs, newest first, and the cursor of the next page (None:
    this is the last page)."""

    items: tuple[JobRecord, ...]
    next_cursor: str | None

    def __iter__(self) -> Iterator[JobRecord]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


@dataclass(frozen=True)
class JobHistory:
    """A job with its attempts, oldest first (each with its error and traceback)."""

    job: JobRecord
    attempts: tuple[AttemptRecord, ...]


@dataclass(frozen=True)
class JobLink:
    """One edge of a workflow: ``child_id`` waits for ``parent_id`` to end. A chain step has
    no ``condition`` (it runs when its parent succeeds); a branch runs only if its
    ``condition`` holds when the parent ends."""

    parent_id: uuid.UUID
    child_id: uuid.UUID
    condition: WorkflowCondition | None = None
    description: str | None = None


@dataclass(frozen=True)
class RunningJob:
    """A job a node holds now (RUNNING or reserved as QUEUED)."""

    job_id: uuid.UUID
    node_id: str
    status: JobStatus
    target: str
    picked_at: datetime | None


@dataclass(frozen=True)
class QueueHealth:
    """The queue at one instant (``at``, the caller's clock).

    ``due_now`` counts PENDING jobs whose time has come; ``oldest_due`` is the scheduled time of
    the one that has waited longest (None: nothing is due). The throughput counts are jobs that
    ended within ``window`` before ``at``.
    """

    at: datetime
    window: timedelta
    live: Mapping[str, int]
    failed: int
    due_now: int
    oldest_due: datetime | None
    succeeded_in_window: int
    failed_in_window: int
    canceled_in_window: int
    running_by_node: Mapping[str, int] = field(default_factory=dict)

    @property
    def pending(self) -> int:
        return self.live.get(JobStatus.PENDING.value, 0)

    @property
    def running(self) -> int:
        return self.live.get(JobStatus.RUNNING.value, 0)

    @property
    def oldest_pending_age(self) -> timedelta | None:
        """How long the longest-waiting due job has waited past its scheduled time."""
        if self.oldest_due is None:
            return None
        return max(timedelta(0), self.at - self.oldest_due)

    @property
    def finished_in_window(self) -> int:
        return self.succeeded_in_window + self.failed_in_window + self.canceled_in_window

    @property
    def throughput_per_minute(self) -> float:
        """Jobs ended per minute over the window."""
        minutes = self.window / timedelta(minutes=1)
        return self.finished_in_window / minutes if minutes > 0 else 0.0
