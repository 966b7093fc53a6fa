"""Recurring masters: the values that cross the store boundary, and their rules (pure).

A *recurring master* is one schedule: a Quartz cron expression in a time zone, a target with
JSON arguments, the options every occurrence gets, and a misfire policy. Each fire time becomes
an ordinary job linked to its master (``recurring_master_id``). The master stores the next fire
time; the materializer advances it as it creates occurrences.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from ratchet.domain.lifecycle import JobPriority
from ratchet.domain.misfire import RecurringMisfirePolicy
from ratchet.domain.model import NewJob
from ratchet.domain.options import BackoffPolicy

__all__ = [
    "FIRE_TIME_PARAM",
    "MASTER_PARAM",
    "FirePlan",
    "MaterializedFire",
    "NewRecurring",
    "RecurringRecord",
    "RecurringSource",
    "RecurringStatus",
    "SyncReport",
    "fire_idempotency_key",
]

MASTER_PARAM = "ratchet.recurring_master_id"
"""Job parameter of every occurrence: the id of its master (``JobContext.param``)."""
FIRE_TIME_PARAM = "ratchet.fire_time"
"""Job parameter of every occurrence: its fire time, ISO 8601 in the master's zone."""


class RecurringStatus(enum.StrEnum):
    """Where a master is in its life. Persisted by name."""

    ACTIVE = "ACTIVE"
    """Fires on schedule (unless paused). Holds its business key."""
    CANCELED = "CANCELED"
    """Canceled by an operator or because its decorator was removed. Terminal."""
    EXHAUSTED = "EXHAUSTED"
    """Its schedule has no fire time left (a past year). Terminal."""


class RecurringSource(enum.StrEnum):
    """Who created a master: the API (``schedule_recurring``) or a ``@app.recurring`` decorator.

    Only decorator masters are cancelled when their decorator disappears.
    """

    API = "API"
    DECORATOR = "DECORATOR"


def fire_idempotency_key(master_id: uuid.UUID, fire: datetime) -> str:
    """The idempotency key of one occurrence: the same master and instant give the same key,
    so an occurrence is stored at most once whoever creates it (57 ASCII characters)."""
    micros = (fire.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    return f"rec:{master_id.hex}:{micros}"


@dataclass(frozen=True)
class NewRecurring:
    """A master about to be stored (or a decorator's wanted state of one)."""

    recurring_id: uuid.UUID
    cron: str
    zone: str
    target: str
    payload: str
    next_fire: datetime | None
    created_at: datetime
    priority: JobPriority = JobPriority.NORMAL
    max_retries: int = 0
    backoff: BackoffPolicy = BackoffPolicy.NONE
    backoff_delay: timedelta = timedelta(0)
    timeout: timedelta | None = None
    tags: tuple[str, ...] = ()
    params: Mapping[str, str] = field(default_factory=dict)
    business_key: str | None = None
    name: str | None = None
    misfire: RecurringMisfirePolicy = field(default_factory=RecurringMisfirePolicy.default)
    source: RecurringSource = RecurringSource.API

    def definition(self) -> tuple[object, ...]:
        """The fields a decorator controls (equal tuples: nothing to update)."""
        return (
            self.name,
            self.cron,
            self.zone,
            self.target,
            self.payload,
            int(self.priority),
            self.max_retries,
            self.backoff.value,
            self.backoff_delay,
            self.timeout,
            tuple(self.tags),
            tuple(sorted(self.params.items())),
            self.misfire.to_storage(),
        )


@dataclass(frozen=True)
class RecurringRecord(NewRecurring):
    """A stored master, as read back."""

    status: RecurringStatus = RecurringStatus.ACTIVE
    paused: bool = False
    paused_at: datetime | None = None
    last_fire: datetime | None = None
    """The newest fire time created so far (None before the first)."""
    updated_at: datetime | None = None
    ended_at: datetime | None = None

    @property
    def is_active(self) -> bool:
        return self.status is RecurringStatus.ACTIVE


@dataclass(frozen=True)
class FirePlan:
    """What to do with one due master now: the occurrences to insert and its new next fire
    (None: the schedule has ended)."""

    jobs: Sequence[NewJob]
    next_fire: datetime | None
    last_fire: datetime | None


@dataclass(frozen=True)
class MaterializedFire:
    """One occurrence the materializer created."""

    job_id: uuid.UUID
    recurring_id: uuid.UUID
    fire_time: datetime
    target: str
    inserted: bool = True
    """False if another node had already stored it (its idempotency key was taken)."""


@dataclass(frozen=True)
class SyncReport:
    """What registering the decorators did, by business key."""

    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    canceled: tuple[str, ...] = ()
