"""``JobContext``: what a running job knows about itself, bound per attempt via contextvars."""

from __future__ import annotations

import contextvars
import logging
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

_current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar(
    "ratchet_job_context", default=None
)


@dataclass(frozen=True)
class JobContext:
    """The running attempt: ids, parameters and tags. Obtain it with :meth:`current`."""

    job_id: uuid.UUID
    attempt: int
    epoch: int
    node_id: str
    scheduled_time: datetime
    params: Mapping[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()

    @staticmethod
    def current() -> JobContext:
        """The context of the job running on this thread.

        :raises RuntimeError: no job is running here.
        """
        ctx = _current.get()
        if ctx is None:
            raise RuntimeError("JobContext.current() called outside a running job")
        return ctx

    @staticmethod
    def current_or_none() -> JobContext | None:
        """The context of the running job, or None outside a job."""
        return _current.get()

    def param(self, key: str, default: str | None = None) -> str | None:
        """A parameter set with ``with_param``."""
        return self.params.get(key, default)

    def signal(self) -> Any:
        """The payload (JSON-native) or :class:`~ratchet.SignalDecision` delivered to this job
        by ``app.deliver_signal``; None if none was delivered."""
        from ratchet.engine.workflows import signal_of

        return signal_of(self.node_id, self.job_id)

    def fencing_token(self) -> tuple[uuid.UUID, int]:
        """``(job_id, epoch)``: pass it to side effects outside the store to fence zombies."""
        return (self.job_id, self.epoch)


@contextmanager
def bound(ctx: JobContext) -> Iterator[JobContext]:
    """Bind ``ctx`` as the current job context for the duration of the block."""
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)


_factory_installed = False


def install_log_record_factory() -> None:
    """Give every log record ``ratchet_job_id`` and ``ratchet_node_id`` attributes.

    They are None outside a job. Idempotent; chains to the previous factory.
    """
    global _factory_installed
    if _factory_installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        ctx = _current.get()
        record.ratchet_job_id = str(ctx.job_id) if ctx else None
        record.ratchet_node_id = ctx.node_id if ctx else None
        return record

    logging.setLogRecordFactory(factory)
    _factory_installed = True
