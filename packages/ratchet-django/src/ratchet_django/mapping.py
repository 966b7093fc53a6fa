"""How Django Tasks' priorities and statuses map onto Ratchet's (pure functions)."""

from __future__ import annotations

from ratchet import JobPriority, JobStatus

#: Django's task priorities are whole numbers in this range; 0 is the default.
DJANGO_MIN_PRIORITY = -100
DJANGO_MAX_PRIORITY = 100


def ratchet_priority(priority: int) -> JobPriority:
    """The Ratchet priority of a Django priority: 0 is NORMAL, below 0 LOW (below -50 LOWEST),
    above 0 HIGH (above 50 CRITICAL). Order-preserving; Ratchet's aging then lifts waiting jobs.

    :raises ValueError: ``priority`` is outside -100..100.
    """
    if not DJANGO_MIN_PRIORITY <= priority <= DJANGO_MAX_PRIORITY:
        raise ValueError(
            f"a Django task priority is between {DJANGO_MIN_PRIORITY} and "
            f"{DJANGO_MAX_PRIORITY}, got {priority}"
        )
    if priority < -50:
        return JobPriority.LOWEST
    if priority < 0:
        return JobPriority.LOW
    if priority == 0:
        return JobPriority.NORMAL
    if priority <= 50:
        return JobPriority.HIGH
    return JobPriority.CRITICAL


#: Ratchet status -> the name of the Django ``TaskResultStatus`` member shown for it.
STATUS_NAMES: dict[JobStatus, str] = {
    JobStatus.PENDING: "READY",  # waiting for its time, or for a retry
    JobStatus.QUEUED: "READY",  # claimed, waiting for a free slot on its node
    JobStatus.WAITING: "READY",  # waiting for a signal or for jobs it depends on
    JobStatus.PAUSED: "READY",  # paused by an operator
    JobStatus.RUNNING: "RUNNING",
    JobStatus.TIMED_OUT: "RUNNING",  # its node stalled; revived or taken over, still in flight
    JobStatus.SUCCEEDED: "SUCCESSFUL",
    JobStatus.FAILED: "FAILED",  # retries exhausted (dead-lettered)
    JobStatus.CANCELED: "FAILED",  # Django has no "canceled"; see errors for the reason
}
