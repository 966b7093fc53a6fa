"""A worker's counters (its own, and its liveness support's)."""

from __future__ import annotations

import collections
import uuid
from dataclasses import dataclass, field
from datetime import timedelta


@dataclass
class WorkerStats:
    """Counters of one worker (read them for tests, the demo and metrics)."""

    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead_lettered: int = 0
    rescheduled: int = 0
    fenced_out: int = 0
    recovered: int = 0
    store_errors: int = 0
    polls: int = 0
    outcome_batches: int = 0
    timed_out: int = 0
    """Attempts recorded as timeouts (deadline reached, or stopped on the cancellation request)."""
    zombies: int = 0
    """Calls still running ``zombie_grace`` after their deadline interrupt (stuck in C code)."""
    zombies_active: int = 0
    """Zombies that still occupy a slot now."""
    late_results_discarded: int = 0
    """Results of attempts that had already been recorded as timed out (or handed back)."""
    cancellations_delivered: int = 0
    """``cancel_job(id, interrupt=True)`` requests that reached a running attempt here."""
    wakeups_received: int = 0
    """Wake-up hints the coordinator delivered to this worker."""
    claims_reported: int = 0
    """Reports of this worker's claims sent to the other nodes (see ``Worker.report_claimed``)."""
    by_job: dict[uuid.UUID, str] = field(default_factory=lambda: RecentOutcomes(10_000))
    """How the most recent jobs ended here (the last 10,000; older ones are forgotten)."""


class RecentOutcomes(collections.OrderedDict[uuid.UUID, str]):
    """A dict that keeps only its ``limit`` most recently added keys (bounded memory).

    An ``OrderedDict``: dropping the oldest key of a plain dict means finding its first live
    entry past all the deleted ones, which grows with every key dropped until the dict is
    rebuilt (about 6 µs a key at 10,000 keys, against about 1 µs here).
    """

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def __setitem__(self, key: uuid.UUID, value: str) -> None:
        before = len(self)
        super().__setitem__(key, value)  # one hash of the key for a new one (a UUID's is slow)
        if len(self) == before:
            self.move_to_end(key)  # re-inserted: now the most recent
        elif before >= self.limit:
            self.popitem(last=False)


__all__ = ["RecentOutcomes", "WorkerStats"]


@dataclass
class LivenessStats:
    """Counters of one worker's liveness support (metrics)."""

    beats: int = 0
    watcher_passes: int = 0
    nodes_declared_dead: int = 0
    """Node incarnations this worker marked DEAD (silent, or its own previous ones)."""
    revoked: int = 0
    stalled: int = 0
    orphaned: int = 0
    expired: int = 0
    """TIMED_OUT jobs this worker's watcher failed (retry or DLQ) because nobody took them."""
    missed_start: int = 0
    """PENDING jobs this worker's watcher failed: not started by their schedule-to-start
    deadline (T14)."""
    taken_over: int = 0
    revived: int = 0
    fenced_progress: int = 0
    """Runs whose progress write was refused (FencedOut): stopped, outcome discarded."""
    restarts: int = 0
    """Times this worker found itself DEAD and continued as a new incarnation."""
    handed_back: int = 0
    drain_stops: int = 0
    """Attempts that stopped on the drain's request and were handed back instead of failing."""
    clock_skew: timedelta | None = None
    """Last measured difference between this node's clock and the database's."""
