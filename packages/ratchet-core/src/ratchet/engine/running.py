"""A running attempt: what the attempt runner, the watchdog and the executor provider share."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from ratchet.domain.errors import JobTimeoutError
from ratchet.domain.model import ClaimedJob
from ratchet.domain.timeouts import AttemptPlan
from ratchet.engine.context import AttemptCancellation
from ratchet.ports import AttemptSpan


class Attempt:
    """One running attempt: its plan, cancellation request and who ended it.

    Implements :class:`~ratchet.ports.AttemptControl` for executor providers. Exactly one of
    the job's task and the watchdog *finishes* the attempt (:meth:`finish` is a compare-and-set);
    the other's outcome is discarded.
    """

    def __init__(self, job: ClaimedJob, plan: AttemptPlan) -> None:
        self.job = job
        self.plan = plan
        self.key = job.key
        self.cancellation = AttemptCancellation(plan.deadline)
        self._lock = threading.Lock()
        self._finished = False
        self._interrupt: Callable[[], object] | None = None
        self.timed_out = False
        """The watchdog ended it at the deadline."""
        self.interrupted = False
        """An interrupt was delivered to the running call."""
        self.returned = False
        """The task that ran it has returned (its slot is free again)."""
        self.zombie = False
        """It ignored the interrupt past the zombie grace (counted once)."""
        self.in_heap = False
        """A step of it waits in the watchdog's heap."""
        self.forgotten = False
        """It ended; its heap entry (if any) is stale."""
        self.node_id: str | None = None
        """The node running it (for the fields of log records about it)."""
        self.span: AttemptSpan | None = None
        """Its trace span, when the app traces."""

    # -- AttemptControl ------------------------------------------------------------------
    @property
    def deadline(self) -> datetime:
        return self.plan.deadline

    def is_cancellation_requested(self) -> bool:
        return self.cancellation.is_requested()

    def watch(
        self,
        *,
        interrupt: Callable[[], object] | None = None,
        on_request: Callable[[], None] | None = None,
    ) -> _Watch:
        return _Watch(self, interrupt, on_request)

    # -- the worker's side ---------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self._finished

    def finish(self, *, timed_out: bool = False) -> bool:
        """End the attempt; True for the first caller only."""
        with self._lock:
            if self._finished:
                return False
            self._finished = True
            self.timed_out = timed_out
            return True

    def interrupt(self) -> bool:
        """Deliver the installed interrupt (after a timed-out :meth:`finish`); True if any."""
        with self._lock:
            handler = self._interrupt
            self.interrupted = handler is not None
        if handler is not None:
            handler()
        return handler is not None

    def timeout_message(self) -> str:
        return (
            f"job {self.job.job_id} attempt {self.job.attempt} exceeded its "
            f"{seconds_text(self.plan.timeout)} timeout"
        )

    def __repr__(self) -> str:
        return f"<Attempt {self.job.job_id} #{self.job.attempt} epoch {self.job.epoch}>"


class _Watch:
    """The handlers one call of an attempt installs (:meth:`Attempt.watch`): a plain class, as
    it is entered once per job on the hot path."""

    __slots__ = ("_attempt", "_interrupt", "_on_request", "_remove")

    def __init__(
        self,
        attempt: Attempt,
        interrupt: Callable[[], object] | None,
        on_request: Callable[[], None] | None,
    ) -> None:
        self._attempt = attempt
        self._interrupt = interrupt
        self._on_request = on_request
        self._remove: Callable[[], None] | None = None

    def __enter__(self) -> None:
        attempt = self._attempt
        with attempt._lock:
            if attempt.timed_out:
                raise JobTimeoutError(attempt.timeout_message())
            attempt._interrupt = self._interrupt
        if self._on_request is not None:
            self._remove = attempt.cancellation.add_listener(self._on_request)

    def __exit__(self, *exc_info: object) -> None:
        attempt = self._attempt
        with attempt._lock:
            attempt._interrupt = None
        if self._remove is not None:
            self._remove()


def seconds_text(delta: timedelta) -> str:
    return f"{delta.total_seconds():.3f}".rstrip("0").rstrip(".") + "s"
