"""Quartz cron evaluation against hand-checked results.

Every expected value below was worked out with a printed calendar and the 2024 DST dates of
each zone, not by running the evaluator:

* 2024-01-01 is a Monday; 2024 is a leap year (Feb 29 is a Thursday).
* America/New_York: 2024-03-10 02:00 EST -> 03:00 EDT; 2024-11-03 02:00 EDT -> 01:00 EST.
* Europe/London: 2024-03-31 01:00 GMT -> 02:00 BST; 2024-10-27 02:00 BST -> 01:00 GMT.
* Australia/Lord_Howe (30-minute shift): 2024-04-07 02:00 +11:00 -> 01:30 +10:30;
  2024-10-06 02:00 +10:30 -> 02:30 +11:00.
* Asia/Kolkata is +05:30 all year.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from ratchet.cron import (
    CronExpression,
    cron_next_lines,
    next_fire_times,
    parse,
    validate,
)

NY = "America/New_York"
LONDON = "Europe/London"
LORD_HOWE = "Australia/Lord_Howe"
KOLKATA = "Asia/Kolkata"


def _iso(values: list[datetime]) -> list[str]:
    return [v.isoformat() for v in values]


def _utc(text: str) -> str:
    """A UTC fire time written briefly: '2024-01-01T02:00' -> ISO with +00:00."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC).isoformat()


JAN1 = "2024-01-01T00:00:00+00:00"
END = "END"  # last entry of an expected list: the schedule has no further fire

# (expression, after, expected UTC fire times) -- all evaluated in UTC.
SYNTAX_TABLE: list[tuple[str, str, list[str]]] = [
    # The seed's examples.
    ("0 0 2 * * ?", JAN1, ["2024-01-01T02:00", "2024-01-02T02:00", "2024-01-03T02:00"]),
    (
        "0 */15 * * * ?",
        JAN1,
        ["2024-01-01T00:15", "2024-01-01T00:30", "2024-01-01T00:45", "2024-01-01T01:00"],
    ),
    ("0 0 9 ? * MON", JAN1, ["2024-01-01T09:00", "2024-01-08T09:00", "2024-01-15T09:00"]),
    ("0 0 0 1 * ?", JAN1, ["2024-02-01T00:00", "2024-03-01T00:00", "2024-04-01T00:00"]),
    (
        "0 30 8 ? * MON-FRI",
        "2024-01-05T12:00:00+00:00",  # a Friday, after 08:30
        ["2024-01-08T08:30", "2024-01-09T08:30", "2024-01-10T08:30"],
    ),
    (
        "0 0 */4 * * ?",
        JAN1,
        [
            "2024-01-01T04:00",
            "2024-01-01T08:00",
            "2024-01-01T12:00",
            "2024-01-01T16:00",
            "2024-01-01T20:00",
            "2024-01-02T00:00",
        ],
    ),
    # Steps with a start, and ranges with a step.
    (
        "5/10 * * * * ?",
        JAN1,
        [
            "2024-01-01T00:00:05",
            "2024-01-01T00:00:15",
            "2024-01-01T00:00:25",
            "2024-01-01T00:00:35",
            "2024-01-01T00:00:45",
            "2024-01-01T00:00:55",
            "2024-01-01T00:01:05",
        ],
    ),
    (
        "0 10-40/10 * * * ?",
        JAN1,
        [
            "2024-01-01T00:10",
            "2024-01-01T00:20",
            "2024-01-01T00:30",
            "2024-01-01T00:40",
            "2024-01-01T01:10",
        ],
    ),
    ("0 0 6,18 * * ?", JAN1, ["2024-01-01T06:00", "2024-01-01T18:00", "2024-01-02T06:00"]),
    ("0 0 0 1 JAN-DEC/3 ?", JAN1, ["2024-04-01T00:00", "2024-07-01T00:00", "2024-10-01T00:00"]),
    # Month names in any case; wrapping month range.
    (
        "0 0 0 1 JAN,apr,Jul,oct ?",
        JAN1,
        ["2024-04-01T00:00", "2024-07-01T00:00", "2024-10-01T00:00", "2025-01-01T00:00"],
    ),
    (
        "0 0 0 1 NOV-FEB ?",
        "2024-03-01T00:00:00+00:00",
        ["2024-11-01T00:00", "2024-12-01T00:00", "2025-01-01T00:00", "2025-02-01T00:00"],
    ),
    # Wrapping hour range (Quartz: 22-2 means 22, 23, 0, 1, 2).
    (
        "0 0 22-2 * * ?",
        "2024-01-01T03:00:00+00:00",
        [
            "2024-01-01T22:00",
            "2024-01-01T23:00",
            "2024-01-02T00:00",
            "2024-01-02T01:00",
            "2024-01-02T02:00",
            "2024-01-02T22:00",
        ],
    ),
    # Day-of-month lists skip months that lack the day.
    (
        "0 0 0 30,31 * ?",
        "2024-01-31T12:00:00+00:00",
        ["2024-03-30T00:00", "2024-03-31T00:00", "2024-04-30T00:00", "2024-05-30T00:00"],
    ),
    # L, L-n, LW, L-nW.
    (
        "0 0 0 L * ?",
        JAN1,
        ["2024-01-31T00:00", "2024-02-29T00:00", "2024-03-31T00:00", "2024-04-30T00:00"],
    ),
    (
        "0 0 0 l-2 * ?",
        JAN1,
        ["2024-01-29T00:00", "2024-02-27T00:00", "2024-03-29T00:00", "2024-04-28T00:00"],
    ),
    (
        # Aug 31 2024 is a Saturday -> Fri 30; Nov 30 is a Saturday -> Fri 29.
        "0 0 0 LW * ?",
        "2024-07-31T12:00:00+00:00",
        ["2024-08-30T00:00", "2024-09-30T00:00", "2024-10-31T00:00", "2024-11-29T00:00"],
    ),
    (
        # Nov 27 Wed; Dec 28 is a Saturday -> Fri 27; Jan 28 2025 Tue.
        "0 0 0 L-3W * ?",
        "2024-11-15T00:00:00+00:00",
        ["2024-11-27T00:00", "2024-12-27T00:00", "2025-01-28T00:00"],
    ),
    (
        # L-30: Jan 1 (31 days), none in Feb (29) or Apr (30), Mar 1, May 1.
        "0 0 0 L-30 * ?",
        "2023-12-31T12:00:00+00:00",
        ["2024-01-01T00:00", "2024-03-01T00:00", "2024-05-01T00:00"],
    ),
    # W: nearest weekday, never leaving the month.
    (
        # Jun 15 is a Saturday -> Fri 14; Sep 15 is a Sunday -> Mon 16.
        "0 0 0 15W * ?",
        "2024-05-31T00:00:00+00:00",
        ["2024-06-14T00:00", "2024-07-15T00:00", "2024-08-15T00:00", "2024-09-16T00:00"],
    ),
    (
        # Jun 1 is a Saturday -> Mon 3 (not May 31); Sep 1 is a Sunday -> Mon 2.
        "0 0 0 1W * ?",
        "2024-05-15T00:00:00+00:00",
        ["2024-06-03T00:00", "2024-07-01T00:00", "2024-08-01T00:00", "2024-09-02T00:00"],
    ),
    (
        # Mar 31 is a Sunday -> Fri 29 (not Apr 1). April and June have no 31st, and their
        # last days (Tue Apr 30, Sun Jun 30) are not Fridays: they fire nothing (see below).
        "0 0 0 31W * ?",
        "2024-03-01T00:00:00+00:00",
        ["2024-03-29T00:00", "2024-05-31T00:00", "2024-07-31T00:00"],
    ),
    # Day-of-week: numbers (1 = SUN ... 7 = SAT), names, L, nL, n#k.
    ("0 0 0 ? * 1", JAN1, ["2024-01-07T00:00", "2024-01-14T00:00"]),
    ("0 0 0 ? * 7", JAN1, ["2024-01-06T00:00", "2024-01-13T00:00"]),
    ("0 0 0 ? * sun", JAN1, ["2024-01-07T00:00", "2024-01-14T00:00", "2024-01-21T00:00"]),
    ("0 0 0 ? * L", JAN1, ["2024-01-06T00:00", "2024-01-13T00:00", "2024-01-20T00:00"]),
    (
        "0 0 0 ? * FRI-MON",
        JAN1,
        ["2024-01-05T00:00", "2024-01-06T00:00", "2024-01-07T00:00", "2024-01-08T00:00"],
    ),
    (
        "0 0 0 ? * 6L",
        JAN1,
        ["2024-01-26T00:00", "2024-02-23T00:00", "2024-03-29T00:00", "2024-04-26T00:00"],
    ),
    ("0 0 0 ? * FRIL", JAN1, ["2024-01-26T00:00", "2024-02-23T00:00"]),
    (
        "0 0 0 ? * 6#3",
        JAN1,
        ["2024-01-19T00:00", "2024-02-16T00:00", "2024-03-15T00:00", "2024-04-19T00:00"],
    ),
    (
        "0 0 9 ? * 2#1",
        JAN1,
        ["2024-01-01T09:00", "2024-02-05T09:00", "2024-03-04T09:00", "2024-04-01T09:00"],
    ),
    ("0 0 9 ? * MON#1", JAN1, ["2024-01-01T09:00", "2024-02-05T09:00"]),
    (
        # Fifth Fridays of 2024: Mar 29, May 31, Aug 30, Nov 29; then Jan 31 2025.
        "0 0 0 ? * 6#5",
        JAN1,
        [
            "2024-03-29T00:00",
            "2024-05-31T00:00",
            "2024-08-30T00:00",
            "2024-11-29T00:00",
            "2025-01-31T00:00",
        ],
    ),
    # Years and the end of a schedule.
    ("0 0 12 25 DEC ? 2025-2026", JAN1, ["2025-12-25T12:00", "2026-12-25T12:00", END]),
    ("0 0 0 1 1 ? *", JAN1, ["2025-01-01T00:00", "2026-01-01T00:00"]),
    ("0 0 0 1 1 ? 2020", JAN1, [END]),
    (
        "0 0 0 1 1 ? 2996-2999",
        "2997-06-01T00:00:00+00:00",
        ["2998-01-01T00:00", "2999-01-01T00:00", END],
    ),
    ("0 0 0 29 2 ?", "2024-03-01T00:00:00+00:00", ["2028-02-29T00:00", "2032-02-29T00:00"]),
    # Within a century of `after` (the present, unless given; see the horizon tests below).
    ("0 0 0 29 2 ? 2096", "2000-01-01T00:00:00+00:00", ["2096-02-29T00:00", END]),
    ("0 0 0 31 2 ?", JAN1, [END]),
    # Strictly after: a fire time equal to `after` is not returned; sub-seconds are honoured.
    ("0 0 12 * * ?", "2024-01-01T12:00:00+00:00", ["2024-01-02T12:00"]),
    ("* * * * * ?", "2024-01-01T00:00:00.500000+00:00", ["2024-01-01T00:00:01"]),
]


@pytest.mark.parametrize(("expression", "after", "expected"), SYNTAX_TABLE)
def test_quartz_syntax_table(expression: str, after: str, expected: list[str]) -> None:
    ends = expected[-1:] == [END]
    times = [_utc(e) for e in expected if e != END]
    fires = next_fire_times(expression, "UTC", datetime.fromisoformat(after), len(times) + 1)
    if ends:
        assert _iso(fires) == times
    else:
        assert _iso(fires)[: len(times)] == times
        assert len(fires) == len(times) + 1


# (expression, zone, after, expected fire times with their offsets)
DST_TABLE: list[tuple[str, str, str, list[str]]] = [
    # --- America/New_York, spring forward: 02:00-02:59 does not exist on 2024-03-10.
    (
        "0 */15 * * * ?",
        NY,
        "2024-03-10T01:30:00-05:00",
        ["2024-03-10T01:45:00-05:00", "2024-03-10T03:00:00-04:00", "2024-03-10T03:15:00-04:00"],
    ),
    (
        "0 0 * * * ?",
        NY,
        "2024-03-10T00:30:00-05:00",
        ["2024-03-10T01:00:00-05:00", "2024-03-10T03:00:00-04:00", "2024-03-10T04:00:00-04:00"],
    ),
    (
        "0 0 2 * * ?",
        NY,
        "2024-03-09T00:00:00-05:00",
        ["2024-03-09T02:00:00-05:00", "2024-03-11T02:00:00-04:00", "2024-03-12T02:00:00-04:00"],
    ),
    (
        "0 30 2 * * ?",
        NY,
        "2024-03-09T12:00:00-05:00",
        ["2024-03-11T02:30:00-04:00", "2024-03-12T02:30:00-04:00"],
    ),
    # --- America/New_York, fall back: 01:00-01:59 happens twice on 2024-11-03; fire once.
    (
        "0 */15 * * * ?",
        NY,
        "2024-11-03T00:50:00-04:00",
        [
            "2024-11-03T01:00:00-04:00",
            "2024-11-03T01:15:00-04:00",
            "2024-11-03T01:30:00-04:00",
            "2024-11-03T01:45:00-04:00",
            "2024-11-03T02:00:00-05:00",
            "2024-11-03T02:15:00-05:00",
        ],
    ),
    (
        "0 0 * * * ?",
        NY,
        "2024-11-03T00:30:00-04:00",
        ["2024-11-03T01:00:00-04:00", "2024-11-03T02:00:00-05:00", "2024-11-03T03:00:00-05:00"],
    ),
    (
        "0 30 1 * * ?",
        NY,
        "2024-11-02T12:00:00-04:00",
        ["2024-11-03T01:30:00-04:00", "2024-11-04T01:30:00-05:00"],
    ),
    (
        # `after` inside the second 01:xx hour: the repeated times already fired.
        "0 */15 * * * ?",
        NY,
        "2024-11-03T01:10:00-05:00",
        ["2024-11-03T02:00:00-05:00", "2024-11-03T02:15:00-05:00"],
    ),
    (
        "*/20 * * * * ?",
        NY,
        "2024-11-03T01:59:30-04:00",
        ["2024-11-03T01:59:40-04:00", "2024-11-03T02:00:00-05:00", "2024-11-03T02:00:20-05:00"],
    ),
    # --- Europe/London: gap 01:00-01:59 on 2024-03-31; repeat 01:00-01:59 on 2024-10-27.
    (
        "0 */15 * * * ?",
        LONDON,
        "2024-03-31T00:30:00+00:00",
        ["2024-03-31T00:45:00+00:00", "2024-03-31T02:00:00+01:00", "2024-03-31T02:15:00+01:00"],
    ),
    (
        "0 0 * * * ?",
        LONDON,
        "2024-03-30T23:30:00+00:00",
        ["2024-03-31T00:00:00+00:00", "2024-03-31T02:00:00+01:00", "2024-03-31T03:00:00+01:00"],
    ),
    (
        "0 30 1 * * ?",
        LONDON,
        "2024-03-30T12:00:00+00:00",
        ["2024-04-01T01:30:00+01:00", "2024-04-02T01:30:00+01:00"],
    ),
    (
        "0 */15 * * * ?",
        LONDON,
        "2024-10-27T01:40:00+01:00",
        ["2024-10-27T01:45:00+01:00", "2024-10-27T02:00:00+00:00", "2024-10-27T02:15:00+00:00"],
    ),
    (
        "0 0 * * * ?",
        LONDON,
        "2024-10-27T00:30:00+01:00",
        ["2024-10-27T01:00:00+01:00", "2024-10-27T02:00:00+00:00", "2024-10-27T03:00:00+00:00"],
    ),
    # --- Australia/Lord_Howe: 30-minute shifts. Repeat 01:30-01:59 on 2024-04-07,
    #     gap 02:00-02:29 on 2024-10-06.
    (
        "0 */15 * * * ?",
        LORD_HOWE,
        "2024-04-07T01:20:00+11:00",
        [
            "2024-04-07T01:30:00+11:00",
            "2024-04-07T01:45:00+11:00",
            "2024-04-07T02:00:00+10:30",
            "2024-04-07T02:15:00+10:30",
        ],
    ),
    (
        "0 0 * * * ?",
        LORD_HOWE,
        "2024-04-07T00:30:00+11:00",
        ["2024-04-07T01:00:00+11:00", "2024-04-07T02:00:00+10:30", "2024-04-07T03:00:00+10:30"],
    ),
    (
        "0 45 1 * * ?",
        LORD_HOWE,
        "2024-04-06T12:00:00+11:00",
        ["2024-04-07T01:45:00+11:00", "2024-04-08T01:45:00+10:30"],
    ),
    (
        "0 */15 * * * ?",
        LORD_HOWE,
        "2024-10-06T01:40:00+10:30",
        ["2024-10-06T01:45:00+10:30", "2024-10-06T02:30:00+11:00", "2024-10-06T02:45:00+11:00"],
    ),
    (
        "0 0 * * * ?",
        LORD_HOWE,
        "2024-10-06T00:30:00+10:30",
        ["2024-10-06T01:00:00+10:30", "2024-10-06T03:00:00+11:00", "2024-10-06T04:00:00+11:00"],
    ),
    (
        "0 15 2 * * ?",
        LORD_HOWE,
        "2024-10-05T00:00:00+10:30",
        ["2024-10-05T02:15:00+10:30", "2024-10-07T02:15:00+11:00"],
    ),
    # --- Asia/Kolkata: a half-hour offset, no DST.
    (
        "0 0 9 * * ?",
        KOLKATA,
        JAN1,
        ["2024-01-01T09:00:00+05:30", "2024-01-02T09:00:00+05:30"],
    ),
    (
        "0 */15 * * * ?",
        KOLKATA,
        JAN1,  # 05:30 in Kolkata
        ["2024-01-01T05:45:00+05:30", "2024-01-01T06:00:00+05:30"],
    ),
    (
        "0 0 * * * ?",
        KOLKATA,
        "2024-03-10T06:30:00+00:00",  # 12:00 in Kolkata
        ["2024-03-10T13:00:00+05:30", "2024-03-10T14:00:00+05:30"],
    ),
    # --- UTC: nothing happens on the US transition days.
    (
        "0 0 * * * ?",
        "UTC",
        "2024-03-10T06:30:00+00:00",
        ["2024-03-10T07:00:00+00:00", "2024-03-10T08:00:00+00:00", "2024-03-10T09:00:00+00:00"],
    ),
    (
        "0 */15 * * * ?",
        "UTC",
        "2024-11-03T05:50:00+00:00",
        ["2024-11-03T06:00:00+00:00", "2024-11-03T06:15:00+00:00"],
    ),
]


@pytest.mark.parametrize(("expression", "zone", "after", "expected"), DST_TABLE)
def test_dst_table(expression: str, zone: str, after: str, expected: list[str]) -> None:
    fires = next_fire_times(expression, zone, datetime.fromisoformat(after), len(expected))
    assert _iso(fires) == expected
    for fire in fires:
        assert fire.tzinfo == ZoneInfo(zone)
        assert fire.fold == 0


# Fires of `0 */15 * * * ?` on a transition day: one per existing wall time, never twice.
TRANSITION_DAYS: list[tuple[str, str, int]] = [
    (NY, "2024-03-10", 92),  # 23 wall hours
    (NY, "2024-11-03", 96),  # 25 real hours, 24 distinct wall hours
    (LONDON, "2024-03-31", 92),
    (LONDON, "2024-10-27", 96),
    (LORD_HOWE, "2024-10-06", 94),  # 30 minutes missing
    (LORD_HOWE, "2024-04-07", 96),  # 30 minutes repeated, fired once
    (KOLKATA, "2024-03-10", 96),
    ("UTC", "2024-03-10", 96),
]


@pytest.mark.parametrize(("zone", "day", "expected"), TRANSITION_DAYS)
def test_quarter_hours_on_transition_days(zone: str, day: str, expected: int) -> None:
    tz = ZoneInfo(zone)
    start = datetime.fromisoformat(day).replace(tzinfo=tz) - timedelta(seconds=1)
    fires = [
        f
        for f in next_fire_times("0 */15 * * * ?", zone, start, 200)
        if f.date().isoformat() == day
    ]
    assert len(fires) == expected
    walls = [f.replace(tzinfo=None) for f in fires]
    assert len(set(walls)) == len(walls)
    instants = [f.astimezone(UTC) for f in fires]
    assert instants == sorted(instants)


# `nW` in a month that has no day n. Quartz counts on past the month's last day, so "day n" of a
# shorter month is a day of the next month; its weekday rule then applies to that day: a Saturday
# moves back one day, a Sunday forward one day. Only when n is the day right after the last day
# and that day is a Saturday (so the last day is a Friday) does the move land inside the month,
# on its last day. In every other case the short month fires nothing. It never fires on the
# weekday nearest the last day otherwise: a month ending on a Sunday gets no Friday fire.
# (expression, after, expected UTC fire times); a trailing END: the schedule has no further fire.
NEAREST_WEEKDAY_SHORT_MONTHS: list[tuple[str, str, list[str]]] = [
    (
        # 2027. Jan 31 is a Sunday -> Fri 29. February has 28 days: day 31 would be Mar 3, a
        # Wednesday, so February fires nothing (its last day, Sun 28, does not pull a fire to
        # Fri 26). Mar 31 is a Wednesday. April has 30 days and Fri Apr 30 is its last day: day
        # 31 would be Sat May 1, which moves back to Fri Apr 30. May 31 is a Monday. June has 30
        # days and Jun 30 is a Wednesday: day 31 would be Thu Jul 1, so June fires nothing.
        # Jul 31 is a Saturday -> Fri 30.
        "0 0 0 31W * ?",
        "2027-01-01T00:00:00+00:00",
        [
            "2027-01-29T00:00",
            "2027-03-31T00:00",
            "2027-04-30T00:00",
            "2027-05-31T00:00",
            "2027-07-30T00:00",
        ],
    ),
    (
        # 2028. Apr 30 is a Sunday: day 31 would be Mon May 1, so April fires nothing (not on
        # Fri Apr 28). May 31 is a Wednesday. Jun 30 is a Friday: day 31 would be Sat Jul 1,
        # back to Fri Jun 30. Jul 31 is a Monday.
        "0 30 12 31W * ?",
        "2028-04-01T00:00:00+00:00",
        ["2028-05-31T12:30", "2028-06-30T12:30", "2028-07-31T12:30"],
    ),
    (
        # 2036 is a leap year and Feb 29 is a Friday: day 30 would be Sat Mar 1, back to
        # Fri Feb 29. Mar 30 is a Sunday -> Mon 31. Apr 30 is a Wednesday.
        "0 0 0 30W * ?",
        "2036-02-01T00:00:00+00:00",
        ["2036-02-29T00:00", "2036-03-31T00:00", "2036-04-30T00:00"],
    ),
    (
        # 2025: Feb 28 is a Friday: day 29 would be Sat Mar 1, back to Fri Feb 28. Mar 29 is a
        # Saturday -> Fri 28.
        "0 0 0 29W * ?",
        "2025-02-01T00:00:00+00:00",
        ["2025-02-28T00:00", "2025-03-28T00:00"],
    ),
    (
        # February only. 2025: Fri Feb 28 (as above). 2026: Feb 28 is a Saturday, day 29 would
        # be Sun Mar 1, which moves forward: nothing. 2027: Feb 28 is a Sunday, day 29 would be
        # Mon Mar 1: nothing. 2028 is a leap year and Feb 29 is a Tuesday.
        "0 0 0 29W 2 ?",
        "2024-03-01T00:00:00+00:00",
        ["2025-02-28T00:00", "2028-02-29T00:00"],
    ),
    (
        # Two days past the end never comes back: Feb 2036 ends on Friday the 29th, but day 31
        # would be Sun Mar 2, which moves forward to Mar 3. No February has a 31W fire.
        "0 0 0 31W 2 ?",
        "2024-01-01T00:00:00+00:00",
        [END],
    ),
]


@pytest.mark.parametrize(("expression", "after", "expected"), NEAREST_WEEKDAY_SHORT_MONTHS)
def test_nearest_weekday_in_months_without_the_day(
    expression: str, after: str, expected: list[str]
) -> None:
    test_quartz_syntax_table(expression, after, expected)


def test_nearest_weekday_past_the_end_does_not_depend_on_where_the_search_starts() -> None:
    # 30W in 2036 fires on Wed Jan 30 and on Fri Feb 29 (see above). Quartz 2.3.2 itself skips
    # Feb 29 when its search stops on Jan 31 at a time of day that could fire: from the Jan 30
    # fire it steps to Jan 31 00:00, finds January's day already past and jumps to "Feb 30",
    # which is Mar 1. From Jan 31 12:00 or Feb 1 it finds Feb 29. Ratchet gives the same answer
    # from any instant between two fires, so a schedule's fires do not depend on where a
    # search began.
    for after in (
        "2036-01-30T00:00:00+00:00",
        "2036-01-31T12:00:00+00:00",
        "2036-02-01T00:00:00+00:00",
    ):
        fires = next_fire_times("0 0 0 30W * ?", "UTC", datetime.fromisoformat(after), 1)
        assert _iso(fires) == [_utc("2036-02-29T00:00")]


# The search horizon. A search finds fire times up to the end of the year 100 years after the
# present, the `now` of the search (which defaults to `after`); Quartz's limit is the same, with
# the year its process started in as the present. PRESENT is 2026-12-01, so its horizon is 2126.
PRESENT = datetime(2026, 12, 1, tzinfo=UTC)


def test_a_rare_schedule_is_found_up_to_a_century_ahead() -> None:
    # Seconds 54/8 are {54} and minutes 14-15/3 are {14}. A fifth Friday in February needs a leap
    # year whose Feb 1 is a Friday: 2036, 2064, 2092, then 2104 (2100 is not a leap year), then
    # 2132, past the horizon 2126.
    fires = next_fire_times("54/8 14-15/3 8 ? 2 FRI#5", "UTC", PRESENT, 10)
    assert _iso(fires) == [
        _utc("2036-02-29T08:14:54"),
        _utc("2064-02-29T08:14:54"),
        _utc("2092-02-29T08:14:54"),
        _utc("2104-02-29T08:14:54"),
    ]
    # The horizon belongs to the present, not to where a search starts: from 1970, with the
    # present in 2026, the list ends at 2104 too.
    from_1970 = next_fire_times(
        "54/8 14-15/3 8 ? 2 FRI#5", "UTC", datetime(1970, 1, 1, tzinfo=UTC), 10, now=PRESENT
    )
    assert _iso(from_1970) == [
        _utc("1980-02-29T08:14:54"),
        _utc("2008-02-29T08:14:54"),
        *_iso(fires),
    ]


def test_the_horizon_is_the_end_of_the_year_a_century_after_now() -> None:
    after = datetime(2120, 1, 1, tzinfo=UTC)
    yearly = [_utc(f"{year}-01-01T00:00") for year in range(2121, 2128)]
    # Present 2026: every 1 January up to 2126, then nothing.
    assert _iso(next_fire_times("0 0 0 1 1 ?", "UTC", after, 10, now=PRESENT)) == yearly[:6]
    # Present 2027: one year more.
    now = datetime(2027, 1, 1, tzinfo=UTC)
    assert _iso(next_fire_times("0 0 0 1 1 ?", "UTC", after, 10, now=now)) == yearly
    # Without a present, `after` is the present: 2120 + 100 is far away.
    assert len(next_fire_times("0 0 0 1 1 ?", "UTC", after, 10)) == 10
    cron = CronExpression.parse("0 0 0 1 1 ?")
    assert cron.next_after(datetime(2126, 6, 1, tzinfo=UTC), ZoneInfo("UTC"), now=PRESENT) is None


def test_the_year_field_may_name_years_past_the_horizon() -> None:
    # They parse, and fire once the present is within a century of them.
    cron = CronExpression.parse("0 0 0 1 1 ? 2104,2127")
    utc = ZoneInfo("UTC")
    first = cron.next_after(PRESENT, utc, now=PRESENT)
    assert first == datetime(2104, 1, 1, tzinfo=utc)
    assert cron.next_after(first, utc, now=PRESENT) is None  # 2127 is past 2126
    later = datetime(2027, 1, 1, tzinfo=UTC)
    assert cron.next_after(first, utc, now=later) == datetime(2127, 1, 1, tzinfo=utc)


def test_the_horizon_year_is_the_present_year_in_the_zone() -> None:
    # 2026-12-31T20:00 UTC is already 2027-01-01T05:00 in Tokyo: the horizon there is 2127.
    now = datetime(2026, 12, 31, 20, tzinfo=UTC)
    after = datetime(2126, 6, 1, tzinfo=UTC)
    tokyo = next_fire_times("0 0 0 1 1 ?", "Asia/Tokyo", after, 2, now=now)
    assert _iso(tokyo) == ["2127-01-01T00:00:00+09:00"]
    assert next_fire_times("0 0 0 1 1 ?", "UTC", after, 2, now=now) == []


def test_nothing_fires_after_the_last_year_of_the_year_field() -> None:
    now = datetime(2950, 1, 1, tzinfo=UTC)
    after = datetime(2997, 6, 1, tzinfo=UTC)
    fires = next_fire_times("0 0 0 1 1 ?", "UTC", after, 5, now=now)
    assert _iso(fires) == [_utc("2998-01-01T00:00"), _utc("2999-01-01T00:00")]


def test_far_searches_are_fast() -> None:
    started = time.perf_counter()
    leap = next_fire_times(
        "0 0 0 29 2 ? 2096", "UTC", datetime(1970, 1, 1, tzinfo=UTC), 2, now=PRESENT
    )
    fifth = next_fire_times("0 0 0 ? * 6#5", NY, datetime(1970, 1, 1, tzinfo=UTC), 50)
    never = next_fire_times("0 0 0 30 2 ?", "UTC", datetime(1970, 1, 1, tzinfo=UTC), 1)
    seconds = next_fire_times("* * * * * ?", NY, datetime(2024, 11, 3, 6, 0, 1, tzinfo=UTC), 1)
    assert time.perf_counter() - started < 2.0
    assert _iso(leap) == ["2096-02-29T00:00:00+00:00"]
    assert len(fifth) == 50
    assert never == []
    # 06:00:01 UTC is 01:00:01 EST, the second pass over 01:xx: nothing fires until 02:00 EST.
    assert _iso(seconds) == ["2024-11-03T02:00:00-05:00"]


def test_parse_normalises_and_hashes() -> None:
    a = CronExpression.parse("  0  0 9 ? * mon ")
    b = CronExpression.parse("0 0 9 ? * MON")
    assert str(a) == "0 0 9 ? * MON"
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1
    assert CronExpression.parse(str(a)) == a
    assert a != CronExpression.parse("0 0 9 ? * TUE")
    with pytest.raises(AttributeError):
        a.text = "x"  # type: ignore[misc]


def test_zone_may_be_a_zoneinfo_and_count_zero() -> None:
    after = datetime(2024, 1, 1, tzinfo=UTC)
    assert next_fire_times("0 0 2 * * ?", ZoneInfo(NY), after, 1) == next_fire_times(
        "0 0 2 * * ?", NY, after, 1
    )
    assert next_fire_times("0 0 2 * * ?", NY, after, 0) == []


def test_after_in_another_zone_is_an_instant() -> None:
    # 2024-01-01T06:59 UTC is 01:59 in New York: the next 02:00 New York fire is one minute on.
    fires = next_fire_times("0 0 2 * * ?", NY, datetime(2024, 1, 1, 6, 59, tzinfo=UTC), 1)
    assert _iso(fires) == ["2024-01-01T02:00:00-05:00"]


def test_validate_returns_parsed_expression() -> None:
    assert validate("0 0 2 * * ?", NY) == CronExpression.parse("0 0 2 * * ?")
    assert validate("0 0 2 * * ?") is parse("0 0 2 * * ?")


def test_cron_next_lines() -> None:
    now = datetime(2024, 3, 9, 12, 0, tzinfo=UTC)
    assert cron_next_lines("0 0 2 * * ?", NY, None, 2, now) == [
        "2024-03-11T02:00:00-04:00",
        "2024-03-12T02:00:00-04:00",
    ]
    assert cron_next_lines("0 0 2 * * ?", NY, "2024-01-01T00:00:00+00:00", 1, now) == [
        "2024-01-01T02:00:00-05:00"
    ]
    # An --after without an offset is a wall time in the zone.
    assert cron_next_lines("0 0 2 * * ?", NY, "2024-01-01T02:00:00", 1, now) == [
        "2024-01-02T02:00:00-05:00"
    ]
    with pytest.raises(ValueError, match="ISO-8601"):
        cron_next_lines("0 0 2 * * ?", NY, "yesterday", 1, now)
    # The horizon is a century after `now`, wherever --after starts.
    assert cron_next_lines("0 0 0 1 1 ?", "UTC", "2120-01-01T00:00:00+00:00", 10, PRESENT) == [
        f"{year}-01-01T00:00:00+00:00" for year in range(2121, 2127)
    ]
