"""Job logs: the lines a job writes through ``context.logger()``, bounded per attempt.

:class:`JobLogBuffer` keeps an attempt's lines in memory within its
:class:`~ratchet.domain.retention.JobLogLimits` (the store receives them when the attempt ends).
Every line is storable text on every database; a line past a limit is counted, never kept, so a
job that logs without end costs a counter, not memory or a slower outcome write.
"""

from __future__ import annotations

import enum
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime

from ratchet.domain.retention import JobLogLimits
from ratchet.domain.text import storable_text


class LogLevel(enum.StrEnum):
    """The levels a job log line has (Python's ``logging`` levels map onto them)."""

    DEBUG = "DEBUG"
    INFO = "INFO"
    WARN = "WARN"
    ERROR = "ERROR"

    @classmethod
    def of(cls, levelno: int) -> LogLevel:
        """The level of a ``logging`` level number (below INFO is DEBUG)."""
        if levelno >= 40:
            return cls.ERROR
        if levelno >= 30:
            return cls.WARN
        if levelno >= 20:
            return cls.INFO
        return cls.DEBUG


@dataclass(frozen=True)
class JobLogLine:
    """One stored line of a job's log."""

    job_id: uuid.UUID
    epoch: int
    """The attempt's epoch (with ``seq``, the line's identity)."""
    seq: int
    """Position of the line within its attempt, from 0."""
    attempt: int
    logged_at: datetime
    level: LogLevel
    message: str


def bound_message(message: str, limits: JobLogLimits) -> str:
    """``message`` as stored: storable text, at most ``limits.max_line_chars`` characters."""
    # Cut first (bounded work whatever the input's size), then make storable: escaping can
    # lengthen the text, so cut again.
    cap = limits.max_line_chars
    text = message if len(message) <= cap else message[: cap - 3] + "..."
    text = storable_text(text)
    if len(text) > cap:
        text = text[: cap - 3] + "..."
    return text


class JobLogBuffer:
    """The lines of one attempt, within its limits. Thread-safe (a job may log from threads)."""

    def __init__(self, job_id: uuid.UUID, epoch: int, attempt: int, limits: JobLogLimits) -> None:
        self.job_id = job_id
        self.epoch = epoch
        self.attempt = attempt
        self.limits = limits
        self._lines: list[JobLogLine] = []
        self._chars = 0
        self._dropped = 0
        self._closed = False
        self._lock = threading.Lock()

    @property
    def dropped(self) -> int:
        """Lines refused so far (a limit was reached, or the attempt had ended)."""
        return self._dropped

    def add(self, level: LogLevel, message: object, at: datetime) -> bool:
        """Keep one line written at ``at``; False if a limit (or the attempt's end) refused it."""
        if self._closed or len(self._lines) >= self.limits.max_lines - 1:
            # The last place is kept for the line that reports what was dropped.
            with self._lock:
                self._dropped += 1
            return False
        try:
            raw = message if isinstance(message, str) else str(message)
        except Exception as exc:  # a job's object may break its own __str__
            raw = f"<message unavailable: its __str__ raised {type(exc).__name__}>"
        text = bound_message(raw, self.limits)
        with self._lock:
            if (
                self._closed
                or len(self._lines) >= self.limits.max_lines - 1
                or self._chars + len(text) > self.limits.max_chars - 200
            ):
                self._dropped += 1
                return False
            line = JobLogLine(
                self.job_id, self.epoch, len(self._lines), self.attempt, at, level, text
            )
            self._lines.append(line)
            self._chars += len(text)
            return True

    def close(self, at: datetime) -> list[JobLogLine]:
        """End the attempt's log and return its lines (with a closing line saying how many were
        dropped, if any). Later :meth:`add` calls are refused."""
        with self._lock:
            self._closed = True
            lines = list(self._lines)
            if self._dropped:
                lines.append(
                    JobLogLine(
                        self.job_id,
                        self.epoch,
                        len(lines),
                        self.attempt,
                        at,
                        LogLevel.WARN,
                        f"{self._dropped} more line(s) not stored: the attempt reached its job "
                        f"log limits ({self.limits.max_lines} lines, "
                        f"{self.limits.max_chars} characters)",
                    )
                )
            return lines
