"""The last look before a job runs: is it still ours?

A job can be canceled (or taken over) between the moment a node claims it and the moment one of
the node's slots starts it. Its body must not run then: whatever side effects it has would happen
for a job the user already canceled. So no attempt runs the job's code unless the store said,
no longer than ``max_age`` before, that the job is still this node's under its epoch.

The claim itself says so: jobs the poller hands to their slots right after claiming them start
on that answer (:meth:`StartCheck.expect`). An attempt that starts later than ``max_age`` after
its answer, or without one (``Worker.execute`` called directly), reads again; attempts in that
position at the same time share one read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence

from ratchet.domain.model import AttemptKey

Key = AttemptKey
"""A job and the epoch it was claimed under (:attr:`~ratchet.domain.model.ClaimedJob.key`)."""
OwnedJobs = Callable[[Sequence[Key]], set[Key]]
"""Which of these jobs this node still owns under those epochs (one store read)."""


class _Answer:
    """What one store read (or a claim) said about some jobs; attempts wait for it if needed."""

    __slots__ = ("at", "done", "error", "owned")

    def __init__(self, owned: set[Key] | None = None, at: float = float("inf")) -> None:
        self.done = threading.Event()
        self.owned: set[Key] = owned or set()
        self.error: BaseException | None = None
        self.at = at
        if owned is not None:
            self.done.set()

    def usable(self, now: float, max_age: float) -> bool:
        """Still in flight, or arrived successfully no longer than ``max_age`` ago."""
        if not self.done.is_set():
            return True
        return self.error is None and now - self.at <= max_age


class StartCheck:
    """Confirms that jobs are still this node's just before they start."""

    def __init__(
        self,
        owned_jobs: OwnedJobs,
        *,
        max_age: float = 0.05,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._owned_jobs = owned_jobs
        self._monotonic = monotonic
        self.max_age = max_age
        """Seconds an answer stays good for an attempt that has not started yet."""
        self._lock = threading.Lock()
        self._answers: dict[Key, _Answer] = {}
        self.reads = 0
        """Store reads made so far."""

    def expect(self, keys: Iterable[Key]) -> None:
        """These jobs were just claimed (or started) by this node and are about to start."""
        claimed = set(keys)
        answer = _Answer(claimed, self._monotonic())
        with self._lock:
            for key in claimed:
                self._answers[key] = answer

    def discard(self, key: Key) -> None:
        """Forget ``key`` (its attempt ended)."""
        if self._answers:
            self._answers.pop(key, None)  # one dict operation: atomic, no lock needed

    def forget_all(self) -> None:
        """Forget every answer: attempts that start from now on read the store first (a drain
        that hands back jobs still waiting for a thread)."""
        with self._lock:
            self._answers.clear()

    @property
    def pending(self) -> int:
        """Jobs with an answer whose attempts have not confirmed yet."""
        with self._lock:
            return len(self._answers)

    def confirm(self, key: Key) -> bool:
        """Whether this node still owns the job of ``key`` under its epoch.

        :raises StoreUnavailable: the read failed (the caller must not start the job).
        """
        now = self._monotonic()
        # The fast path, without the lock: one dict operation, and no other attempt asks for
        # this key. A fresh (or still running) answer is all it needs.
        answer = self._answers.pop(key, None)
        if answer is not None and answer.error is None and now - answer.at <= self.max_age:
            if not answer.done.is_set():
                answer.done.wait()
            if answer.error is not None:
                raise answer.error
            return key in answer.owned
        with self._lock:
            lead = answer is None or not answer.usable(now, self.max_age)
            if lead:
                # Read for this attempt and for every other waiting one whose answer is stale.
                answers = list(self._answers.items())  # one C-level copy: attempts pop unlocked
                stale = [k for k, a in answers if not a.usable(now, self.max_age)]
                answer = _Answer()
                for other in stale:
                    self._answers[other] = answer
                self.reads += 1
        assert answer is not None
        if lead:
            try:
                answer.owned = self._owned_jobs([key, *stale])
            except Exception as exc:
                answer.error = exc
            answer.at = self._monotonic()
            answer.done.set()
        else:
            answer.done.wait()
        if answer.error is not None:
            raise answer.error
        return key in answer.owned
