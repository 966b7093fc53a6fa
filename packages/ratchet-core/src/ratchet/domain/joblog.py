"""Job logs: the lines a job writes through ``context.logger()``, bounded per attempt.

The values of a job log and the rule that bounds one line; the engine's per-attempt buffer
(:class:`ratchet.engine.joblogger.JobLogBuffer`) applies the limits of
:class:`~ratchet.domain.retention.JobLogLimits`.
"""

from __future__ import annotations

import enum
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
