"""``context.logger()``: the logger a job writes its own log with (docs/retention.md, job logs).

:class:`JobLogBuffer` keeps an attempt's lines in memory within its
:class:`~ratchet.domain.retention.JobLogLimits`. Every line is storable text on every database;
a line past a limit is counted, never kept, so a job that logs without end costs a counter, not
memory or a slower outcome write.

Lines go to the attempt's bounded :class:`~ratchet.domain.joblog.JobLogBuffer`, stored when the
attempt ends (:func:`store_job_log`), and to Python's ``logging`` as ``ratchet.job`` records. A
line never raises into the job and never delays its outcome: formatting errors become the line,
a full buffer counts the line instead of keeping it, and a failed store write is only logged.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import traceback
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ratchet.domain.joblog import JobLogLine, LogLevel, bound_message
from ratchet.domain.retention import JobLogLimits

if TYPE_CHECKING:
    from ratchet.ports import Store

log = logging.getLogger("ratchet.worker")
job_log = logging.getLogger("ratchet.job")


def _render(msg: object, args: tuple[Any, ...]) -> str:
    """``msg % args`` as ``logging`` renders it; a message that cannot be rendered yields a
    line that says why (never an exception)."""
    try:
        text = msg if isinstance(msg, str) else str(msg)
        return text % args if args else text
    except Exception as exc:
        return f"<unformattable log message of type {type(msg).__name__}: {type(exc).__name__}>"


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

    def close(self, now: Callable[[], datetime]) -> list[JobLogLine]:
        """End the attempt's log and return its lines (with a closing line, dated ``now()``,
        saying how many were dropped, if any). Later :meth:`add` calls are refused."""
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
                        now(),
                        LogLevel.WARN,
                        f"{self._dropped} more line(s) not stored: the attempt reached its job "
                        f"log limits ({self.limits.max_lines} lines, "
                        f"{self.limits.max_chars} characters)",
                    )
                )
            return lines


class JobLogger:
    """Writes lines to the running attempt's job log (``debug`` .. ``error``, ``exception``).

    The arguments are those of :mod:`logging`: ``logger.info("copied %d rows", n)``.
    """

    def __init__(self, buffer: JobLogBuffer | None, now: Callable[[], datetime]) -> None:
        self._buffer = buffer
        self._now = now

    @property
    def stored(self) -> bool:
        """Whether lines are stored with the job (False: only Python logging sees them)."""
        return self._buffer is not None

    def limits_document(self) -> dict[str, int] | None:
        """The limits of the attempt's log as JSON (None when lines are not stored): what a
        child process running the attempt bounds its own lines by."""
        if self._buffer is None:
            return None
        return dataclasses.asdict(self._buffer.limits)

    def add_lines(self, lines: Iterable[Sequence[str]]) -> None:
        """Keep lines the attempt wrote elsewhere (a child process), as ``[level, message,
        ISO time]``; an unreadable line is dropped, never raised."""
        if self._buffer is None:
            return
        for line in lines:
            try:
                level, message, at = line
                self._buffer.add(LogLevel(level), str(message), datetime.fromisoformat(at))
            except Exception:
                log.debug("job log line from a child process dropped", exc_info=True)

    def log(self, level: int, msg: object, *args: Any, exc_info: bool = False) -> None:
        """Write one line at the ``logging`` level number ``level``."""
        text = _render(msg, args)
        if exc_info:
            trace = traceback.format_exc()
            if trace and not trace.startswith("NoneType: None"):
                text = f"{text}\n{trace.rstrip()}"
        if self._buffer is not None:
            try:
                self._buffer.add(LogLevel.of(level), text, self._now())
            except Exception:  # the job's log must never fail the job
                log.debug("job log line dropped", exc_info=True)
        if job_log.isEnabledFor(level):
            job_log.log(level, "%s", text[:4000])

    def debug(self, msg: object, *args: Any) -> None:
        self.log(logging.DEBUG, msg, *args)

    def info(self, msg: object, *args: Any) -> None:
        self.log(logging.INFO, msg, *args)

    def warning(self, msg: object, *args: Any) -> None:
        self.log(logging.WARNING, msg, *args)

    warn = warning

    def error(self, msg: object, *args: Any) -> None:
        self.log(logging.ERROR, msg, *args)

    def exception(self, msg: object, *args: Any) -> None:
        """An ERROR line followed by the traceback of the exception being handled."""
        self.log(logging.ERROR, msg, *args, exc_info=True)


def store_job_log(store: Store, buffer: JobLogBuffer | None, now: Callable[[], datetime]) -> int:
    """Close ``buffer`` and store its lines; return how many were stored. Never raises."""
    if buffer is None:
        return 0
    try:
        lines = buffer.close(now)
        if not lines:
            return 0
        from ratchet.ports import JobLogStore

        target = store.capability(JobLogStore)  # type: ignore[type-abstract]
        if target is None:
            return 0
        return target.append_job_logs(lines)
    except Exception as exc:
        log.warning(
            "job %s attempt %d: its %d log line(s) were not stored: %s",
            buffer.job_id,
            buffer.attempt,
            len(buffer.close(now)),
            exc,
        )
        return 0
