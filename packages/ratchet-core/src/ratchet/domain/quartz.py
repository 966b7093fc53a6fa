"""Quartz cron expressions: parsing and evaluation in a time zone (pure).

An expression has 6 or 7 whitespace-separated fields::

    second minute hour day-of-month month day-of-week [year]

Evaluation walks wall-clock candidates field by field (year, month, day, hour, minute, second)
over precomputed value sets, so even rare schedules are found quickly. Daylight saving time
follows one rule: a wall time that does not exist (spring-forward gap) is skipped, and a wall time
that happens twice (fall-back overlap) fires once, at its first occurrence.

A search looks a century ahead of the present, as Quartz does: fire times in years more than
:data:`HORIZON_YEARS` after the present year are not found. The present is a parameter.

Nothing here reads the clock or does I/O beyond what :mod:`zoneinfo` does to load a zone.
"""

from __future__ import annotations

import calendar
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import TypeAlias
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ratchet.domain.errors import RatchetError

__all__ = [
    "HORIZON_YEARS",
    "MAX_YEAR",
    "MIN_YEAR",
    "CronExpression",
    "InvalidCronExpression",
    "UnknownTimeZone",
    "resolve_zone",
]

MIN_YEAR = 1970
"""The first year a cron expression can fire in, and the lowest value of its year field."""
MAX_YEAR = 2999
"""The highest value of the year field; nothing fires after this year, whatever the present."""
HORIZON_YEARS = 100
"""How far a search looks ahead: up to the end of the year this many years after the present
one. A year field may name later years; they fire once the present has come close enough."""

_ONE_SECOND = timedelta(seconds=1)


class InvalidCronExpression(RatchetError, ValueError):
    """A cron expression is not valid Quartz syntax.

    ``expression`` is the text as given, ``field`` names the field at fault ("hour",
    "day-of-week", ... or "expression" when the whole text is wrong) and ``token`` is the
    offending piece of text.
    """

    def __init__(self, expression: str, field: str, token: str, detail: str) -> None:
        super().__init__(f"invalid cron expression {expression!r}: {detail}")
        self.expression = expression
        self.field = field
        self.token = token
        self.detail = detail


class UnknownTimeZone(RatchetError, ValueError):
    """A time zone name is not a known IANA zone."""

    def __init__(self, zone: str) -> None:
        super().__init__(
            f"unknown time zone {zone!r}; use an IANA name such as 'UTC' or 'America/New_York'"
        )
        self.zone = zone


def resolve_zone(name: str) -> ZoneInfo:
    """The IANA zone called ``name``.

    :raises UnknownTimeZone: the name is empty, malformed or not in the zone database.
    """
    if not isinstance(name, str) or not name.strip():
        raise UnknownTimeZone(str(name))
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise UnknownTimeZone(name) from None


# --------------------------------------------------------------------------------------------
# Field definitions


@dataclass(frozen=True)
class _FieldSpec:
    name: str
    low: int
    high: int
    max_step: int
    names: Mapping[str, int]

    def allowed(self) -> str:
        text = f"{self.low}-{self.high}"
        if self.names:
            first, last = next(iter(self.names)), list(self.names)[-1]
            text += f" or {first}-{last}"
        return text


_MONTH_NAMES = {
    name: number
    for number, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"),
        start=1,
    )
}
_DAY_NAMES = {
    name: number
    for number, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"), start=1)
}

_SECOND = _FieldSpec("second", 0, 59, 59, {})
_MINUTE = _FieldSpec("minute", 0, 59, 59, {})
_HOUR = _FieldSpec("hour", 0, 23, 23, {})
_DAY_OF_MONTH = _FieldSpec("day-of-month", 1, 31, 31, {})
_MONTH = _FieldSpec("month", 1, 12, 12, _MONTH_NAMES)
_DAY_OF_WEEK = _FieldSpec("day-of-week", 1, 7, 7, _DAY_NAMES)
_YEAR = _FieldSpec("year", MIN_YEAR, MAX_YEAR, MAX_YEAR - MIN_YEAR, {})

_DAY_FIELDS = "day-of-month/day-of-week"
_NUMBER = re.compile(r"[0-9]+")
_DOM_LAST = re.compile(r"L(?:-([0-9]+))?(W?)")
_DOM_NEAREST = re.compile(r"([0-9]+)W")
_DOW_LAST = re.compile(r"([0-9]+|[A-Z]+)L")
_DOW_NTH = re.compile(r"([0-9]+|[A-Z]+)#(.*)")


def _small_int(digits: str) -> int:
    """The value of a run of ASCII digits; absurdly long runs become a large out-of-range value
    (``int()`` refuses more than 4300 digits)."""
    return int(digits) if len(digits) <= 6 else 10**6


class _Parser:
    """Parses the fields of one expression, raising errors that quote it."""

    def __init__(self, expression: str) -> None:
        self.expression = expression

    def fail(self, spec: _FieldSpec | str, token: str, detail: str) -> InvalidCronExpression:
        name = spec if isinstance(spec, str) else spec.name
        return InvalidCronExpression(self.expression, name, token, detail)

    def value(self, spec: _FieldSpec, token: str) -> int:
        if token == "":
            raise self.fail(
                spec, token, f"{spec.name} has an empty value; allowed {spec.allowed()}"
            )
        if token == "?":
            raise self.fail(
                spec,
                token,
                f"'?' in {spec.name} must stand alone, and only in day-of-month or day-of-week",
            )
        if _NUMBER.fullmatch(token):
            number = _small_int(token)
        elif token in spec.names:
            number = spec.names[token]
        else:
            if spec.names:
                what = "unknown name"
            elif any(ch in token for ch in "LW#") and spec not in (_DAY_OF_MONTH, _DAY_OF_WEEK):
                what = "special character ('L', 'W' and '#' belong to day fields only)"
            else:
                what = "non-numeric value"
            raise self.fail(
                spec, token, f"{spec.name} has {what} {token!r}; allowed {spec.allowed()}"
            )
        if not spec.low <= number <= spec.high:
            raise self.fail(
                spec, token, f"{spec.name} value {token} out of range; allowed {spec.allowed()}"
            )
        return number

    def step(self, spec: _FieldSpec, token: str) -> int:
        if not _NUMBER.fullmatch(token) or not 1 <= _small_int(token) <= spec.max_step:
            raise self.fail(
                spec, token, f"{spec.name} step {token!r} is invalid; allowed 1-{spec.max_step}"
            )
        return _small_int(token)

    def item(self, spec: _FieldSpec, item: str) -> list[int]:
        base, slash, step_text = item.partition("/")
        step = self.step(spec, step_text) if slash else 1
        if base == "*":
            start, end = spec.low, spec.high
        elif "-" in base:
            first, _, last = base.partition("-")
            start, end = self.value(spec, first), self.value(spec, last)
            if start > end and spec is _YEAR:
                raise self.fail(
                    spec, item, f"year range {item!r} runs backwards; write the earlier year first"
                )
        else:
            start = self.value(spec, base)
            end = spec.high if slash else start
        # A range whose end is below its start wraps around (Quartz: 22-2 hours, FRI-MON).
        span = spec.high - spec.low + 1
        length = (end - start) % span + 1
        return [spec.low + (start - spec.low + k) % span for k in range(0, length, step)]

    def values(self, spec: _FieldSpec, text: str) -> tuple[int, ...]:
        found: set[int] = set()
        for item in text.split(","):
            if item == "":
                raise self.fail(spec, text, f"{spec.name} {text!r} has an empty list item")
            found.update(self.item(spec, item))
        return tuple(sorted(found))

    def day_of_month(self, text: str) -> _DayRule | None:
        if text == "?":
            return None
        if "L" in text or "W" in text:
            if "," in text:
                raise self.fail(
                    _DAY_OF_MONTH,
                    text,
                    f"day-of-month {text!r} combines 'L' or 'W' with a list; they must stand alone",
                )
            match = _DOM_LAST.fullmatch(text)
            if match:
                offset = _small_int(match[1] or "0")
                if offset > 30:
                    raise self.fail(
                        _DAY_OF_MONTH,
                        text,
                        f"day-of-month offset in {text!r} is too large; allowed L-0 to L-30",
                    )
                return _LastDayOfMonth(offset, bool(match[2]))
            match = _DOM_NEAREST.fullmatch(text)
            if match:
                return _NearestWeekday(self.value(_DAY_OF_MONTH, match[1]))
            raise self.fail(
                _DAY_OF_MONTH,
                text,
                f"day-of-month {text!r} misuses 'L' or 'W'; allowed 'L', 'L-n', 'LW', 'L-nW' "
                "or 'nW' (n a single day 1-31)",
            )
        return _DaysOfMonth(self.values(_DAY_OF_MONTH, text))

    def day_of_week(self, text: str) -> _DayRule | None:
        if text == "?":
            return None
        if "#" in text or "L" in text:  # no day name contains an L
            if "," in text:
                raise self.fail(
                    _DAY_OF_WEEK,
                    text,
                    f"day-of-week {text!r} combines 'L' or '#' with a list; they must stand alone",
                )
            if text == "L":
                return _DaysOfWeek((7,))
            match = _DOW_LAST.fullmatch(text)
            if match:
                return _LastWeekdayOfMonth(self.value(_DAY_OF_WEEK, match[1]))
            match = _DOW_NTH.fullmatch(text)
            if match:
                day = self.value(_DAY_OF_WEEK, match[1])
                nth = match[2]
                if not _NUMBER.fullmatch(nth) or not 1 <= _small_int(nth) <= 5:
                    raise self.fail(
                        _DAY_OF_WEEK,
                        text,
                        f"day-of-week {text!r} asks for occurrence {nth!r}; allowed 1-5 after '#'",
                    )
                return _NthWeekdayOfMonth(day, _small_int(nth))
            raise self.fail(
                _DAY_OF_WEEK,
                text,
                f"day-of-week {text!r} misuses 'L' or '#'; allowed 'L', 'nL' or 'n#k' "
                "(n a day 1-7 or SUN-SAT, k 1-5)",
            )
        return _DaysOfWeek(self.values(_DAY_OF_WEEK, text))


# --------------------------------------------------------------------------------------------
# Day rules: which days of a given month match the day-of-month / day-of-week fields


def _quartz_weekday(year: int, month: int, day: int) -> int:
    """Quartz day-of-week number: 1 = Sunday ... 7 = Saturday."""
    return date(year, month, day).isoweekday() % 7 + 1


def _nearest_weekday(year: int, month: int, day: int, last: int) -> int:
    """The weekday nearest ``day`` without leaving the month (Quartz's 'W')."""
    weekday = date(year, month, day).weekday()
    if weekday == 5:  # Saturday: the Friday before, or Monday the 3rd when the 1st is a Saturday.
        return day + 2 if day == 1 else day - 1
    if weekday == 6:  # Sunday: the Monday after, or the Friday before when it ends the month.
        return day - 2 if day == last else day + 1
    return day


@dataclass(frozen=True)
class _DaysOfMonth:
    days: tuple[int, ...]

    def days_in(self, year: int, month: int) -> Sequence[int]:
        last = calendar.monthrange(year, month)[1]
        return self.days[: bisect_left(self.days, last + 1)]


@dataclass(frozen=True)
class _LastDayOfMonth:
    offset: int
    weekday: bool

    def days_in(self, year: int, month: int) -> Sequence[int]:
        last = calendar.monthrange(year, month)[1]
        target = last - self.offset
        if target < 1:
            return ()
        return (_nearest_weekday(year, month, target, last) if self.weekday else target,)


@dataclass(frozen=True)
class _NearestWeekday:
    day: int

    def days_in(self, year: int, month: int) -> Sequence[int]:
        last = calendar.monthrange(year, month)[1]
        if self.day <= last:
            return (_nearest_weekday(year, month, self.day, last),)
        # The month has no such day. Quartz counts on past the last day, into the next month,
        # and applies the Saturday/Sunday moves there. Only the day right after the last one,
        # when it is a Saturday, moves back into the month: onto its last day, a Friday.
        if self.day == last + 1 and date(year, month, last).weekday() == 4:
            return (last,)
        return ()


@dataclass(frozen=True)
class _DaysOfWeek:
    weekdays: tuple[int, ...]

    def days_in(self, year: int, month: int) -> Sequence[int]:
        first, last = calendar.monthrange(year, month)
        first_quartz = (first + 1) % 7 + 1  # calendar: Monday = 0; Quartz: Sunday = 1
        wanted = set(self.weekdays)
        return [d for d in range(1, last + 1) if (first_quartz + d - 2) % 7 + 1 in wanted]


@dataclass(frozen=True)
class _LastWeekdayOfMonth:
    weekday: int

    def days_in(self, year: int, month: int) -> Sequence[int]:
        last = calendar.monthrange(year, month)[1]
        back = (_quartz_weekday(year, month, last) - self.weekday) % 7
        return (last - back,)


@dataclass(frozen=True)
class _NthWeekdayOfMonth:
    weekday: int
    nth: int

    def days_in(self, year: int, month: int) -> Sequence[int]:
        last = calendar.monthrange(year, month)[1]
        first = 1 + (self.weekday - _quartz_weekday(year, month, 1)) % 7
        day = first + 7 * (self.nth - 1)
        return (day,) if day <= last else ()


_DayRule: TypeAlias = (
    _DaysOfMonth
    | _LastDayOfMonth
    | _NearestWeekday
    | _DaysOfWeek
    | _LastWeekdayOfMonth
    | _NthWeekdayOfMonth
)


# --------------------------------------------------------------------------------------------
# Time-zone helpers


def _offset_at(zone: ZoneInfo, timestamp: int) -> timedelta | None:
    return datetime.fromtimestamp(timestamp, zone).utcoffset()


def _first_offset_change(zone: ZoneInfo, low: datetime, high: datetime) -> datetime:
    """The first whole second in (low, high] whose UTC offset differs from low's.

    Assumes exactly one offset transition in the window (true for the DST windows searched).
    """
    lo = int(low.timestamp() // 1)
    hi = -int(-high.timestamp() // 1)
    base = _offset_at(zone, lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset_at(zone, mid) == base:
            lo = mid
        else:
            hi = mid
    return datetime.fromtimestamp(hi, UTC)


def _gap_end(wall: datetime, zone: ZoneInfo) -> datetime:
    """The first existing wall time after ``wall``, which lies in a spring-forward gap."""
    one = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    two = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    change = _first_offset_change(zone, min(one, two), max(one, two))
    end = change.astimezone(zone).replace(tzinfo=None)
    return max(end, wall + _ONE_SECOND)


def _end_of_repeat(local: datetime, zone: ZoneInfo) -> datetime:
    """For a second occurrence (fold=1) of a repeated wall time: the wall time where the repeat
    ends. Every wall time before it first happened earlier than ``local``."""
    first = local.replace(fold=0)
    old_offset = first.utcoffset() or timedelta(0)
    change = _first_offset_change(zone, first.astimezone(UTC), local.astimezone(UTC))
    return (change + old_offset).replace(tzinfo=None)


_EARLIEST_UTC = datetime(MIN_YEAR - 1, 12, 30, tzinfo=UTC)
_LATEST_UTC = datetime(MAX_YEAR + 1, 1, 2, tzinfo=UTC)


def _last_search_year(now: datetime, zone: ZoneInfo) -> int:
    """The last year whose fire times a search made at the instant ``now`` finds: the year of
    ``now`` in ``zone`` plus :data:`HORIZON_YEARS`, at most :data:`MAX_YEAR`."""
    now_utc = now.astimezone(UTC)
    if now_utc >= _LATEST_UTC:
        return MAX_YEAR
    if now_utc < _EARLIEST_UTC:
        # Long before any fire; the UTC year (at most a day off the zone's) avoids converting
        # instants near datetime.min.
        return now_utc.year + HORIZON_YEARS
    return min(MAX_YEAR, now_utc.astimezone(zone).year + HORIZON_YEARS)


# --------------------------------------------------------------------------------------------
# Unix (5-field) expressions

_UNIX_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")  # Unix: 0 and 7 are Sunday


def _unix_day_of_week(field: str) -> str | None:
    """A Unix day-of-week field in Quartz terms (numbers become names: Unix counts from
    0 = Sunday, Quartz from 1 = Sunday); None when it cannot be translated safely."""
    items = []
    for item in field.split(","):
        base, slash, step = item.partition("/")
        if base == "*":
            items.append(item)
            continue
        days = []
        for part in base.split("-"):
            if _NUMBER.fullmatch(part) and int(part) <= 7:
                days.append(_UNIX_DAYS[int(part)])
            elif part in _DAY_NAMES:
                days.append(part)
            else:
                return None
        items.append("-".join(days) + slash + step)
    return ",".join(items)


def _unix_hint(parts: Sequence[str]) -> str:
    """For five fields, the Quartz expression a Unix cron line means (when it has one)."""
    minute, hour, day_of_month, month, day_of_week = parts
    how = "a leading 0 for the seconds and '?' for "
    if day_of_week == "*":
        fields = (day_of_month, month, "?")
        how += "day-of-week"
    elif day_of_month == "*":
        translated = _unix_day_of_week(day_of_week)
        if translated is None:
            return ""
        fields = ("?", month, translated)
        how += "day-of-month" + (", with day names" if translated != day_of_week else "")
    else:
        return (
            "; this looks like a Unix cron line: Quartz adds a seconds field first, and cannot "
            "restrict both day-of-month and day-of-week (one of them must be '?')"
        )
    quartz = " ".join(("0", minute, hour, *fields))
    try:
        CronExpression.parse(quartz)
    except InvalidCronExpression:
        return "; this looks like a Unix cron line: Quartz adds a seconds field first"
    return f"; as a Unix cron line it is {quartz!r} in Quartz ({how})"


# --------------------------------------------------------------------------------------------
# The expression


def _full(spec: _FieldSpec) -> tuple[int, ...]:
    return tuple(range(spec.low, spec.high + 1))


@dataclass(frozen=True)
class CronExpression:
    """A parsed Quartz cron expression; compare, hash and ``str()`` by its normalised text."""

    text: str
    seconds: tuple[int, ...] = field(compare=False, repr=False)
    minutes: tuple[int, ...] = field(compare=False, repr=False)
    hours: tuple[int, ...] = field(compare=False, repr=False)
    months: tuple[int, ...] = field(compare=False, repr=False)
    years: tuple[int, ...] = field(compare=False, repr=False)
    day_rule: _DayRule = field(compare=False, repr=False)

    @classmethod
    def parse(cls, text: str) -> CronExpression:
        """Parse 6 or 7 Quartz fields (names and special characters are case-insensitive).

        :raises InvalidCronExpression: naming the field, the token and what is allowed.
        """
        if not isinstance(text, str):
            raise InvalidCronExpression(
                repr(text), "expression", repr(text), "a cron expression must be a string"
            )
        parts = text.upper().split()
        parser = _Parser(text)
        if len(parts) not in (6, 7):
            hint = _unix_hint(parts) if len(parts) == 5 else ""
            raise parser.fail(
                "expression",
                text,
                f"expected 6 or 7 fields (second minute hour day-of-month month day-of-week "
                f"[year]), got {len(parts)}{hint}",
            )
        seconds = parser.values(_SECOND, parts[0])
        minutes = parser.values(_MINUTE, parts[1])
        hours = parser.values(_HOUR, parts[2])
        dom = parser.day_of_month(parts[3])
        months = parser.values(_MONTH, parts[4])
        dow = parser.day_of_week(parts[5])
        years = parser.values(_YEAR, parts[6]) if len(parts) == 7 else _full(_YEAR)
        if dom is not None and dow is not None:
            raise parser.fail(
                _DAY_FIELDS,
                f"{parts[3]} {parts[5]}",
                f"day-of-month {parts[3]!r} and day-of-week {parts[5]!r} are both given; "
                "Quartz needs exactly one of them to be '?'",
            )
        day_rule = dom if dom is not None else dow
        if day_rule is None:
            raise parser.fail(
                _DAY_FIELDS,
                "?",
                "day-of-month and day-of-week are both '?'; exactly one of them must be '?'",
            )
        return cls(" ".join(parts), seconds, minutes, hours, months, years, day_rule)

    def __str__(self) -> str:
        return self.text

    # -- evaluation -----------------------------------------------------------------------

    def _walls_from(self, start: datetime, last_year: int) -> Iterator[datetime]:
        """Every matching naive wall time >= ``start`` (whole seconds) in a year up to
        ``last_year``, in increasing order."""
        hours, minutes, seconds = self.hours, self.minutes, self.seconds
        years = self.years[
            bisect_left(self.years, start.year) : bisect_right(self.years, last_year)
        ]
        for year in years:
            in_year = year == start.year
            months = (
                self.months[bisect_left(self.months, start.month) :] if in_year else self.months
            )
            for month in months:
                in_month = in_year and month == start.month
                days = self.day_rule.days_in(year, month)
                if in_month:
                    days = days[bisect_left(days, start.day) :]
                for day in days:
                    on_day = in_month and day == start.day
                    for hour in hours[bisect_left(hours, start.hour) :] if on_day else hours:
                        in_hour = on_day and hour == start.hour
                        for minute in (
                            minutes[bisect_left(minutes, start.minute) :] if in_hour else minutes
                        ):
                            in_minute = in_hour and minute == start.minute
                            for second in (
                                seconds[bisect_left(seconds, start.second) :]
                                if in_minute
                                else seconds
                            ):
                                yield datetime(year, month, day, hour, minute, second)

    def next_after(
        self, after: datetime, zone: ZoneInfo, *, now: datetime | None = None
    ) -> datetime | None:
        """The first fire time strictly after the instant ``after``, as an aware datetime in
        ``zone``; None when the schedule has no later fire within the search horizon (past its
        last year, too far ahead, or never).

        The horizon is the end of the year :data:`HORIZON_YEARS` after the year of the instant
        ``now`` in ``zone`` (``now`` defaults to ``after``), and never later than
        :data:`MAX_YEAR`. Pass the present as ``now`` when ``after`` is an earlier fire time,
        so that a run of successive searches keeps one horizon.

        Wall times inside a spring-forward gap never fire; a repeated wall time fires only at
        its first occurrence (fold=0).

        :raises ValueError: ``after`` or ``now`` is naive.
        """
        if after.tzinfo is None or after.utcoffset() is None:
            raise ValueError(
                f"after must be a timezone-aware datetime, got naive {after.isoformat()}"
            )
        if now is not None and (now.tzinfo is None or now.utcoffset() is None):
            raise ValueError(f"now must be a timezone-aware datetime, got naive {now.isoformat()}")
        last_year = _last_search_year(after if now is None else now, zone)
        after_utc = after.astimezone(UTC)
        if after_utc >= _LATEST_UTC:
            return None
        if after_utc < _EARLIEST_UTC:
            start = datetime(MIN_YEAR, 1, 1)
        else:
            local = after_utc.astimezone(zone)
            start = local.replace(tzinfo=None, microsecond=0, fold=0)
            if local.fold == 1:
                start = max(start, _end_of_repeat(local, zone))
        while True:
            for wall in self._walls_from(start, last_year):
                candidate = wall.replace(tzinfo=zone)
                candidate_utc = candidate.astimezone(UTC)
                if candidate_utc.astimezone(zone).replace(tzinfo=None) != wall:
                    start = _gap_end(wall, zone)  # skipped: that wall time does not exist
                    break
                if candidate_utc > after_utc:
                    return candidate
            else:
                return None
