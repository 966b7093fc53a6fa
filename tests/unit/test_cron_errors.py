"""Invalid cron expressions, unknown zones and naive datetimes are refused with clear errors."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet.cron import (
    CronExpression,
    InvalidCronExpression,
    UnknownTimeZone,
    cron_next_lines,
    next_fire_times,
    resolve_zone,
    validate,
)
from ratchet.domain.errors import RatchetError

# (expression, field at fault, offending token, words the message must contain)
INVALID: list[tuple[str, str, str, str]] = [
    # Wrong number of fields.
    ("", "expression", "", "expected 6 or 7 fields"),
    ("0 0 * * ?", "expression", "0 0 * * ?", "got 5"),
    ("0 0 0 * * ? 2024 1", "expression", "0 0 0 * * ? 2024 1", "got 8"),
    ("* * * * *", "expression", "* * * * *", "got 5"),  # a Unix cron line
    # Out-of-range values.
    ("60 0 0 * * ?", "second", "60", "second value 60 out of range; allowed 0-59"),
    ("0 60 0 * * ?", "minute", "60", "minute value 60 out of range; allowed 0-59"),
    ("0 0 25 * * ?", "hour", "25", "hour value 25 out of range; allowed 0-23"),
    ("0 0 0 0 * ?", "day-of-month", "0", "day-of-month value 0 out of range; allowed 1-31"),
    ("0 0 0 32 * ?", "day-of-month", "32", "allowed 1-31"),
    ("0 0 0 1 13 ?", "month", "13", "month value 13 out of range; allowed 1-12 or JAN-DEC"),
    ("0 0 0 1 0 ?", "month", "0", "allowed 1-12 or JAN-DEC"),
    ("0 0 0 ? * 0", "day-of-week", "0", "day-of-week value 0 out of range; allowed 1-7"),
    ("0 0 0 ? * 8", "day-of-week", "8", "allowed 1-7 or SUN-SAT"),
    ("0 0 0-24 * * ?", "hour", "24", "out of range"),
    ("0 0 0 1,40 * ?", "day-of-month", "40", "out of range"),
    # Years.
    ("0 0 0 1 1 ? 1969", "year", "1969", "year value 1969 out of range; allowed 1970-2999"),
    ("0 0 0 1 1 ? 3000", "year", "3000", "allowed 1970-2999"),
    ("0 0 0 1 1 ? 2030-2020", "year", "2030-2020", "runs backwards"),
    # Names.
    ("0 0 0 1 JANUARY ?", "month", "JANUARY", "unknown name 'JANUARY'"),
    ("0 0 0 1 FOO ?", "month", "FOO", "unknown name"),
    ("0 0 0 ? * MONDAY", "day-of-week", "MONDAY", "unknown name"),
    ("0 0 0 ? * MON-FUN", "day-of-week", "FUN", "unknown name 'FUN'"),
    ("0 0 MON * * ?", "hour", "MON", "non-numeric"),
    ("0 0 0 1 * JAN", "day-of-week", "JAN", "unknown name 'JAN'"),
    # Malformed numbers and lists.
    ("0 0 1.5 * * ?", "hour", "1.5", "non-numeric"),
    ("0 0 -1 * * ?", "hour", "", "empty value"),
    ("0 0 1- * * ?", "hour", "", "empty value"),
    ("0 0 1,,2 * * ?", "hour", "1,,2", "empty list item"),
    ("0 0 1, * * ?", "hour", "1,", "empty list item"),
    # Steps.
    ("0 */0 * * * ?", "minute", "0", "minute step '0' is invalid; allowed 1-59"),
    ("0 */60 * * * ?", "minute", "60", "allowed 1-59"),
    ("0 0 */24 * * ?", "hour", "24", "allowed 1-23"),
    ("0 0 0 1 */13 ?", "month", "13", "allowed 1-12"),
    ("0 */x * * * ?", "minute", "X", "step 'X' is invalid"),  # tokens are upper-cased
    ("0 5/ * * * ?", "minute", "", "step '' is invalid"),
    ("0 */5/2 * * * ?", "minute", "5/2", "is invalid"),
    ("0 /5 * * * ?", "minute", "", "empty value"),
    # The '?' rules.
    ("0 0 0 ? * ?", "day-of-month/day-of-week", "?", "both '?'"),
    ("0 0 0 * * *", "day-of-month/day-of-week", "* *", "exactly one of them to be '?'"),
    ("0 0 0 1 * MON", "day-of-month/day-of-week", "1 MON", "both given"),
    ("0 0 0 L * 6L", "day-of-month/day-of-week", "L 6L", "both given"),
    ("? 0 0 * * ?", "second", "?", "must stand alone"),
    ("0 0 0 1 ? ?", "month", "?", "only in day-of-month or day-of-week"),
    ("0 0 0 ?,1 * ?", "day-of-month", "?", "must stand alone"),
    ("0 0 0 1 1 ? ?", "year", "?", "only in day-of-month or day-of-week"),
    # 'L' and 'W' misuse.
    ("0 0 L * * ?", "hour", "L", "special character"),
    ("0 0 0 1 L ?", "month", "L", "unknown name"),
    ("0 0 0 L,15 * ?", "day-of-month", "L,15", "must stand alone"),
    ("0 0 0 L-31 * ?", "day-of-month", "L-31", "allowed L-0 to L-30"),
    ("0 0 0 L-x * ?", "day-of-month", "L-X", "misuses 'L' or 'W'"),
    ("0 0 0 5L * ?", "day-of-month", "5L", "misuses"),
    ("0 0 0 W * ?", "day-of-month", "W", "misuses"),
    ("0 0 0 1-5W * ?", "day-of-month", "1-5W", "misuses"),
    ("0 0 0 15W,20 * ?", "day-of-month", "15W,20", "must stand alone"),
    ("0 0 0 32W * ?", "day-of-month", "32", "out of range"),
    ("0 0 0 0W * ?", "day-of-month", "0", "out of range"),
    ("0 0 0 ? * 6L,2", "day-of-week", "6L,2", "must stand alone"),
    ("0 0 0 ? * L-2", "day-of-week", "L-2", "misuses 'L' or '#'"),
    ("0 0 0 ? * 8L", "day-of-week", "8", "out of range"),
    ("0 0 0 ? * 1-3L", "day-of-week", "1-3L", "misuses"),
    ("0 0 0 ? * LW", "day-of-week", "LW", "misuses"),
    ("0 0 0 ? * 2W", "day-of-week", "2W", "unknown name"),
    # '#' misuse.
    ("0 0 0 ? * 6#0", "day-of-week", "6#0", "allowed 1-5 after '#'"),
    ("0 0 0 ? * 6#6", "day-of-week", "6#6", "allowed 1-5"),
    ("0 0 0 ? * 6#", "day-of-week", "6#", "allowed 1-5"),
    ("0 0 0 ? * 6#X", "day-of-week", "6#X", "allowed 1-5"),
    ("0 0 0 ? * 8#1", "day-of-week", "8", "out of range"),
    ("0 0 0 ? * 6#1,2#2", "day-of-week", "6#1,2#2", "must stand alone"),
    ("0 0 0 ? * #2", "day-of-week", "#2", "misuses"),
    ("0 0 0 1# * ?", "day-of-month", "1#", "non-numeric"),
    ("0 0 0 1 1# ?", "month", "1#", "unknown name"),
    # Absurdly long numbers are out of range, not a crash.
    ("0 0 " + "9" * 5000 + " * * ?", "hour", "9" * 5000, "out of range; allowed 0-23"),
    ("0 */" + "9" * 5000 + " * * * ?", "minute", "9" * 5000, "is invalid; allowed 1-59"),
    ("0 0 0 L-" + "9" * 5000 + " * ?", "day-of-month", "L-" + "9" * 5000, "L-0 to L-30"),
    ("0 0 0 ? * 6#" + "9" * 5000, "day-of-week", "6#" + "9" * 5000, "allowed 1-5"),
]


@pytest.mark.parametrize(
    ("expression", "field", "token", "words"), INVALID, ids=lambda v: str(v)[:40]
)
def test_invalid_expressions(expression: str, field: str, token: str, words: str) -> None:
    with pytest.raises(InvalidCronExpression) as caught:
        CronExpression.parse(expression)
    error = caught.value
    assert error.expression == expression
    assert error.field == field
    assert error.token == token
    assert words in str(error)
    assert str(error).startswith(f"invalid cron expression {expression!r}: ")


def test_message_matches_the_documented_shape() -> None:
    with pytest.raises(InvalidCronExpression) as caught:
        CronExpression.parse("0 0 25 * * ?")
    assert str(caught.value) == (
        "invalid cron expression '0 0 25 * * ?': hour value 25 out of range; allowed 0-23"
    )


def test_error_classes() -> None:
    assert issubclass(InvalidCronExpression, RatchetError)
    assert issubclass(InvalidCronExpression, ValueError)
    assert issubclass(UnknownTimeZone, RatchetError)
    assert issubclass(UnknownTimeZone, ValueError)


def test_non_string_expression() -> None:
    with pytest.raises(InvalidCronExpression, match="must be a string"):
        CronExpression.parse(5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "zone", ["Mars/Olympus_Mons", "", "   ", "America", "../etc/passwd", "/etc/localtime", "EST5"]
)
def test_unknown_zone(zone: str) -> None:
    with pytest.raises(UnknownTimeZone) as caught:
        resolve_zone(zone)
    assert repr(zone) in str(caught.value)
    assert caught.value.zone == zone
    with pytest.raises(UnknownTimeZone):
        next_fire_times("0 0 0 * * ?", zone, datetime(2024, 1, 1, tzinfo=UTC), 1)
    with pytest.raises(UnknownTimeZone):
        validate("0 0 0 * * ?", zone)


def test_known_zones_resolve() -> None:
    assert resolve_zone("UTC") == ZoneInfo("UTC")
    assert resolve_zone("Australia/Lord_Howe") == ZoneInfo("Australia/Lord_Howe")


def test_validate_reports_expression_errors() -> None:
    with pytest.raises(InvalidCronExpression):
        validate("0 0 0 * * *", "UTC")


def test_naive_after_is_refused() -> None:
    naive = datetime(2024, 1, 1)
    with pytest.raises(ValueError, match="timezone-aware"):
        next_fire_times("0 0 0 * * ?", "UTC", naive, 1)
    with pytest.raises(ValueError, match="timezone-aware"):
        CronExpression.parse("0 0 0 * * ?").next_after(naive, ZoneInfo("UTC"))
    aware = datetime(2024, 1, 1, tzinfo=UTC)
    with pytest.raises(ValueError, match="now must be a timezone-aware"):
        CronExpression.parse("0 0 0 * * ?").next_after(aware, ZoneInfo("UTC"), now=naive)
    with pytest.raises(ValueError, match="timezone-aware"):
        cron_next_lines("0 0 0 * * ?", "UTC", None, 1, naive)


@pytest.mark.parametrize("count", [-1, True, 1.5])
def test_bad_count_is_refused(count: object) -> None:
    with pytest.raises(ValueError, match="count"):
        next_fire_times("0 0 0 * * ?", "UTC", datetime(2024, 1, 1, tzinfo=UTC), count)  # type: ignore[arg-type]


@settings(max_examples=200)
@given(
    st.one_of(
        st.text(alphabet="0123456789*/?,-LW# ", max_size=40),
        st.lists(
            st.text(alphabet="0123456789*/?,-LW#JANMONFRIDECSUT", min_size=1, max_size=8),
            min_size=6,
            max_size=7,
        ).map(" ".join),
        st.text(max_size=30),
    )
)
def test_any_text_parses_or_raises_invalid_cron_expression(text: str) -> None:
    try:
        parsed = CronExpression.parse(text)
    except InvalidCronExpression as error:
        assert error.expression == text
        assert str(error).startswith("invalid cron expression ")
    else:
        assert CronExpression.parse(str(parsed)) == parsed
        zone = ZoneInfo("UTC")
        fire = parsed.next_after(datetime(2024, 1, 1, tzinfo=UTC), zone)
        assert fire is None or fire > datetime(2024, 1, 1, tzinfo=UTC)
