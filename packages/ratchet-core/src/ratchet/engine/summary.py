"""A periodic line in the log saying what a worker did and what waits."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from ratchet.domain.lifecycle import JobStatus

if TYPE_CHECKING:
    from ratchet.engine.host import WorkerHost

log = logging.getLogger("ratchet.worker")


@dataclass
class _Counts:
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    rescheduled: int = 0


class WorkSummary:
    """Every ``interval``: jobs this worker finished since the last line (succeeded, failed,
    retried, rescheduled), the live jobs in the store by status, and its busy slots. At INFO
    when anything happened or work waits, else at DEBUG (an idle worker stays quiet)."""

    name = "work-summary"

    def __init__(self, interval: timedelta) -> None:
        self.interval = interval
        self._last = _Counts()

    def run_once(self, worker: WorkerHost) -> None:
        stats = worker.stats
        now = _Counts(stats.succeeded, stats.dead_lettered, stats.retried, stats.rescheduled)
        last, self._last = self._last, now
        done = _Counts(
            now.succeeded - last.succeeded,
            now.failed - last.failed,
            now.retried - last.retried,
            now.rescheduled - last.rescheduled,
        )
        live = worker.store.live_counts()
        waiting = live.get(JobStatus.PENDING.value, 0)
        capacity = worker.slots.capacity()
        busy = capacity - worker.slots.free()
        active = any(vars(done).values()) or waiting or busy
        log.log(
            logging.INFO if active else logging.DEBUG,
            "last %s: %d succeeded, %d failed, %d retried, %d rescheduled; live jobs: %s; "
            "slots busy %d/%d",
            _seconds(self.interval),
            done.succeeded,
            done.failed,
            done.retried,
            done.rescheduled,
            ", ".join(f"{n} {status}" for status, n in sorted(live.items())) or "none",
            busy,
            capacity,
        )


def _seconds(interval: timedelta) -> str:
    seconds = interval.total_seconds()
    return f"{seconds:.0f} s" if seconds >= 1 else f"{seconds * 1000:.0f} ms"
