"""The watchdog: one thread per node that times every running attempt (docs/timeouts.md).

Each attempt gets an :class:`Attempt` (what the worker, the watchdog and the executor provider
share) and a plan from :func:`ratchet.domain.timeouts.plan_attempt`. The watchdog keeps each
attempt's next step (in its timeout's lane until the first fires, then in a heap) and fires
steps when the clock reaches them: a soft warning,
the cancellation request at deadline - grace, and at the deadline the worker's ``on_deadline``
(which records the timeout and interrupts the call). Time comes from the injected clock, so tests
drive it with a :class:`~ratchet.testing.FakeClock` and :meth:`Watchdog.run_due`, no sleeping.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ratchet.domain.model import ClaimedJob
from ratchet.domain.timeouts import TimeoutSettings, WatchdogStep, plan_attempt
from ratchet.engine.context import about_job
from ratchet.engine.running import Attempt, seconds_text
from ratchet.named_thread import NamedThread
from ratchet.ports import CancellationStore, Clock

if TYPE_CHECKING:
    from ratchet.engine.host import WorkerHost

log = logging.getLogger("ratchet.watchdog")

#: Heap entries of finished attempts are dropped in one sweep once they are this many and half.
COMPACT_AFTER = 1024


#: Until when a watchdog that is not sleeping sleeps: nothing scheduled needs to wake it.
_NEVER = datetime.min.replace(tzinfo=UTC)

_ZOMBIE_CHECK = 99
"""Heap entry kind: see whether an interrupted call returned (not a :class:`WatchdogStep`)."""


class _Lane:
    """The attempts of one timeout waiting for their first step, in the order they began.

    Attempts with one timeout have the same step offsets, so those that begin in time order
    fall due in that order: the lane is a FIFO whose head is due first. It is an ordered
    dict, so an attempt that ends (nearly all end before their first step) leaves it at once:
    no heap entry to push, sift or sweep per attempt.
    """

    __slots__ = ("entries", "tail")

    def __init__(self) -> None:
        self.entries: OrderedDict[int, Attempt] = OrderedDict()
        self.tail: datetime | None = None
        """When the last attempt added falls due (the next must not be earlier)."""

    def head(self) -> Attempt:
        return next(iter(self.entries.values()))


def _first_due(attempt: Attempt) -> datetime:
    return attempt.plan.first_due


class Watchdog:
    """Times attempts on one thread (never a thread per job).

    An attempt waits for its first step in its timeout's :class:`_Lane`; later steps, zombie
    checks and an attempt that would fall due before the last one of its lane go in a heap.

    :param clock: where time comes from (a FakeClock in tests).
    :param settings: default SLA, soft-warning percent, cancellation grace.
    :param on_deadline: called on the watchdog thread when an attempt reaches its deadline
        unfinished; it records the timeout and interrupts the call.
    :param on_zombie_check: called ``zombie_grace`` after an interrupt, to see whether the call
        returned.
    :param max_wait: longest sleep between checks (bounds the effect of clock jumps).
    """

    def __init__(
        self,
        clock: Clock,
        settings: TimeoutSettings,
        *,
        on_deadline: Callable[[Attempt], None],
        on_zombie_check: Callable[[Attempt], None] | None = None,
        max_wait: float = 0.5,
    ) -> None:
        self.clock = clock
        self.settings = settings
        self.on_deadline = on_deadline
        self.on_zombie_check = on_zombie_check
        self.max_wait = max_wait
        self._heap: list[tuple[datetime, int, int, Attempt]] = []
        self._lanes: dict[timedelta, _Lane] = {}
        self._lane_of: dict[int, _Lane] = {}
        """The lane each waiting attempt is in, by ``id(attempt)``."""
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._stale = 0
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._sleeping_until = _NEVER
        """Until when the watchdog thread sleeps: a step due before then wakes it."""

    # -- scheduling ------------------------------------------------------------------------
    def begin(self, job: ClaimedJob, started: datetime) -> Attempt:
        """Plan and watch a new attempt of ``job`` that started at ``started``."""
        attempt = Attempt(job, plan_attempt(started, job.timeout, self.settings))
        when = _first_due(attempt)
        timeout = attempt.plan.timeout
        with self._lock:
            lane = self._lanes.get(timeout)
            if lane is None:
                lane = self._lanes[timeout] = _Lane()
            if lane.tail is not None and when < lane.tail:
                # Began "earlier" than the last one of its lane (another thread read the clock
                # first, or the clock went back): the heap keeps the order.
                self._push_locked(when, attempt.plan.offsets[0][1], attempt)
                return attempt
            lane.entries[id(attempt)] = attempt
            lane.tail = when
            self._lane_of[id(attempt)] = lane
            if when < self._sleeping_until:
                self._cond.notify_all()  # the watchdog sleeps past this one
        return attempt

    def forget(self, attempt: Attempt) -> None:
        """The attempt ended: it leaves its lane, or its heap entry will be skipped (and swept
        in bulk)."""
        key = id(attempt)
        if key not in self._lane_of and not attempt.in_heap:
            return
        with self._lock:
            lane = self._lane_of.pop(key, None)
            if lane is not None:
                del lane.entries[key]
                return
            if not attempt.in_heap or attempt.forgotten:
                return
            attempt.forgotten = True
            self._stale += 1
            if self._stale > COMPACT_AFTER and self._stale * 2 > len(self._heap):
                kept = []
                for entry in self._heap:
                    if entry[2] != _ZOMBIE_CHECK and entry[3].forgotten:
                        entry[3].in_heap = False
                    else:
                        kept.append(entry)
                heapq.heapify(kept)
                self._heap = kept
                self._stale = 0

    def check_zombie_at(self, when: datetime, attempt: Attempt) -> None:
        """Call ``on_zombie_check(attempt)`` at ``when``."""
        self._push(when, _ZOMBIE_CHECK, attempt)

    def _push(self, when: datetime, kind: int, attempt: Attempt) -> None:
        with self._lock:
            self._push_locked(when, kind, attempt)

    def _push_locked(self, when: datetime, kind: int, attempt: Attempt) -> None:
        if kind != _ZOMBIE_CHECK:
            attempt.in_heap = True
        entry = (when, next(self._seq), kind, attempt)
        heapq.heappush(self._heap, entry)
        if when < self._sleeping_until:
            self._cond.notify_all()

    def pending(self) -> int:
        """Steps waiting: attempts in their lanes, and heap entries (including ones of
        finished attempts not yet swept)."""
        with self._cond:
            return len(self._lane_of) + len(self._heap)

    def next_due(self) -> datetime | None:
        with self._cond:
            return self._next_due_locked()

    def _next_due_locked(self) -> datetime | None:
        due = [_first_due(lane.head()) for lane in self._lanes.values() if lane.entries]
        if self._heap:
            due.append(self._heap[0][0])
        return min(due, default=None)

    # -- firing ------------------------------------------------------------------------------
    def _take_due(self, now: datetime) -> tuple[int, Attempt] | None:
        """The next step due at ``now`` (its kind and attempt), taken out; None when none is
        (caller holds the lock)."""
        lanes = [lane for lane in self._lanes.values() if lane.entries]
        ready = [lane for lane in lanes if _first_due(lane.head()) <= now]
        if ready:
            lane = min(ready, key=lambda lane: _first_due(lane.head()))
            attempt = lane.head()
            del lane.entries[id(attempt)]
            del self._lane_of[id(attempt)]
            return attempt.plan.offsets[0][1], attempt
        if not self._heap or self._heap[0][0] > now:
            for timeout in [t for t, lane in self._lanes.items() if not lane.entries]:
                del self._lanes[timeout]  # a lane is made again when its timeout is used
            return None
        _, _, kind, attempt = heapq.heappop(self._heap)
        if kind != _ZOMBIE_CHECK:
            attempt.in_heap = False
            if attempt.forgotten:
                self._stale -= 1
        return kind, attempt

    def run_due(self) -> int:
        """Fire every step due at the clock's now; returns how many fired (tests call this)."""
        fired = 0
        now = self.clock.now()
        while True:
            with self._cond:
                taken = self._take_due(now)
            if taken is None:
                return fired
            kind, attempt = taken
            if kind == _ZOMBIE_CHECK:
                fired += 1
                with about_job(attempt.job.job_id, attempt.job.attempt, attempt.node_id):
                    self._call(self.on_zombie_check, attempt)
                continue
            if attempt.finished:
                continue
            fired += 1
            step = WatchdogStep(kind)
            self._fire(step, attempt, now)
            order = [s for _, s in attempt.plan.steps]
            index = order.index(step) + 1
            if index < len(order) and not attempt.finished:
                self._push(attempt.plan.steps[index][0], order[index], attempt)

    def _fire(self, step: WatchdogStep, attempt: Attempt, now: datetime) -> None:
        with about_job(attempt.job.job_id, attempt.job.attempt, attempt.node_id):
            self._fire_step(step, attempt, now)

    def _fire_step(self, step: WatchdogStep, attempt: Attempt, now: datetime) -> None:
        job, plan = attempt.job, attempt.plan
        if step is WatchdogStep.SOFT_WARNING:
            log.warning(
                "job %s attempt %d has run %s, %d%% of its %s timeout (soft timeout; "
                "interrupted at %s)",
                job.job_id,
                job.attempt,
                seconds_text(now - plan.started),
                self.settings.soft_timeout_percent,
                seconds_text(plan.timeout),
                plan.deadline.isoformat(),
            )
        elif step is WatchdogStep.CANCELLATION_REQUEST:
            remaining = seconds_text(max(plan.deadline - now, timedelta(0)))
            if attempt.cancellation.request(f"the deadline is {remaining} away", now):
                log.info(
                    "job %s attempt %d: cancellation requested %s before its deadline",
                    job.job_id,
                    job.attempt,
                    remaining,
                )
        else:
            self._call(self.on_deadline, attempt)

    @staticmethod
    def _call(callback: Callable[[Attempt], None] | None, attempt: Attempt) -> None:
        if callback is None:
            return
        try:
            callback(attempt)
        except Exception:
            log.exception("watchdog action failed for %r", attempt)

    # -- the thread -------------------------------------------------------------------------
    def start(self) -> None:
        """Run :meth:`run_due` on a daemon thread whenever a step falls due."""
        if self._thread is not None:
            return
        self._stopping = False
        self._thread = NamedThread(target=self._loop, name="ratchet-watchdog")
        self._thread.start()

    def wake(self) -> None:
        """Check now (after a FakeClock jump, say)."""
        with self._cond:
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _loop(self) -> None:
        while True:
            try:
                self.run_due()
            except Exception:  # pragma: no cover - run_due guards its callbacks
                log.exception("watchdog round failed")
            with self._cond:
                if self._stopping:
                    return
                wait = self.max_wait
                due = self._next_due_locked()
                now = self.clock.now()
                if due is not None:
                    wait = min(wait, max(0.0, (due - now).total_seconds()))
                if wait > 0:
                    self._sleeping_until = now + timedelta(seconds=wait)
                    self._cond.wait(timeout=wait)
                    self._sleeping_until = _NEVER


#: How often a busy node reads its cancellation requests when a coordinator that reaches other
#: processes announces each one (:data:`~ratchet.ports.CANCEL_REQUESTS_TARGET`): only a hint
#: that was lost waits this long.
CANCEL_REQUEST_BACKSTOP = timedelta(seconds=15)


class CancellationRequestPoller:
    """Periodic task: take this node's ``cancel_job(id, interrupt=True)`` requests from the
    store and set the cancellation request of the matching running attempts."""

    name = "cancellation-requests"

    def __init__(self, interval: timedelta) -> None:
        self.interval = interval

    @classmethod
    def every(cls, interval: timedelta, *, announced: bool) -> CancellationRequestPoller:
        """The poller reading every ``interval``; ``announced``: the app's coordinator carries
        each new request to the nodes of other processes as a hint, so the store is read only
        every :data:`CANCEL_REQUEST_BACKSTOP` (or ``interval`` if longer)."""
        return cls(max(interval, CANCEL_REQUEST_BACKSTOP) if announced else interval)

    def run_once(self, worker: WorkerHost) -> None:
        worker.deliver_cancellation_requests()


def cancellation_store(store: object) -> CancellationStore | None:
    """The store's cancellation capability, if it has one."""
    capability = getattr(store, "capability", None)
    if capability is None:
        return None
    found = capability(CancellationStore)
    return found if isinstance(found, CancellationStore) else None
