"""Retention, archival and the dead-letter queue: the decisions, without I/O.

What is due for deletion at an instant, when a scheduled clean-up runs next, how big the next
batch is, which dead letters a filter selects and how a listing's cursor is written. The store
applies these decisions (:class:`~ratchet.ports.RetentionStore`); the engine runs them on a
schedule under a cluster lease. Time is always a parameter.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from ratchet.domain.errors import ConfigurationError, InvalidJobOptions
from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.options import validate_option_text
from ratchet.domain.quartz import CronExpression, InvalidCronExpression

#: The statuses whose jobs the retention task removes (FAILED jobs are the dead-letter queue,
#: purged on their own schedule).
RETAINED_STATUSES = (JobStatus.SUCCEEDED, JobStatus.CANCELED)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: The largest replay of dead letters in one all-or-nothing transaction.
MAX_REPLAY = 1000


def _check_days(name: str, days: int | None) -> None:
    if days is None:
        return
    if isinstance(days, bool) or not isinstance(days, int) or days < 0:
        raise ConfigurationError(
            f"{name} must be a whole number of days >= 0 (or None: keep forever), got {days!r}"
        )


def _check_cron(name: str, text: str) -> None:
    try:
        CronExpression.parse(text)
    except InvalidCronExpression as exc:
        raise ConfigurationError(f"{name}: {exc}") from None


@dataclass(frozen=True)
class JobLogLimits:
    """Bounds on what one attempt's ``context.logger()`` stores."""

    max_lines: int = 500
    """Lines kept per attempt; later ones are counted and reported in one closing line."""
    max_line_chars: int = 4000
    """A longer line is cut, ending in ``...``."""
    max_chars: int = 256_000
    """Characters kept per attempt, all lines together."""

    def __post_init__(self) -> None:
        if self.max_lines < 1 or self.max_line_chars < 16 or self.max_chars < self.max_line_chars:
            raise ConfigurationError(
                "job log limits: max_lines must be >= 1, max_line_chars >= 16 and max_chars >= "
                f"max_line_chars (got {self.max_lines}, {self.max_line_chars}, {self.max_chars})"
            )


@dataclass(frozen=True)
class RetentionSettings:
    """How long finished jobs, dead letters and job logs are kept, and when they are removed.

    A period of ``None`` keeps those rows forever. Pass it as ``Ratchet(url, retention=...)``.
    """

    succeeded_days: int | None = 90
    """SUCCEEDED jobs are removed this many days after they ended."""
    canceled_days: int | None = 90
    """CANCELED jobs are removed this many days after they ended."""
    archive: bool = False
    """Copy each removed job (with its attempt history) into ``scheduler_job_archive`` first."""
    enabled: bool = True
    """Workers run the retention task (``ratchet prune`` works either way)."""
    schedule: str = "0 0 1 * * ?"
    """Quartz cron of the retention task (seconds first), in ``zone``."""
    zone: str = "UTC"
    batch_size: int = 500
    """Jobs removed per transaction at first; the size adapts to ``batch_target``."""
    min_batch_size: int = 50
    max_batch_size: int = 2000
    batch_target: timedelta = timedelta(milliseconds=250)
    """How long one removal transaction should take."""
    pause_between_batches: timedelta = timedelta(milliseconds=20)
    """The shortest pause between two removal transactions."""
    busy_share: float = 0.5
    """At most this share of a run's time is spent inside removal transactions: after a batch
    that took ``t`` the run pauses ``t * (1 - busy_share) / busy_share`` (as long again, by
    default), so a long prune leaves the database and the CPUs to the workers the rest of the
    time. 1.0 pauses only ``pause_between_batches``."""
    job_log_days: int | None = 30
    """Job log lines are removed this many days after they were written."""
    dlq_purge_enabled: bool = True
    dlq_purge_days: int | None = 90
    """Dead letters (FAILED jobs) are removed this many days after they failed."""
    dlq_purge_schedule: str = "0 0 2 * * ?"
    lease: timedelta = timedelta(minutes=5)
    """The cluster lease a run holds (renewed after every batch); a node that dies mid-run
    blocks the others for at most this long."""
    job_logs: JobLogLimits = field(default_factory=JobLogLimits)

    def __post_init__(self) -> None:
        _check_days("succeeded_days", self.succeeded_days)
        _check_days("canceled_days", self.canceled_days)
        _check_days("job_log_days", self.job_log_days)
        _check_days("dlq_purge_days", self.dlq_purge_days)
        _check_cron("retention schedule", self.schedule)
        _check_cron("dlq_purge_schedule", self.dlq_purge_schedule)
        if not 1 <= self.min_batch_size <= self.batch_size <= self.max_batch_size <= 10_000:
            raise ConfigurationError(
                "retention batch sizes must satisfy 1 <= min_batch_size <= batch_size <= "
                f"max_batch_size <= 10000 (got {self.min_batch_size}, {self.batch_size}, "
                f"{self.max_batch_size})"
            )
        if self.batch_target <= timedelta(0) or self.pause_between_batches < timedelta(0):
            raise ConfigurationError(
                "batch_target must be positive and pause_between_batches not negative"
            )
        if not 0.05 <= self.busy_share <= 1.0:
            raise ConfigurationError(
                f"busy_share must be between 0.05 and 1.0, got {self.busy_share!r}"
            )
        if self.lease < timedelta(seconds=10):
            raise ConfigurationError(f"the retention lease must be >= 10 s, got {self.lease}")

    def period(self, status: JobStatus) -> int | None:
        """Days a job ending with ``status`` is kept (None: forever).

        :raises ValueError: ``status`` is not one the retention task removes.
        """
        if status is JobStatus.SUCCEEDED:
            return self.succeeded_days
        if status is JobStatus.CANCELED:
            return self.canceled_days
        if status is JobStatus.FAILED:
            return self.dlq_purge_days
        raise ValueError(f"{status.value} jobs are live; retention applies to ended jobs")


def cutoff(now: datetime, days: int | None) -> datetime | None:
    """The instant before which rows kept ``days`` days are due at ``now`` (None: never)."""
    return None if days is None else now - timedelta(days=days)


@dataclass(frozen=True)
class DuePrune:
    """Jobs that ended with ``status`` before ``before`` are due for removal."""

    status: JobStatus
    before: datetime


def due_prunes(settings: RetentionSettings, now: datetime) -> list[DuePrune]:
    """What the retention task removes at ``now``: one entry per retained status with a period."""
    due = []
    for status in RETAINED_STATUSES:
        before = cutoff(now, settings.period(status))
        if before is not None:
            due.append(DuePrune(status, before))
    return due


def next_run(schedule: str, zone: str, after: datetime) -> datetime | None:
    """The first fire time of ``schedule`` strictly after ``after``, in UTC (None: never)."""
    from ratchet.domain.quartz import resolve_zone

    fire = CronExpression.parse(schedule).next_after(after, resolve_zone(zone))
    return None if fire is None else fire.astimezone(UTC)


def next_batch_size(
    current: int, elapsed: timedelta, target: timedelta, lowest: int, highest: int
) -> int:
    """The size of the next removal batch after one of ``current`` rows took ``elapsed``.

    Aims at ``target`` per transaction: grows at most twofold after a fast batch, shrinks in
    proportion after a slow one (at least halving when it took more than twice the target),
    and always stays within ``lowest..highest``.
    """
    if elapsed <= timedelta(0):
        proposed = current * 2
    else:
        ratio = target / elapsed
        proposed = int(current * min(2.0, ratio))
        if ratio < 0.5:
            proposed = min(proposed, current // 2)
    return max(lowest, min(highest, proposed))


def pause_after(elapsed: timedelta, settings: RetentionSettings) -> timedelta:
    """How long to pause after a removal batch that took ``elapsed``: enough to keep the
    run's time in transactions to ``settings.busy_share``, never less than
    ``settings.pause_between_batches``."""
    share = settings.busy_share
    micros = elapsed / timedelta(microseconds=1) * ((1 - share) / share)
    # Rounded up: a pause rounded down to the microsecond would overshoot the share.
    keep_share = timedelta(microseconds=math.ceil(micros)) if micros > 0 else timedelta(0)
    return max(settings.pause_between_batches, keep_share)


# ---------------------------------------------------------------- the dead-letter queue
@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters (FAILED jobs) a listing, replay or purge applies to.

    Empty fields match every dead letter; ``failed_before`` / ``failed_after`` compare the
    instant the job failed for good.
    """

    target: str | None = None
    tag: str | None = None
    failed_before: datetime | None = None
    failed_after: datetime | None = None
    error_contains: str | None = None
    """A piece of the stored error text (compared as given, case included)."""

    def __post_init__(self) -> None:
        if self.target is not None:
            validate_option_text(self.target, "target")
        if self.tag is not None:
            validate_option_text(self.tag, "tag")
        if self.error_contains is not None:
            if not self.error_contains or len(self.error_contains) > 200:
                raise InvalidJobOptions("error_contains must be 1 to 200 characters")
            validate_option_text(self.error_contains, "error_contains")
        for name in ("failed_before", "failed_after"):
            value = getattr(self, name)
            if value is not None and (value.tzinfo is None or value.utcoffset() is None):
                raise InvalidJobOptions(f"{name} must be a timezone-aware datetime")
        if (
            self.failed_before is not None
            and self.failed_after is not None
            and self.failed_after >= self.failed_before
        ):
            raise InvalidJobOptions("failed_after must be earlier than failed_before")

    @property
    def is_empty(self) -> bool:
        """Whether the filter selects every dead letter."""
        return self == DeadLetterFilter()


def check_replay_limit(limit: int) -> int:
    """``limit`` if it is a valid replay size (1..1000).

    :raises InvalidJobOptions: it is not.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_REPLAY:
        raise InvalidJobOptions(f"a replay takes 1..{MAX_REPLAY} dead letters, got {limit!r}")
    return limit


@dataclass(frozen=True, order=True)
class PageCursor:
    """Where a newest-first listing of ended jobs continues: after ``(ended_at, job_id)``."""

    ended_at: datetime
    job_id: uuid.UUID

    def encode(self) -> str:
        """The cursor as an opaque token for a command line or an HTTP query."""
        micros = (self.ended_at - _EPOCH) // timedelta(microseconds=1)  # exact, no float
        return f"{micros}_{self.job_id.hex}"

    @classmethod
    def decode(cls, token: str) -> PageCursor:
        """The cursor a token stands for.

        :raises InvalidJobOptions: the token was not made by :meth:`encode`.
        """
        micros, sep, hexid = token.partition("_")
        try:
            if not sep or not micros.isdigit():
                raise ValueError(token)
            when = _EPOCH + timedelta(microseconds=int(micros))
            return cls(when, uuid.UUID(hex=hexid))
        except (ValueError, OverflowError, OSError):
            raise InvalidJobOptions(
                f"{token!r} is not a page cursor (use the `next` value of a listing)"
            ) from None


@dataclass(frozen=True)
class PruneReport:
    """What one retention, purge or dry run removed (or, dry, would remove)."""

    removed: dict[str, int] = field(default_factory=dict)
    """Rows per kind: ``SUCCEEDED``, ``CANCELED``, ``FAILED`` jobs, ``job_logs``,
    ``tombstones``."""
    archived: int = 0
    batches: int = 0
    dry_run: bool = False
    complete: bool = True
    """False when the run stopped early (lease lost, stop requested); the next run goes on."""

    @property
    def total(self) -> int:
        return sum(self.removed.values())
