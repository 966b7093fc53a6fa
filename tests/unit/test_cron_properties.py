"""Properties of cron evaluation, checked against a brute-force scan of real instants.

The oracle never uses the evaluator: it steps through UTC instants one minute (or one second)
at a time, converts each to the zone, and keeps those whose wall time matches the generated
field sets and that are the first occurrence of their wall time (``fold == 0``). Wall times in a
spring-forward gap never appear in such a scan, and a repeated wall time appears twice but is
kept once. The evaluator must return exactly that list.
"""

from __future__ import annotations

import calendar
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ratchet.domain.quartz import HORIZON_YEARS, MAX_YEAR, CronExpression

MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]

# Zones with DST (including 30-minute and midnight shifts) and fixed odd offsets, with the UTC
# instants of some of their transitions, around which windows are drawn.
ANCHORS: dict[str, list[datetime]] = {
    "UTC": [datetime(2024, 3, 10, 7, tzinfo=UTC)],
    "Asia/Kolkata": [datetime(2024, 3, 10, 7, tzinfo=UTC)],
    "America/New_York": [
        datetime(2024, 3, 10, 7, tzinfo=UTC),
        datetime(2024, 11, 3, 6, tzinfo=UTC),
    ],
    "Europe/London": [
        datetime(2024, 3, 31, 1, tzinfo=UTC),
        datetime(2024, 10, 27, 1, tzinfo=UTC),
    ],
    "Europe/Berlin": [
        datetime(2024, 3, 31, 1, tzinfo=UTC),
        datetime(2024, 10, 27, 1, tzinfo=UTC),
    ],
    "Australia/Lord_Howe": [
        datetime(2024, 4, 6, 15, tzinfo=UTC),
        datetime(2024, 10, 5, 15, 30, tzinfo=UTC),
    ],
    "America/St_Johns": [
        datetime(2024, 3, 10, 5, 30, tzinfo=UTC),
        datetime(2024, 11, 3, 4, 30, tzinfo=UTC),
    ],
    "Pacific/Chatham": [
        datetime(2024, 4, 6, 14, tzinfo=UTC),
        datetime(2024, 9, 28, 14, tzinfo=UTC),
    ],
    "America/Sao_Paulo": [  # transitions at midnight: a day without 00:00
        datetime(2018, 11, 4, 3, tzinfo=UTC),
        datetime(2019, 2, 17, 2, tzinfo=UTC),
    ],
}
ZONES = sorted(ANCHORS)


def quartz_nearest_weekday(year: int, month: int, n: int) -> int | None:
    """The day of ``year-month`` on which ``nW`` fires, or None (oracle).

    Quartz's steps, on a calendar that counts on past the month's end (day 31 of a 30-day month
    is the 1st of the next): take day n; a Saturday moves back one day (forward two when n is
    1), a Sunday forward one day (back two when n is the month's last day). The result fires only
    if it is a day of the month.
    """
    last = calendar.monthrange(year, month)[1]
    weekday = (date(year, month, 1) + timedelta(days=n - 1)).weekday()
    if weekday == 5:
        day = n + 2 if n == 1 else n - 1
    elif weekday == 6:
        day = n - 2 if n == last else n + 1
    else:
        day = n
    return day if 1 <= day <= last else None


@dataclass(frozen=True)
class Spec:
    """A generated expression and the value sets it stands for."""

    text: str
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int] | None  # None: '?'
    months: frozenset[int]
    days_of_week: frozenset[int] | None  # None: '?'; 1 = Sunday ... 7 = Saturday
    nearest_weekday: int | None = None  # n of a day-of-month 'nW'

    def matches(self, wall: datetime) -> bool:
        if self.nearest_weekday is not None:
            day_ok = wall.day == quartz_nearest_weekday(wall.year, wall.month, self.nearest_weekday)
        elif self.days_of_month is not None:
            day_ok = wall.day in self.days_of_month
        else:
            assert self.days_of_week is not None
            sunday_first = {6: 1, 0: 2, 1: 3, 2: 4, 3: 5, 4: 6, 5: 7}[wall.weekday()]
            day_ok = sunday_first in self.days_of_week
        return (
            wall.second in self.seconds
            and wall.minute in self.minutes
            and wall.hour in self.hours
            and wall.month in self.months
            and day_ok
        )


Field = tuple[str, frozenset[int]]


def _name(names: list[str] | None, low: int) -> Callable[[int, bool], str]:
    def render(value: int, use_name: bool) -> str:
        return names[value - low] if names and use_name else str(value)

    return render


@st.composite
def field_item(
    draw: st.DrawFn, low: int, high: int, max_step: int, names: list[str] | None = None
) -> Field:
    render = _name(names, low)
    use_name = draw(st.booleans())
    kind = draw(st.sampled_from(["star", "value", "range", "step", "star-step", "range-step"]))
    a = draw(st.integers(low, high))
    b = draw(st.integers(a, high))
    step = draw(st.integers(1, max_step))
    if kind == "star":
        return "*", frozenset(range(low, high + 1))
    if kind == "value":
        return render(a, use_name), frozenset({a})
    if kind == "range":
        return f"{render(a, use_name)}-{render(b, use_name)}", frozenset(range(a, b + 1))
    if kind == "step":
        return f"{a}/{step}", frozenset(range(a, high + 1, step))
    if kind == "star-step":
        return f"*/{step}", frozenset(range(low, high + 1, step))
    return (
        f"{render(a, use_name)}-{render(b, use_name)}/{step}",
        frozenset(range(a, b + 1, step)),
    )


@st.composite
def field(
    draw: st.DrawFn, low: int, high: int, max_step: int, names: list[str] | None = None
) -> Field:
    parts = draw(st.lists(field_item(low, high, max_step, names), min_size=1, max_size=3))
    return ",".join(text for text, _ in parts), frozenset().union(*(vals for _, vals in parts))


def dense(low: int, high: int, max_step: int) -> st.SearchStrategy[Field]:
    """A field that usually matches often: '*' or a small step."""
    return st.one_of(
        st.just(("*", frozenset(range(low, high + 1)))),
        st.integers(1, min(max_step, 20)).map(
            lambda s: (f"*/{s}", frozenset(range(low, high + 1, s)))
        ),
        field(low, high, max_step),
    )


@st.composite
def specs(
    draw: st.DrawFn,
    seconds: st.SearchStrategy[Field] | None = None,
    minutes: st.SearchStrategy[Field] | None = None,
    hours: st.SearchStrategy[Field] | None = None,
    frequent_days: bool = False,
) -> Spec:
    sec = draw(seconds if seconds is not None else field(0, 59, 59))
    mins = draw(minutes if minutes is not None else field(0, 59, 59))
    hrs = draw(hours if hours is not None else field(0, 23, 23))
    if frequent_days:
        month: Field = ("*", frozenset(range(1, 13)))
        days = draw(
            st.one_of(
                st.just(("dom", ("*", frozenset(range(1, 32))))),
                st.just(("dow", ("*", frozenset(range(1, 8))))),
                st.tuples(st.just("dow"), field(1, 7, 7, DAYS)),
            )
        )
    else:
        month = draw(field(1, 12, 12, MONTHS))
        days = draw(
            st.one_of(
                st.tuples(st.just("dom"), field(1, 31, 31)),
                st.tuples(st.just("dow"), field(1, 7, 7, DAYS)),
                st.integers(1, 31).map(lambda n: ("nW", (f"{n}W", frozenset({n})))),
            )
        )
    which, (day_text, day_values) = days
    dom_text, dow_text = ("?", day_text) if which == "dow" else (day_text, "?")
    text = f"{sec[0]} {mins[0]} {hrs[0]} {dom_text} {month[0]} {dow_text}"
    return Spec(
        text,
        sec[1],
        mins[1],
        hrs[1],
        day_values if which == "dom" else None,
        month[1],
        day_values if which == "dow" else None,
        min(day_values) if which == "nW" else None,
    )


@st.composite
def window_start(draw: st.DrawFn, zone: str, spread: timedelta) -> datetime:
    """An instant near one of the zone's transitions, or anywhere in 1971-2098."""
    if draw(st.booleans()):
        anchor = draw(st.sampled_from(ANCHORS[zone]))
        seconds = int(spread.total_seconds())
        return anchor + timedelta(
            seconds=draw(st.integers(-seconds, seconds)),
            microseconds=draw(st.sampled_from([0, 0, 1, 999_999])),
        )
    return draw(st.datetimes(datetime(1971, 1, 1), datetime(2098, 12, 1), timezones=st.just(UTC)))


def fires_until(
    cron: CronExpression, zone: ZoneInfo, after: datetime, end: datetime
) -> list[datetime]:
    """Fire times in (after, end], by repeated next_after."""
    out: list[datetime] = []
    current = cron.next_after(after, zone)
    while current is not None and current.astimezone(UTC) <= end:
        out.append(current)
        current = cron.next_after(current, zone)
    return out


def brute_force(
    spec: Spec, zone: ZoneInfo, after: datetime, end: datetime, step: timedelta
) -> list[datetime]:
    """Every instant on the step grid in (after, end] whose wall time fires (oracle)."""
    unit = int(step.total_seconds())
    first = int(after.timestamp()) // unit * unit + unit
    out: list[datetime] = []
    t = datetime.fromtimestamp(first, UTC)
    while t <= end:
        local = t.astimezone(zone)
        if local.fold == 0 and spec.matches(local):
            out.append(local)
        t += step
    return out


def _same(left: list[datetime], right: list[datetime]) -> bool:
    return [(x.isoformat(), x.fold) for x in left] == [(y.isoformat(), y.fold) for y in right]


@settings(max_examples=150)
@given(spec=specs(), zone=st.sampled_from(ZONES), data=st.data())
def test_fires_increase_and_satisfy_every_field(spec: Spec, zone: str, data: st.DataObject) -> None:
    tz = ZoneInfo(zone)
    after = data.draw(window_start(zone, timedelta(hours=3)))
    cron = CronExpression.parse(spec.text)
    assert CronExpression.parse(str(cron)) == cron
    # `after` given in the zone itself (possibly fold=1) must mean the same instant.
    in_zone = data.draw(st.booleans())
    previous = after.astimezone(UTC)
    for _ in range(12):
        fire = cron.next_after(previous.astimezone(tz) if in_zone else previous, tz)
        if fire is None:
            break
        assert fire.tzinfo is tz
        assert fire.fold == 0
        instant = fire.astimezone(UTC)
        assert instant > previous
        # The wall time exists: it survives a round trip through UTC.
        assert instant.astimezone(tz).replace(tzinfo=None) == fire.replace(tzinfo=None)
        assert spec.matches(fire)
        # Any instant between the previous fire and this one leads to this one.
        middle = previous + (instant - previous) / 2
        assert cron.next_after(middle, tz) == fire
        previous = instant


@settings(max_examples=120)
@given(
    spec=specs(
        seconds=st.just(("0", frozenset({0}))),
        minutes=dense(0, 59, 59),
        hours=dense(0, 23, 23),
        frequent_days=True,
    ),
    zone=st.sampled_from(ZONES),
    data=st.data(),
)
def test_minute_schedules_match_a_minute_by_minute_scan(
    spec: Spec, zone: str, data: st.DataObject
) -> None:
    tz = ZoneInfo(zone)
    after = data.draw(window_start(zone, timedelta(hours=30)))
    end = after + timedelta(hours=data.draw(st.integers(1, 24)))
    cron = CronExpression.parse(spec.text)
    expected = brute_force(spec, tz, after, end, timedelta(minutes=1))
    assert _same(fires_until(cron, tz, after, end), expected)


@settings(max_examples=80)
@given(
    spec=specs(
        seconds=dense(0, 59, 59),
        minutes=dense(0, 59, 59),
        hours=st.just(("*", frozenset(range(24)))),
        frequent_days=True,
    ),
    zone=st.sampled_from(ZONES),
    data=st.data(),
)
def test_second_schedules_match_a_second_by_second_scan(
    spec: Spec, zone: str, data: st.DataObject
) -> None:
    tz = ZoneInfo(zone)
    after = data.draw(window_start(zone, timedelta(hours=1, minutes=10)))
    end = after + timedelta(minutes=data.draw(st.integers(1, 20)))
    cron = CronExpression.parse(spec.text)
    expected = brute_force(spec, tz, after, end, timedelta(seconds=1))
    assert _same(fires_until(cron, tz, after, end), expected)


@settings(max_examples=300)
@given(
    n=st.one_of(st.integers(1, 31), st.integers(28, 31)),  # often past a month's end
    year=st.integers(1971, 2098),
    month=st.integers(1, 12),
    zone=st.sampled_from(ZONES),
    clock=st.tuples(st.integers(6, 20), st.integers(0, 59), st.integers(0, 59)),
)
# Months that end on a Friday, with n the day after: Apr 2027 (30 days), Feb 2036 (29), Feb 2025
# (28); and Feb 2027, which ends on a Sunday.
@example(n=31, year=2027, month=4, zone="UTC", clock=(9, 0, 0))
@example(n=30, year=2036, month=2, zone="America/New_York", clock=(12, 30, 0))
@example(n=29, year=2025, month=2, zone="Pacific/Chatham", clock=(6, 0, 59))
@example(n=31, year=2027, month=2, zone="UTC", clock=(9, 0, 0))
def test_nearest_weekday_fires_at_most_once_a_month_on_a_weekday_of_that_month(
    n: int, year: int, month: int, zone: str, clock: tuple[int, int, int]
) -> None:
    # Hours 6-20: no zone here changes its offset then, so each matching day fires exactly once.
    hour, minute, second = clock
    tz = ZoneInfo(zone)
    cron = CronExpression.parse(f"{second} {minute} {hour} {n}W * ?")
    start = datetime(year, month, 1, tzinfo=tz)
    end = (start + timedelta(days=32)).replace(day=1)
    fires = fires_until(cron, tz, start - timedelta(seconds=1), end.astimezone(UTC))
    for fire in fires:
        assert (fire.year, fire.month) == (year, month)
        assert (fire.hour, fire.minute, fire.second) == clock
        assert fire.weekday() < 5  # Monday to Friday
    last = calendar.monthrange(year, month)[1]
    if n <= last:
        # The one weekday of the month closest to day n (it is always unique and never more than
        # two days away).
        weekdays = [d for d in range(1, last + 1) if date(year, month, d).weekday() < 5]
        best = min(abs(d - n) for d in weekdays)
        assert best <= 2
        assert [f.day for f in fires] == [d for d in weekdays if abs(d - n) == best]
    elif n == last + 1 and date(year, month, last).weekday() == 4:
        # Day n would be the Saturday after the month's last day, a Friday: back to that Friday.
        assert [f.day for f in fires] == [last]
    else:
        # Day n lies further into the next month, or on a weekday or Sunday there.
        assert fires == []


@settings(max_examples=100)
@given(
    now=st.datetimes(datetime(1971, 1, 1), datetime(2950, 12, 31), timezones=st.just(UTC)),
    zone=st.sampled_from(ZONES),
    month=st.integers(1, 12),
    day=st.integers(1, 28),
    clock=st.tuples(st.integers(6, 20), st.integers(0, 59), st.integers(0, 59)),
)
def test_a_yearly_schedule_fires_every_year_up_to_a_century_after_now(
    now: datetime, zone: str, month: int, day: int, clock: tuple[int, int, int]
) -> None:
    tz = ZoneInfo(zone)
    last = min(MAX_YEAR, now.astimezone(tz).year + HORIZON_YEARS)
    hour, minute, second = clock
    cron = CronExpression.parse(f"{second} {minute} {hour} {day} {month} ?")
    fires: list[datetime] = []
    current = cron.next_after(datetime(last - 3, 12, 31, tzinfo=tz), tz, now=now)
    while current is not None and len(fires) < 5:
        fires.append(current)
        current = cron.next_after(current, tz, now=now)
    assert [f.year for f in fires] == [last - 2, last - 1, last]
    for fire in fires:
        assert (fire.month, fire.day, fire.hour, fire.minute, fire.second) == (month, day, *clock)


@settings(max_examples=100)
@given(spec=specs(), zone=st.sampled_from(ZONES), data=st.data())
def test_the_present_only_cuts_off_fires_past_its_horizon(
    spec: Spec, zone: str, data: st.DataObject
) -> None:
    tz = ZoneInfo(zone)
    after = data.draw(window_start(zone, timedelta(hours=3)))
    now = data.draw(
        st.datetimes(datetime(1971, 1, 1), datetime(2098, 12, 1), timezones=st.just(UTC))
    )
    cron = CronExpression.parse(spec.text)
    found = cron.next_after(after, tz, now=now)
    # A present late enough that none of these schedules runs into its horizon.
    unlimited = cron.next_after(after, tz, now=datetime(2898, 1, 1, tzinfo=UTC))
    if unlimited is not None and unlimited.year > now.astimezone(tz).year + HORIZON_YEARS:
        assert found is None
    else:
        assert found == unlimited
