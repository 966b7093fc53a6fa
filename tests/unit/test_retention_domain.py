"""The retention decisions: periods and cutoffs, schedules, batch sizing, dead-letter filters and
cursors, and the bounded job-log buffer (Hypothesis properties where a rule has a range)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratchet.domain.errors import ConfigurationError, InvalidJobOptions
from ratchet.domain.joblog import LogLevel, bound_message
from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.retention import (
    DeadLetterFilter,
    JobLogLimits,
    PageCursor,
    RetentionSettings,
    check_replay_limit,
    cutoff,
    due_prunes,
    next_batch_size,
    next_run,
    pause_after,
)
from ratchet.domain.text import is_storable_text
from ratchet.engine.joblogger import JobLogBuffer

T0 = datetime(2026, 5, 4, 13, 7, 0, tzinfo=UTC)
instants = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)


# ---------------------------------------------------------------- periods and schedules
@given(now=instants, days=st.one_of(st.none(), st.integers(0, 3650)))
def test_a_cutoff_is_exactly_the_period_before_now(now: datetime, days: int | None) -> None:
    before = cutoff(now, days)
    if days is None:
        assert before is None
    else:
        assert before is not None and now - before == timedelta(days=days)


@given(
    succeeded=st.one_of(st.none(), st.integers(0, 1000)),
    canceled=st.one_of(st.none(), st.integers(0, 1000)),
    now=instants,
)
def test_due_prunes_name_each_retained_status_with_a_period(
    succeeded: int | None, canceled: int | None, now: datetime
) -> None:
    settings = RetentionSettings(succeeded_days=succeeded, canceled_days=canceled)
    due = {d.status: d.before for d in due_prunes(settings, now)}
    assert JobStatus.FAILED not in due, "dead letters have their own schedule"
    for status, days in ((JobStatus.SUCCEEDED, succeeded), (JobStatus.CANCELED, canceled)):
        assert due.get(status) == cutoff(now, days)


def test_the_defaults_keep_jobs_90_days_logs_30_and_run_at_one_in_the_night() -> None:
    s = RetentionSettings()
    assert (s.succeeded_days, s.canceled_days, s.dlq_purge_days, s.job_log_days) == (90, 90, 90, 30)
    assert s.schedule == "0 0 1 * * ?" and not s.archive
    assert s.period(JobStatus.FAILED) == 90
    assert next_run(s.schedule, s.zone, T0) == datetime(2026, 5, 5, 1, 0, tzinfo=UTC)
    assert next_run(s.dlq_purge_schedule, s.zone, T0) == datetime(2026, 5, 5, 2, 0, tzinfo=UTC)
    with pytest.raises(ValueError, match="live"):
        s.period(JobStatus.PENDING)


def test_a_schedule_fires_in_its_zone() -> None:
    fire = next_run("0 0 1 * * ?", "Europe/Berlin", T0)
    assert fire == datetime(2026, 5, 4, 23, 0, tzinfo=UTC)  # 01:00 CEST


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"succeeded_days": -1}, "succeeded_days"),
        ({"canceled_days": 1.5}, "canceled_days"),
        ({"job_log_days": True}, "job_log_days"),
        ({"schedule": "0 0 1 * *"}, "retention schedule"),
        ({"dlq_purge_schedule": "nonsense"}, "dlq_purge_schedule"),
        ({"batch_size": 0}, "batch sizes"),
        ({"min_batch_size": 600}, "batch sizes"),
        ({"max_batch_size": 20_000}, "batch sizes"),
        ({"batch_target": timedelta(0)}, "batch_target"),
        ({"lease": timedelta(seconds=1)}, "lease"),
    ],
)
def test_bad_settings_are_refused_with_the_setting_named(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RetentionSettings(**overrides)  # type: ignore[arg-type]


def test_bad_log_limits_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="job log limits"):
        JobLogLimits(max_lines=0)
    with pytest.raises(ConfigurationError, match="job log limits"):
        JobLogLimits(max_line_chars=100, max_chars=50)


# ---------------------------------------------------------------- batch sizing
sizes = st.integers(1, 10_000)
durations = st.timedeltas(min_value=timedelta(0), max_value=timedelta(seconds=60))


@given(current=sizes, elapsed=durations, lo=st.integers(1, 100), span=st.integers(0, 5000))
def test_the_next_batch_stays_within_its_bounds(
    current: int, elapsed: timedelta, lo: int, span: int
) -> None:
    hi = lo + span
    size = next_batch_size(current, elapsed, timedelta(milliseconds=250), lo, hi)
    assert lo <= size <= hi


@given(current=st.integers(2, 5000), elapsed=durations)
def test_a_batch_grows_at_most_twofold_and_only_when_faster_than_the_target(
    current: int, elapsed: timedelta
) -> None:
    target = timedelta(milliseconds=250)
    size = next_batch_size(current, elapsed, target, 1, 10_000)
    assert size <= 2 * current
    if elapsed > target:
        assert size <= current, "a slow batch never makes the next one bigger"
    if elapsed > 2 * target:
        assert size <= current // 2 or size == 1, "a very slow batch at least halves"
    if elapsed * 2 <= target:
        assert size == min(10_000, 2 * current)


# ---------------------------------------------------------------- dead letters
@given(when=instants, ident=st.uuids())
def test_a_page_cursor_round_trips(when: datetime, ident: uuid.UUID) -> None:
    cursor = PageCursor(when, ident)
    again = PageCursor.decode(cursor.encode())
    assert again == cursor, "exact to the microsecond: a cursor never repeats or skips a row"


@pytest.mark.parametrize("token", ["", "abc", "12_notahex", "_" + uuid.uuid4().hex, "-5_00"])
def test_a_malformed_cursor_is_refused(token: str) -> None:
    with pytest.raises(InvalidJobOptions, match="not a page cursor"):
        PageCursor.decode(token)


@pytest.mark.parametrize("limit", [0, 1001, -3, True])
def test_a_replay_takes_one_to_a_thousand(limit: int) -> None:
    with pytest.raises(InvalidJobOptions, match=r"1\.\.1000"):
        check_replay_limit(limit)
    assert check_replay_limit(1) == 1 and check_replay_limit(1000) == 1000


def test_dead_letter_filters_refuse_bad_input() -> None:
    with pytest.raises(InvalidJobOptions, match="timezone-aware"):
        DeadLetterFilter(failed_before=datetime(2026, 1, 1))
    with pytest.raises(InvalidJobOptions, match="earlier"):
        DeadLetterFilter(failed_after=T0, failed_before=T0)
    with pytest.raises(InvalidJobOptions, match="error_contains"):
        DeadLetterFilter(error_contains="")
    with pytest.raises(InvalidJobOptions):
        DeadLetterFilter(tag="a\x00b")
    assert DeadLetterFilter().is_empty and not DeadLetterFilter(tag="x").is_empty


# ---------------------------------------------------------------- job log lines
hostile_text = st.text(
    alphabet=st.characters(codec=None, exclude_categories=()), max_size=3000
) | st.sampled_from(["\x00", "\ud800", "a\udfffb", "x" * 50_000, "é" * 9000])


@given(message=hostile_text, cap=st.integers(16, 5000))
def test_a_bounded_line_is_storable_and_within_its_cap(message: str, cap: int) -> None:
    text = bound_message(message, JobLogLimits(max_line_chars=cap, max_chars=cap * 10))
    assert is_storable_text(text)
    assert len(text) <= cap
    if len(message) <= cap and is_storable_text(message):
        assert text == message, "a storable line within the cap is kept as written"


@given(
    messages=st.lists(hostile_text, max_size=80),
    max_lines=st.integers(1, 40),
    line_chars=st.integers(16, 400),
    total=st.integers(400, 4000),
)
def test_an_attempts_buffer_never_exceeds_its_limits(
    messages: list[str], max_lines: int, line_chars: int, total: int
) -> None:
    limits = JobLogLimits(max_lines=max_lines, max_line_chars=line_chars, max_chars=total)
    buffer = JobLogBuffer(uuid.uuid4(), 3, 2, limits)
    kept = sum(buffer.add(LogLevel.INFO, m, T0) for m in messages)
    lines = buffer.close(lambda: T0)
    assert len(lines) <= max_lines
    assert sum(len(line.message) for line in lines) <= total
    assert [line.seq for line in lines] == list(range(len(lines)))
    assert all(is_storable_text(line.message) for line in lines)
    assert kept + buffer.dropped == len(messages)
    if buffer.dropped:
        assert lines[-1].level is LogLevel.WARN and f"{buffer.dropped} more" in lines[-1].message
    assert not buffer.add(LogLevel.INFO, "after the end", T0), "a closed buffer refuses lines"


def test_an_object_whose_str_breaks_becomes_a_line_that_says_so() -> None:
    class Broken:
        def __str__(self) -> str:
            raise RuntimeError("no")

    buffer = JobLogBuffer(uuid.uuid4(), 1, 1, JobLogLimits())
    assert buffer.add(LogLevel.ERROR, Broken(), T0)
    [line] = buffer.close(lambda: T0)
    assert "__str__ raised RuntimeError" in line.message


@pytest.mark.parametrize(
    ("levelno", "level"),
    [
        (5, LogLevel.DEBUG),
        (10, LogLevel.DEBUG),
        (20, LogLevel.INFO),
        (30, LogLevel.WARN),
        (40, LogLevel.ERROR),
        (50, LogLevel.ERROR),
    ],
)
def test_logging_levels_map_onto_job_log_levels(levelno: int, level: LogLevel) -> None:
    assert LogLevel.of(levelno) is level


@given(
    elapsed_ms=st.integers(0, 60_000),
    share=st.floats(0.05, 1.0),
    floor_ms=st.integers(0, 1_000),
)
def test_the_pause_keeps_a_run_inside_its_busy_share(
    elapsed_ms: int, share: float, floor_ms: int
) -> None:
    settings = RetentionSettings(
        busy_share=share, pause_between_batches=timedelta(milliseconds=floor_ms)
    )
    elapsed = timedelta(milliseconds=elapsed_ms)
    pause = pause_after(elapsed, settings)
    assert pause >= settings.pause_between_batches
    if elapsed_ms:
        busy = elapsed / (elapsed + pause)
        assert busy <= share + 1e-6, "never more than the share in transactions"
        if pause > settings.pause_between_batches:
            assert abs(busy - share) < 1e-3, "and no longer pause than the share needs"


def test_busy_share_out_of_range_is_refused() -> None:
    for share in (0.0, 0.01, 1.5, -1.0):
        with pytest.raises(ConfigurationError, match="busy_share"):
            RetentionSettings(busy_share=share)


def test_a_prune_pauses_as_long_as_its_batch_took_by_default() -> None:
    from ratchet.engine.retention import drain_batches

    now = [0.0]
    pauses: list[float] = []
    left = [1200]

    def step(size: int) -> int:
        now[0] += 0.3  # each batch takes 300 ms
        taken = min(size, left[0])
        left[0] -= taken
        return taken

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        now[0] += seconds

    removed, batches, complete = drain_batches(
        step, RetentionSettings(), clock=lambda: now[0], sleep=sleep
    )
    assert (removed, complete) == (1200, True)
    assert pauses == [pytest.approx(0.3)] * (batches - 1)
