"""Extension points of the worker: gates before an attempt, periodic maintenance tasks.

Features plug in here instead of editing the job task: a circuit breaker or a resource permit is a
:class:`Gate`; the recurring materializer, the orphan scan or a signal-timeout scanner is a
:class:`PeriodicTask`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from ratchet.domain.model import ClaimedJob, Outcome, OutcomeKind

if TYPE_CHECKING:
    from ratchet.engine.worker import Worker


class Gate(Protocol):
    """Decides whether an attempt may start now (seed 000 steps 5 and 6)."""

    name: str

    def enter(self, worker: Worker, job: ClaimedJob, now: datetime) -> Outcome | None:
        """None lets the attempt proceed; an outcome (usually RESCHEDULE) ends it here."""

    def leave(self, worker: Worker, job: ClaimedJob) -> None:
        """Called once after the attempt, whatever its outcome, if :meth:`enter` let it pass."""


class PeriodicTask(Protocol):
    """Maintenance run on the worker's maintenance thread every ``interval``."""

    name: str
    interval: timedelta

    def run_once(self, worker: Worker) -> None:
        """Do one round; exceptions are logged and the task runs again next interval."""


def reschedule(
    job: ClaimedJob, started: datetime, finished: datetime, at: datetime, why: str
) -> Outcome:
    """An outcome that puts the job back to PENDING at ``at`` without consuming a retry."""
    return Outcome(
        job.job_id,
        job.epoch,
        job.attempt,
        OutcomeKind.RESCHEDULE,
        started,
        finished,
        error=why,
        retry_at=at,
    )


class CircuitBreakerGate:
    """Reschedules the attempt while the target service's breaker is open (no retry consumed)."""

    name = "circuit-breaker"

    def enter(self, worker: Worker, job: ClaimedJob, now: datetime) -> Outcome | None:
        from ratchet.targets import TargetRef

        resilience = worker.app.resilience
        service = TargetRef.parse(job.target).service_name
        if resilience.is_available(service):
            return None
        at = now + resilience.retry_delay(service)
        return reschedule(job, now, now, at, f"circuit open for {service}")

    def leave(self, worker: Worker, job: ClaimedJob) -> None:
        return None


class OrphanRecovery:
    """Returns RUNNING jobs of nodes silent longer than the grace to PENDING."""

    name = "orphan-recovery"

    def __init__(self, interval: timedelta) -> None:
        self.interval = interval

    def run_once(self, worker: Worker) -> None:
        worker.recover_once()
