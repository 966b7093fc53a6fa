"""``context.logger()``: the logger a job writes its own log with (docs/retention.md, job logs).

Lines go to the attempt's bounded :class:`~ratchet.domain.joblog.JobLogBuffer`, stored when the
attempt ends (:func:`store_job_log`), and to Python's ``logging`` as ``ratchet.job`` records. A
line never raises into the job and never delays its outcome: formatting errors become the line,
a full buffer counts the line instead of keeping it, and a failed store write is only logged.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ratchet.domain.joblog import JobLogBuffer, LogLevel

if TYPE_CHECKING:
    from ratchet.ports import Store

log = logging.getLogger("ratchet.worker")
job_log = logging.getLogger("ratchet.job")


def _render(msg: object, args: tuple[Any, ...]) -> str:
    """``msg % args`` as ``logging`` renders it; a broken format yields a line that says so."""
    try:
        text = msg if isinstance(msg, str) else str(msg)
        return text % args if args else text
    except Exception as exc:
        return f"<unformattable log message {msg!r:.200}: {type(exc).__name__}>"


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


def store_job_log(store: Store, buffer: JobLogBuffer | None, at: datetime) -> int:
    """Close ``buffer`` and store its lines; return how many were stored. Never raises."""
    if buffer is None:
        return 0
    from ratchet.ports import JobLogStore

    try:
        lines = buffer.close(at)
        if not lines:
            return 0
        target = store.capability(JobLogStore)  # type: ignore[type-abstract]
        if target is None:
            return 0
        return target.append_job_logs(lines)
    except Exception as exc:
        log.warning(
            "job %s attempt %d: its %d log line(s) were not stored: %s",
            buffer.job_id,
            buffer.attempt,
            len(buffer.close(at)),
            exc,
        )
        return 0
