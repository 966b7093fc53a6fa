"""Misfire policies of recurring masters: what to create after downtime (pure).

A backlog exists only when at least two occurrences are already due when the master is
claimed. A single due occurrence always runs normally. With a backlog, the master's policy
decides:

* ``SKIP`` creates none of them and resumes at the next future fire time;
* ``FIRE_ONCE`` creates only the oldest overdue occurrence;
* ``CATCH_UP(n)`` creates up to ``n`` overdue occurrences, oldest first, and drops the rest.

The default is ``catch_up(11)``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from ratchet.domain.errors import InvalidJobOptions
from ratchet.domain.quartz import CronExpression

__all__ = [
    "DEFAULT_CATCH_UP",
    "InvalidMisfirePolicy",
    "MisfireDecision",
    "MisfireKind",
    "RecurringMisfirePolicy",
    "plan_fires",
]

DEFAULT_CATCH_UP = 11
"""The default catch-up limit: the oldest overdue occurrence plus ten more."""


class InvalidMisfirePolicy(InvalidJobOptions):
    """A misfire policy is unknown or its catch-up limit is not a positive int."""


class MisfireKind(enum.StrEnum):
    """The stored name of a misfire policy."""

    SKIP = "SKIP"
    FIRE_ONCE = "FIRE_ONCE"
    CATCH_UP = "CATCH_UP"


def _kind(value: object) -> MisfireKind:
    try:
        return MisfireKind(str(value).strip().upper())
    except ValueError:
        raise InvalidMisfirePolicy(
            f"unknown misfire policy {value!r}; allowed SKIP, FIRE_ONCE, CATCH_UP"
        ) from None


@dataclass(frozen=True)
class RecurringMisfirePolicy:
    """How a recurring master treats a backlog of overdue occurrences.

    Build one with :meth:`skip`, :meth:`fire_once` or :meth:`catch_up`. ``max_catch_up`` only
    matters for CATCH_UP; the other kinds always carry 1.
    """

    kind: MisfireKind
    max_catch_up: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.kind, MisfireKind):
            object.__setattr__(self, "kind", _kind(self.kind))
        n = self.max_catch_up
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidMisfirePolicy(f"catch-up limit must be an int >= 1, got {n!r}")
        if self.kind is not MisfireKind.CATCH_UP and n != 1:
            object.__setattr__(self, "max_catch_up", 1)

    @classmethod
    def skip(cls) -> RecurringMisfirePolicy:
        """Drop every overdue occurrence of a backlog; resume at the next future time."""
        return cls(MisfireKind.SKIP)

    @classmethod
    def fire_once(cls) -> RecurringMisfirePolicy:
        """Create only the oldest overdue occurrence of a backlog."""
        return cls(MisfireKind.FIRE_ONCE)

    @classmethod
    def catch_up(cls, n: int = DEFAULT_CATCH_UP) -> RecurringMisfirePolicy:
        """Create up to ``n`` (>= 1) overdue occurrences, oldest first; drop the rest.

        :raises InvalidMisfirePolicy: ``n`` is not an int >= 1.
        """
        return cls(MisfireKind.CATCH_UP, n)

    @classmethod
    def default(cls) -> RecurringMisfirePolicy:
        """``catch_up(11)``."""
        return cls.catch_up(DEFAULT_CATCH_UP)

    def to_storage(self) -> tuple[str, int]:
        """The ``(misfire_policy, max_catch_up_executions)`` column values."""
        return (self.kind.value, self.max_catch_up)

    @classmethod
    def from_storage(cls, kind: str, n: int) -> RecurringMisfirePolicy:
        """Rebuild a policy from its columns; ``n`` is ignored for SKIP and FIRE_ONCE.

        :raises InvalidMisfirePolicy: the kind is unknown or a CATCH_UP limit is below 1.
        """
        parsed = _kind(kind)
        return cls(parsed, n) if parsed is MisfireKind.CATCH_UP else cls(parsed)

    def __str__(self) -> str:
        if self.kind is MisfireKind.CATCH_UP:
            return f"CATCH_UP({self.max_catch_up})"
        return self.kind.value


@dataclass(frozen=True)
class MisfireDecision:
    """What to do now: occurrences to create (oldest first) and the master's new next fire.

    ``next_fire`` is strictly after ``now``, or None when the schedule has ended.
    """

    fire_times: tuple[datetime, ...]
    next_fire: datetime | None


def _require_aware(name: str, value: datetime) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got {value.isoformat()}")


def plan_fires(
    cron: CronExpression,
    zone: ZoneInfo,
    next_fire: datetime,
    now: datetime,
    policy: RecurringMisfirePolicy,
    max_scan: int = 10_000,
) -> MisfireDecision:
    """Decide which due occurrences to create for a master whose stored next fire is
    ``next_fire``.

    Occurrences due at ``now`` (``<= now``) start at ``next_fire`` and follow ``cron`` in
    ``zone``. With none due nothing fires and ``next_fire`` stays. One due occurrence runs
    under every policy; two or more are a backlog handled by ``policy``. At most ``max_scan``
    overdue occurrences are ever enumerated, so a long downtime costs no more than that, and the
    new next fire is found by searching from ``now``.

    :raises ValueError: a datetime is naive or ``max_scan`` < 1.
    """
    _require_aware("next_fire", next_fire)
    _require_aware("now", now)
    if isinstance(max_scan, bool) or not isinstance(max_scan, int) or max_scan < 1:
        raise ValueError(f"max_scan must be an int >= 1, got {max_scan!r}")
    # Compare instants in UTC: two datetimes sharing a ZoneInfo compare by wall time, fold
    # ignored, which is wrong inside a fall-back overlap.
    now_utc = now.astimezone(UTC)
    if next_fire.astimezone(UTC) > now_utc:
        return MisfireDecision((), next_fire)

    keep = min(policy.max_catch_up, max_scan) if policy.kind is MisfireKind.CATCH_UP else 1
    wanted = max(2, keep)  # two tell a backlog from a single due occurrence
    due: list[datetime] = [next_fire.astimezone(zone)]
    while len(due) < wanted:
        following = cron.next_after(due[-1], zone, now=now)
        if following is None or following.astimezone(UTC) > now_utc:
            break
        due.append(following)

    if len(due) == 1 or policy.kind is MisfireKind.FIRE_ONCE:
        fires: tuple[datetime, ...] = (due[0],)
    elif policy.kind is MisfireKind.SKIP:
        fires = ()
    else:
        fires = tuple(due[:keep])
    return MisfireDecision(fires, cron.next_after(now, zone))
