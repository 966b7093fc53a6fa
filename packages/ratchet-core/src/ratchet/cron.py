"""Quartz cron expressions for recurring jobs: validate them and list their next fire times.

>>> from datetime import datetime, timezone
>>> [t.isoformat() for t in next_fire_times("0 30 8 ? * MON-FRI", "Europe/London",
...                                          datetime(2024, 3, 29, tzinfo=timezone.utc), 2)]
['2024-03-29T08:30:00+00:00', '2024-04-01T08:30:00+01:00']
"""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache
from zoneinfo import ZoneInfo

from ratchet.domain.quartz import (
    HORIZON_YEARS,
    MAX_YEAR,
    CronExpression,
    InvalidCronExpression,
    UnknownTimeZone,
    resolve_zone,
)

__all__ = [
    "CronExpression",
    "InvalidCronExpression",
    "UnknownTimeZone",
    "cron_next_lines",
    "next_fire_times",
    "parse",
    "resolve_zone",
    "validate",
]


@lru_cache(maxsize=256)
def parse(expression: str) -> CronExpression:
    """The parsed expression (cached; parsing is pure).

    :raises InvalidCronExpression: the text is not a valid Quartz expression.
    """
    return CronExpression.parse(expression)


def _zone(zone: str | ZoneInfo) -> ZoneInfo:
    return zone if isinstance(zone, ZoneInfo) else resolve_zone(zone)


def validate(expression: str, zone: str | ZoneInfo = "UTC") -> CronExpression:
    """Check an expression and a zone together; return the parsed expression.

    :raises InvalidCronExpression: the expression is not valid Quartz syntax.
    :raises UnknownTimeZone: the zone is not a known IANA zone.
    """
    parsed = parse(expression)
    _zone(zone)
    return parsed


def next_fire_times(
    expression: str,
    zone: str | ZoneInfo,
    after: datetime,
    count: int,
    *,
    now: datetime | None = None,
) -> list[datetime]:
    """Up to ``count`` fire times strictly after ``after``, oldest first, as aware datetimes in
    ``zone``. Fewer come back when the schedule ends (its last year has passed) or its next fire
    lies beyond the search horizon: the end of the year 100 years after the year of ``now``
    (the present; defaults to ``after``), the same for the whole list.

    :raises ValueError: ``after`` or ``now`` is naive, or ``count`` is negative.
    :raises InvalidCronExpression: the expression is not valid Quartz syntax.
    :raises UnknownTimeZone: the zone is not a known IANA zone.
    """
    if after.tzinfo is None or after.utcoffset() is None:
        raise ValueError(
            f"after must be a timezone-aware datetime (e.g. with tzinfo=timezone.utc), "
            f"got naive {after.isoformat()}"
        )
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"count must be a non-negative int, got {count!r}")
    parsed = parse(expression)
    tz = _zone(zone)
    fires: list[datetime] = []
    current: datetime | None = after
    present = after if now is None else now
    while len(fires) < count and current is not None:
        current = parsed.next_after(current, tz, now=present)
        if current is not None:
            fires.append(current)
    return fires


def cron_next_lines(
    expression: str, zone: str | ZoneInfo, after_iso: str | None, count: int, now: datetime
) -> list[str]:
    """Lines for ``ratchet cron next``: one ISO-8601 fire time with its UTC offset per line.

    ``after_iso`` defaults to ``now``; an ISO time without an offset is read as a wall time in
    ``zone``. The search horizon is a century after ``now``.

    :raises ValueError: ``after_iso`` is not ISO-8601, ``now`` is naive or ``count`` < 0; or
        the expression has no fire time after ``after_iso`` (the message says why).
    :raises InvalidCronExpression: the expression is not valid Quartz syntax.
    :raises UnknownTimeZone: the zone is not a known IANA zone.
    """
    tz = _zone(zone)
    if after_iso is None:
        after = now
    else:
        try:
            after = datetime.fromisoformat(after_iso.strip())
        except ValueError:
            raise ValueError(
                f"--after {after_iso!r} is not an ISO-8601 date-time "
                "(e.g. 2024-03-10T00:00:00+00:00)"
            ) from None
        if after.tzinfo is None:
            after = after.replace(tzinfo=tz)
    lines = [fire.isoformat() for fire in next_fire_times(expression, tz, after, count, now=now)]
    if not lines and count:
        raise ValueError(
            f"{expression.strip()!r} never fires after {after.isoformat(timespec='seconds')} in {tz.key}: "
            f"{_why_no_fire(parse(expression), after.astimezone(tz).year, now.astimezone(tz).year)}"
        )
    return lines


def _why_no_fire(parsed: CronExpression, after_year: int, present_year: int) -> str:
    """Why an expression has no fire time after a year (searched up to a century ahead)."""
    last_year = min(MAX_YEAR, present_year + HORIZON_YEARS)
    if parsed.years[-1] < after_year:
        return f"its last year, {parsed.years[-1]}, is over"
    if parsed.years[0] > last_year:
        return (
            f"its first year, {parsed.years[0]}, is more than {HORIZON_YEARS} years ahead "
            "(fire times are looked for a century ahead)"
        )
    return (
        "no date matches its day-of-month, month, day-of-week and year fields together "
        "(such as the 30th of February)"
    )
