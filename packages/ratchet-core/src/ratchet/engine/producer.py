"""The producer: polls for work, claims it into free slots and hands it to the executors.

One poller thread per worker. Each poll asks the node's liveness for up to ``min(free slots,
batch_size)`` jobs (takeovers first, then reserved jobs, then new claims), records them in the
slot table, and dispatches each to its executor provider. Between polls it sleeps as the
adaptive polling strategy says, unless woken: by a wakeup hint from the coordinator (another
process's at the moment the worker's :class:`~ratchet.engine.hint_response.HintResponder` picks,
and only if no other node reported those jobs claimed first), by a slot that freed while the last
poll found work, or by the due time of a job it retried.
"""

from __future__ import annotations

import functools
import heapq
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from ratchet.domain.batching import gather_window
from ratchet.domain.model import ClaimedJob
from ratchet.domain.polling import AdaptivePollingStrategy, PollingConfig
from ratchet.events import EventKind, JobEvent
from ratchet.named_thread import NamedThread
from ratchet.ports import Dispatcher, ExecutorProvider

if TYPE_CHECKING:
    from ratchet.engine.host import WorkerHost


#: How long a poll that finds fewer free slots than half a claim waits for runs in flight to
#: end first, at least: claiming one or two jobs at a time while a batch finishes costs a claim
#: statement per job or two, where a few milliseconds later one claim takes many. Jobs that run
#: long get a longer wait (:func:`~ratchet.domain.batching.gather_window`).
CLAIM_GATHER_SECONDS = 0.005


class Producer:
    """The poll loop of one worker."""

    def __init__(self, worker: WorkerHost) -> None:
        self.worker = worker
        config = worker.config
        self.strategy = AdaptivePollingStrategy(
            PollingConfig(
                burst_delay=config.burst_delay,
                min_delay=config.min_delay,
                max_delay=config.max_delay,
                deep_idle_delay=config.deep_idle_delay,
                deep_idle_threshold=config.deep_idle_after,
            )
        )
        self._wake = threading.Event()
        self._woken = False
        """A wake-up that should make the poller poll (not only look at its timers again)."""
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._due: list[datetime] = []
        self._thread: threading.Thread | None = None
        self.last_wanted = 0
        """How many jobs the last poll asked for (0: it claimed nothing, no slot was free)."""

    # ------------------------------------------------------------------ wakeups
    def wakeup(self) -> None:
        """Poll at once and enter burst mode."""
        self.strategy.on_wakeup(self.worker.app.now())
        self._woken = True
        self._wake.set()

    def wake(self) -> None:
        """Poll at once (a slot freed, or the state changed)."""
        self._woken = True
        self._wake.set()

    def replan(self) -> None:
        """Look at the timers again (a claim for another process's hint was planned)."""
        self._wake.set()

    def take_wake(self) -> bool:
        """Consume a pending wake-up (as the poller does when its wait returns); whether there
        was one."""
        pending = self._wake.is_set()
        self._wake.clear()
        self._woken = False
        return pending

    def wake_at(self, when: datetime) -> None:
        """Poll again no later than ``when`` (a job retried or rescheduled for then)."""
        with self._lock:
            heapq.heappush(self._due, when)
        self._woken = True
        self._wake.set()

    # ------------------------------------------------------------------ polling
    def poll_once(self) -> list[ClaimedJob]:
        """Claim as many due jobs as there are free slots (up to the batch size); with fewer
        free than half a claim while runs are in flight, wait for them up to
        the batching window first (:data:`CLAIM_GATHER_SECONDS` at least)."""
        worker = self.worker
        slots = worker.slots
        self.last_wanted = 0
        slots.pace(time.monotonic())
        free = slots.free()
        if free <= 0 or worker.draining:
            if free <= 0:
                worker.liveness.refill()  # keep the prefetch reservations topped up
            return []
        if free < slots.wake_at:
            free = slots.gather(gather_window(slots.run_times.mean, CLAIM_GATHER_SECONDS))
        started = time.perf_counter()
        self.last_wanted = min(free, worker.config.batch_size)
        claimed = worker.liveness.acquire(self.last_wanted)
        if worker.meter.enabled:
            worker.meter.polled(claimed, time.perf_counter() - started)
        worker.stats.polls += 1
        worker.stats.claimed += len(claimed)
        slots.claimed(claimed)
        if claimed and worker.app.observed():
            for job in claimed:
                worker.app.emit(
                    JobEvent(
                        EventKind.STARTED,
                        job.job_id,
                        job.claimed_at,
                        worker.node_id,
                        {"attempt": job.attempt},
                    )
                )
        return claimed

    def dispatch(self, jobs: Sequence[ClaimedJob]) -> None:
        """Hand each job to its executor: one hand-off per executor where the provider takes a
        batch (without a future), else one per job."""
        runner = self.worker.runner
        by_provider: dict[int, tuple[ExecutorProvider, list[Callable[[], Any]]]] = {}
        self.worker.start_check.expect(job.key for job in jobs)
        for job in jobs:
            provider = runner.executor_for(job)
            entry = by_provider.get(id(provider))
            if entry is None:
                entry = by_provider[id(provider)] = (provider, [])
            entry[1].append(functools.partial(runner.run, job))
        for provider, calls in by_provider.values():
            if runner.provides(provider, Dispatcher):
                cast(Dispatcher, provider).dispatch_many(calls)
            else:
                for call in calls:
                    provider.submit(call)

    # ------------------------------------------------------------------ the thread
    def start(self) -> None:
        self._thread = NamedThread(target=self._loop, name="ratchet-poller")
        self._thread.start()

    def stop(self, timeout: float) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def _loop(self) -> None:
        worker = self.worker
        config = worker.config
        backoff = 0.05
        while not self._stopping.is_set():
            try:
                claimed = self.poll_once()
                report = worker.hints.on_poll(len(claimed), self.last_wanted)
                if claimed:
                    self.dispatch(claimed)
                if report:
                    worker.report_claimed(report)
                decision = self.strategy.on_poll(
                    worker.app.now(), len(claimed), config.batch_size, worker.slots.utilisation()
                )
                delay = decision.delay.total_seconds()
                worker.outages.succeeded()
                backoff = 0.05
            except Exception as exc:
                worker.outages.failed(exc)
                delay = backoff
                backoff = min(backoff * 2, 5.0)
            self._wait(min(delay, self._seconds_until_due()))

    def _wait(self, delay: float) -> None:
        """Sleep up to ``delay`` seconds before the next poll, unless woken, or until a claim
        planned for another process's hint comes due; a planned claim that other nodes' reports
        made unnecessary is skipped. A planned claim is one poll, not the burst polling a
        wakeup starts: every later submission announces itself by a hint of its own."""
        hints = self.worker.hints
        deadline = time.monotonic() + delay
        while True:
            now = time.monotonic()
            planned = hints.respond_at
            until = deadline if planned is None else min(deadline, planned)
            if until > now and self._wake.wait(timeout=until - now):
                self._wake.clear()
                if self._woken or self._stopping.is_set():
                    self._woken = False
                    return
                continue  # only the plan changed
            now = time.monotonic()
            if hints.take_due(now):
                return
            if now >= deadline:
                self._wake.clear()
                self._woken = False
                return

    def _seconds_until_due(self) -> float:
        with self._lock:
            now = self.worker.app.now()
            while self._due and self._due[0] <= now:
                heapq.heappop(self._due)
                return 0.0
            if not self._due:
                return float("inf")
            return max(0.0, (self._due[0] - now).total_seconds())
