"""The last look before a job runs: is it still ours?

A job can be canceled (or taken over) between the moment a node claims it and the moment one of
the node's slots starts it. Its body must not run then: whatever side effects it has would happen
for a job the user already canceled. So every attempt re-reads its ownership right before it
starts. Attempts that start at about the same time (a claimed batch) share one read: the first
caller reads for every attempt waiting, and hands the next read to whoever queued meanwhile.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence

OwnedJobs = Callable[[Sequence[tuple[uuid.UUID, int]]], set[uuid.UUID]]
"""Which of these ``(job_id, epoch)`` pairs this node still owns (one store read)."""


class _Check:
    __slots__ = ("error", "key", "lead", "owned", "ready")

    def __init__(self, key: tuple[uuid.UUID, int]) -> None:
        self.key = key
        self.ready = threading.Event()
        self.lead = False
        self.owned = False
        self.error: BaseException | None = None


class StartCheck:
    """Confirms, one shared read per group of attempts, that jobs are still owned."""

    def __init__(self, owned_jobs: OwnedJobs) -> None:
        self._owned_jobs = owned_jobs
        self._lock = threading.Lock()
        self._queue: list[_Check] = []
        self._reading = False
        self.reads = 0
        """Store reads made so far (each confirmed one or more attempts)."""

    @property
    def waiting(self) -> int:
        """Attempts queued for the next read."""
        with self._lock:
            return len(self._queue)

    def confirm(self, job_id: uuid.UUID, epoch: int) -> bool:
        """Whether this node still owns ``job_id`` under ``epoch``.

        :raises StoreUnavailable: the read failed (the caller must not start the job).
        """
        check = _Check((job_id, epoch))
        with self._lock:
            self._queue.append(check)
            check.lead = not self._reading
            self._reading = True
        if not check.lead:
            check.ready.wait()
        if check.lead:  # read for everyone queued, this check included
            self._read_queued()
        if check.error is not None:
            raise check.error
        return check.owned

    def _read_queued(self) -> None:
        with self._lock:
            batch, self._queue = self._queue, []
        error: BaseException | None = None
        owned: set[uuid.UUID] = set()
        try:
            owned = self._owned_jobs([c.key for c in batch])
            self.reads += 1
        except Exception as exc:
            error = exc
        with self._lock:
            successor = self._queue[0] if self._queue else None
            if successor is None:
                self._reading = False
            else:
                successor.lead = True
        for check in batch:
            check.lead = False
            check.owned = check.key[0] in owned
            check.error = error
            check.ready.set()
        if successor is not None:
            successor.ready.set()  # it reads next, for itself and whoever queued after it
