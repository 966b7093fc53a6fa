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
    assert run("0 0 12 25 DEC ? 2020", "--count", "3")[:2] == (0, [])


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
