"""``ratchet cron next``: fire times as ISO-8601 lines, and one-line errors with exit code 2."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from ratchet.cli import main


def run(*args: str) -> tuple[int, list[str], str]:
    result = CliRunner().invoke(main, ["cron", "next", *args])
    return result.exit_code, result.stdout.splitlines(), result.stderr


def test_prints_the_next_fire_times_across_a_dst_gap() -> None:
    code, lines, _ = run(
        "0 30 2 * * ?",
        "--zone",
        "America/New_York",
        "--after",
        "2024-03-09T00:00:00-05:00",
        "--count",
        "3",
    )
    assert code == 0
    assert lines == [
        "2024-03-09T02:30:00-05:00",
        "2024-03-11T02:30:00-04:00",  # no 02:30 on 10 March
        "2024-03-12T02:30:00-04:00",
    ]


def test_a_repeated_hour_fires_once_and_after_without_offset_is_a_wall_time() -> None:
    code, lines, _ = run(
        "0 */30 * * * ?", "--zone", "Europe/London", "--after", "2024-10-27T00:40", "--count", "4"
    )
    assert code == 0
    assert lines == [
        "2024-10-27T01:00:00+01:00",
        "2024-10-27T01:30:00+01:00",
        "2024-10-27T02:00:00+00:00",  # 01:00-01:30 GMT do not fire again
        "2024-10-27T02:30:00+00:00",
    ]


def test_after_is_exclusive_and_the_default_count_is_five() -> None:
    code, lines, _ = run("0 0 12 ? * MON-FRI", "--after", "2024-01-01T12:00:00+00:00")
    assert code == 0
    assert lines == [f"2024-01-0{d}T12:00:00+00:00" for d in (2, 3, 4, 5, 8)]


def test_a_schedule_that_ends_prints_fewer_lines() -> None:
    code, lines, _ = run("0 0 12 25 DEC ? 2025", "--after", "2024-01-01T00:00:00Z", "--count", "3")
    assert (code, lines) == (0, ["2025-12-25T12:00:00+00:00"])


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        (
            "0 0 0 30 2 ?",
            "no date matches its day-of-month, month, day-of-week and year fields together "
            "(such as the 30th of February)",
        ),
        ("0 0 0 29 2 ? 2027", "no date matches"),
        ("0 0 12 25 DEC ? 2020", "its last year, 2020, is over"),
        ("0 0 12 25 DEC ? 2500", "its first year, 2500, is more than 100 years ahead"),
    ],
)
def test_a_schedule_without_fire_times_says_why_and_fails(expression: str, why: str) -> None:
    code, lines, err = run(expression, "--after", "2024-01-01T00:00:00Z")
    assert (code, lines) == (2, [])
    assert err.startswith(
        f"error: {expression!r} never fires after 2024-01-01T00:00:00+00:00 in UTC: {why}"
    )
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("unix", "quartz"),
    [
        (
            "*/5 * * * *",
            "'0 */5 * * * ?' in Quartz (a leading 0 for the seconds and '?' for day-of-week)",
        ),
        ("30 2 1 * *", "'0 30 2 1 * ?'"),
        (
            "0 9 * * 1-5",
            "'0 0 9 ? * MON-FRI' in Quartz (a leading 0 for the seconds and '?' for day-of-month, with day names)",
        ),
        ("0 0 * * 0,6", "'0 0 0 ? * SUN,SAT'"),
        ("0 0 * * 7", "'0 0 0 ? * SUN'"),
    ],
)
def test_a_unix_cron_line_gets_its_quartz_form(unix: str, quartz: str) -> None:
    code, _, err = run(unix)
    assert code == 2
    assert f"got 5; as a Unix cron line it is {quartz}" in err
    suggested = quartz.split("'")[1]
    assert run(suggested, "--count", "1")[0] == 0, "the suggestion is a valid expression"


def test_a_unix_line_without_a_quartz_form_says_what_differs() -> None:
    _, _, err = run("0 0 1 * 1")
    assert err.rstrip().endswith(
        "got 5; this looks like a Unix cron line: Quartz adds a seconds field first, and cannot "
        "restrict both day-of-month and day-of-week (one of them must be '?')"
    )
    _, _, err = run("0 25 * * *")
    assert err.rstrip().endswith(
        "got 5; this looks like a Unix cron line: Quartz adds a seconds field first"
    )


def test_the_default_after_is_now() -> None:
    before = datetime.now(UTC)
    code, lines, _ = run("* * * * * ?", "--zone", "Asia/Kolkata", "--count", "3")
    assert code == 0 and len(lines) == 3
    times = [datetime.fromisoformat(line) for line in lines]
    assert all(t.utcoffset() is not None and t.utcoffset().total_seconds() == 19800 for t in times)  # type: ignore[union-attr]
    assert before < times[0] < times[1] < times[2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["0 0 25 * * ?"], "hour value 25 out of range; allowed 0-23"),
        (["*/5 * * * *"], "expected 6 or 7 fields"),
        (["0 0 12 * * *"], "'?'"),
        (["0 0 12 * * ?", "--zone", "Mars/Base"], "unknown time zone 'Mars/Base'"),
        (["0 0 12 * * ?", "--after", "yesterday"], "is not an ISO-8601 date-time"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(args: list[str], message: str) -> None:
    code, lines, err = run(*args)
    assert code == 2 and lines == []
    assert err.startswith("error: ") and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_count_must_be_positive() -> None:
    code, lines, err = run("0 0 12 * * ?", "--count", "0")
    assert code == 2 and lines == [] and "--count" in err
