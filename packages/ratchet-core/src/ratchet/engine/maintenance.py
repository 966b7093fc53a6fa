"""Maintenance: tasks a worker runs periodically on its maintenance thread.

The watcher, the permit janitor, the signal-timeout scan, the cancellation-request poll, the
recurring materializer and the work summary are each a :class:`PeriodicTask`; the list a worker
runs is built in :func:`ratchet.engine.assembly.periodic_tasks`.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from ratchet.ports import PermitStore

if TYPE_CHECKING:
    from ratchet.engine.host import WorkerHost

log = logging.getLogger("ratchet.worker")


class PermitJanitor:
    """Deletes this node's permits whose attempt is no longer running here (lost releases)."""

    name = "permit-janitor"

    def __init__(self, interval: timedelta) -> None:
        self.interval = interval

    def run_once(self, worker: WorkerHost) -> None:
        permits = worker.store.capability(PermitStore)  # type: ignore[type-abstract]
        if permits is None:
            return
        before = worker.app.now()
        # Running attempts, and timed-out ones whose call has not returned yet (they still use
        # the resource, as they still hold their slot).
        keep = [(job.job_id, job.epoch) for job in worker.slots.occupying_jobs()]
        released = permits.release_stale_permits(worker.node_id, keep, before=before)
        if released:
            log.warning("released %d permit(s) of attempts no longer running here", released)
