"""A worker's slots: which jobs occupy them, and the attempts running in them.

A slot is taken from the moment the producer claims a job until its run ends. A run that ends
with an outcome to write leaves the job RUNNING in the store until the completer has written
it; up to ``write_ahead`` such outcomes wait without holding a slot, so the next claim overlaps
the write of the last batch instead of following it. Past that they hold their slots again
(back-pressure: a store that writes slowly stops the claims, and the store never sees more
than ``capacity() + write_ahead`` of the worker's jobs RUNNING). The slots are ``concurrency``
(the executors' threads) plus ``ahead``: jobs claimed beyond the threads while runs end fast
enough that they wait for one only briefly (:meth:`pace`). An attempt the watchdog
recorded as timed out keeps its slot while its call is still running (it is *expired*: a
zombie if it ignores the interrupt). The producer, the attempt runner, the completer and the
liveness code share this one table and change it only through its methods.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable

from ratchet.domain.batching import RunRate, RunTimes, claim_ahead
from ratchet.domain.model import AttemptKey, ClaimedJob
from ratchet.engine.running import Attempt

Key = AttemptKey
"""A job and the epoch of one of its attempts (:attr:`ClaimedJob.key`)."""


class SlotTable:
    """The slots of one worker, under one lock: ``concurrency`` threads' worth, and up to
    ``ahead_budget`` seconds of runs more (:meth:`pace`; zero: none). ``write_ahead``: finished
    runs whose outcomes may wait to be written without holding a slot; ``claim_size``: the most
    jobs one poll claims, which sets when a run that ends wakes the producer."""

    def __init__(
        self,
        concurrency: int,
        *,
        write_ahead: int = 0,
        claim_size: int = 1,
        ahead_budget: float = 0.0,
    ) -> None:
        self.concurrency = concurrency
        self.write_ahead = write_ahead
        self.claim_size = claim_size
        self.ahead_budget = ahead_budget
        self.ahead = 0
        """Slots beyond ``concurrency`` (set by :meth:`pace`)."""
        #: Free slots that make a finished run wake the producer: half a claim, so that the
        #: runs of one batch ending one by one make a few claims of many jobs, not many of one.
        self.wake_at = self._half_claim(concurrency)
        self.run_rate = RunRate()
        """How many runs end here per second, outcomes written (fed by :meth:`pace`)."""
        self._ended = 0
        self._paced: tuple[float, int] | None = None
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._waiters = 0  # threads in gather() or wait_for_runs(): changes notify only then
        self._running: dict[int, ClaimedJob] = {}  # by job_id.int
        self._expired: dict[Key, ClaimedJob] = {}
        self._attempts: dict[Key, Attempt] = {}
        self._unwritten = 0
        self._found_work = False
        self._progress = threading.Condition(threading.Lock())
        self._progress_count = 0
        self.run_times = RunTimes()
        """How long the runs here take, on average (fed by the completer, read by the
        producer and the completer to size their batching windows)."""

    # ------------------------------------------------------------------ reading
    def free(self) -> int:
        """Slots neither running a job nor holding a finished run's outcome that waits to be
        written beyond the ``write_ahead`` allowance."""
        with self._lock:
            return self._free()

    def capacity(self) -> int:
        """All slots: ``concurrency``, and those ahead of it while the last poll found work (an
        idle worker has only its threads)."""
        return self.concurrency + (self.ahead if self._found_work else 0)

    def utilisation(self) -> float:
        """The share of the slots taken (0 to 1), both read at one moment."""
        with self._lock:
            return 1 - self._free() / self.capacity()

    def _free(self) -> int:
        held = max(0, self._unwritten - self.write_ahead)
        taken = len(self._running) + len(self._expired) + held
        return max(0, self.capacity() - taken)

    def _half_claim(self, slots: int) -> int:
        """:attr:`wake_at` for ``slots`` slots: half of what one claim can take, at least 1."""
        return max(1, min(slots, self.claim_size) // 2)

    def local_job_ids(self) -> set[uuid.UUID]:
        """Jobs whose runs occupy a slot here (running or expired)."""
        with self._lock:
            return {job.job_id for job in self._running.values()} | {
                job.job_id for job in self._expired.values()
            }

    def occupying_jobs(self) -> list[ClaimedJob]:
        """Claimed jobs whose runs occupy a slot here (running or expired)."""
        with self._lock:
            return [*self._running.values(), *self._expired.values()]

    def attempt(self, key: Key) -> Attempt | None:
        """The live attempt of ``key`` (None once it returned)."""
        return self._attempts.get(key)

    def attempts(self, job_id: uuid.UUID | None = None, epoch: int | None = None) -> list[Attempt]:
        """Live attempts (of ``job_id`` / ``epoch`` when given)."""
        with self._lock:
            return [
                a
                for a in self._attempts.values()
                if (job_id is None or a.job.job_id == job_id)
                and (epoch is None or a.job.epoch == epoch)
            ]

    def in_flight(self) -> bool:
        """Whether a claimed job's run has not ended yet (it may bring an outcome soon)."""
        return bool(self._running)

    def busy(self) -> bool:
        """Whether any attempt is live."""
        return bool(self._attempts)

    # ------------------------------------------------------------------ changes
    def pace(self, now: float) -> int:
        """Measure how fast runs end here since the last call (``now``: a monotonic time in
        seconds), counting a run with an outcome once the outcome is written, and size the
        slots ahead of ``concurrency`` by it; returns them. A job claimed ahead waits about
        ``ahead_budget`` for a thread (:func:`claim_ahead`); a store that writes slowly slows
        the rate, so the back-pressure of unwritten outcomes holds."""
        with self._lock:
            ended = self._ended
        last, self._paced = self._paced, (now, ended)
        if last is not None:
            self.run_rate.observe(ended - last[1], now - last[0])
        ahead = claim_ahead(self.run_rate.per_second, self.ahead_budget)
        if ahead != self.ahead:
            with self._lock:
                self.ahead = ahead
                self.wake_at = self._half_claim(self.concurrency + ahead)
        return ahead

    def claimed(self, jobs: Iterable[ClaimedJob]) -> None:
        """A poll claimed ``jobs`` (each takes a slot). Whether it found any decides whether a
        slot that frees wakes the producer (more may be waiting) or not."""
        with self._lock:
            found = False
            for job in jobs:
                self._running[job.job_id.int] = job
                found = True
            self._found_work = found

    def began(self, attempt: Attempt) -> None:
        with self._lock:
            self._attempts[attempt.key] = attempt

    def returned(self, attempt: Attempt) -> bool:
        """The task running ``attempt`` returned; True if it was a zombie (counted out)."""
        with self._lock:
            self._attempts.pop(attempt.key, None)
            attempt.returned = True
            return attempt.zombie

    def mark_zombie(self, attempt: Attempt) -> bool:
        """Count ``attempt`` as a zombie once; False if it returned or was counted already."""
        with self._lock:
            if attempt.returned or attempt.zombie:
                return False
            attempt.zombie = True
            return True

    def expire(self, job: ClaimedJob, key: Key) -> None:
        """The watchdog recorded ``key``'s timeout (one outcome to write); the slot stays taken
        until the call returns."""
        with self._lock:
            if self._running.get(job.job_id.int) is job:
                del self._running[job.job_id.int]
                self._expired[key] = job
            self._unwritten += 1

    def run_ended(self, job: ClaimedJob, *, outcome: bool) -> bool:
        """The run of ``job`` ended, with an ``outcome`` to write or not. Returns whether the
        producer should poll now: the last poll found work, and the slot is free at once
        without an outcome, or this run brought the free slots up to :attr:`wake_at` (with an
        outcome, the slot frees at once while the unwritten outcomes fit ``write_ahead``)."""
        with self._lock:
            found = self._found_work
            before = self._free() if found and outcome else 0
            if self._running.get(job.job_id.int) is job:
                del self._running[job.job_id.int]
            if self._expired:
                self._expired.pop(job.key, None)
            if outcome:
                self._unwritten += 1
            else:
                self._ended += 1
            wake = found and (not outcome or before < self.wake_at <= self._free())
            if self._waiters:
                self._changed.notify_all()
        if not outcome:
            self.notify_progress()
        return wake

    def written(self, count: int) -> bool:
        """``count`` outcomes were written (or given up); the slots they held are free. Returns
        whether the producer should poll now (the last poll found work and a slot is free)."""
        with self._lock:
            self._unwritten -= count
            self._ended += count
            if self._waiters:
                self._changed.notify_all()
            wake = self._found_work and self._free() > 0
        self.notify_progress()
        return wake

    def release(self, job: ClaimedJob) -> None:
        """Free ``job``'s slot without an outcome (a caller that runs jobs by hand)."""
        with self._lock:
            if self._running.get(job.job_id.int) is job:
                del self._running[job.job_id.int]

    # ------------------------------------------------------------------ waiting
    def gather(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for the free slots to reach :attr:`wake_at` while
        runs are still in flight (they may end in a moment); returns the free slots then."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                free = self._free()
                remaining = deadline - time.monotonic()
                if free >= self.wake_at or not self._running or remaining <= 0:
                    return free
                self._wait(remaining)

    def wait_for_runs(self, deadline: float) -> list[uuid.UUID]:
        """Wait until no job is running here or ``deadline`` (monotonic) passes; returns the
        jobs still running then."""
        with self._changed:
            while self._running and time.monotonic() < deadline:
                self._wait(max(0.0, deadline - time.monotonic()))
            return [job.job_id for job in self._running.values()]

    def _wait(self, timeout: float) -> None:
        """Wait (holding the lock) until a run ends, outcomes are written or ``timeout``."""
        self._waiters += 1
        try:
            self._changed.wait(timeout)
        finally:
            self._waiters -= 1

    def notify_progress(self) -> None:
        with self._progress:
            self._progress_count += 1
            self._progress.notify_all()

    def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until ``predicate()`` holds (checked again whenever a run ends or an outcome
        batch is written, and at least every 0.25 s) or ``timeout`` seconds pass.

        The predicate runs without this table's locks held, so it may read the table or the
        database.
        """
        deadline = time.monotonic() + timeout
        while True:
            with self._progress:
                seen = self._progress_count
            if predicate():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with self._progress:
                if self._progress_count == seen:
                    self._progress.wait(timeout=min(remaining, 0.25))
