"""The worker: one per process, assembled from a producer, an attempt runner and a completer.

- The **producer** (:mod:`ratchet.engine.producer`, the poller thread) claims as many due jobs
  as there are free slots and dispatches each to its executor.
- The **attempt runner** (:mod:`ratchet.engine.attempts`, on the executors' threads) runs each
  attempt: ownership check, gates, policy check, the call, the retry decision.
- The **completer** (:mod:`ratchet.engine.completer`, the writer thread) records outcomes in
  batched, fenced transactions and reports what they did.
- They share one :class:`~ratchet.engine.slots.SlotTable`. The node's liveness
  (:mod:`ratchet.engine.liveness`: incarnation, heartbeats, the watcher, takeovers, drain), the
  watchdog (timeouts) and the periodic maintenance tasks complete the worker.

Every database error is survived: each loop logs once per outage and backs off.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ratchet.config import WorkerConfig
from ratchet.domain.errors import LifecycleHookError, StoreUnavailable
from ratchet.domain.lifecycle import JobPriority
from ratchet.domain.model import ClaimedJob, Outcome
from ratchet.domain.polling import AdaptivePollingStrategy
from ratchet.domain.text import describe_error
from ratchet.engine.assembly import assemble_worker
from ratchet.engine.attempts import AttemptRunner
from ratchet.engine.completer import Completer
from ratchet.engine.context import install_log_record_factory
from ratchet.engine.hint_response import HintResponder
from ratchet.engine.host import Gate, PeriodicTask
from ratchet.engine.liveness import Liveness, new_node_id
from ratchet.engine.maintenance import ClusterShare
from ratchet.engine.metrics import Meter, MetricsSampler
from ratchet.engine.outages import OutageLog
from ratchet.engine.producer import Producer
from ratchet.engine.slots import SlotTable
from ratchet.engine.start_check import StartCheck
from ratchet.engine.stats import WorkerStats
from ratchet.engine.watchdog import CancellationRequestPoller, Watchdog
from ratchet.named_thread import NamedThread
from ratchet.ports import (
    CANCEL_REQUESTS_TARGET,
    CLAIMED_TARGET,
    ExecutorProvider,
    WakeupHint,
)
from ratchet.targets import TargetRef

if TYPE_CHECKING:
    from ratchet.engine.host import AppHost

log = logging.getLogger("ratchet.worker")

#: How often the main thread of :meth:`Worker.run` wakes to let Python run signal handlers.
SIGNAL_CHECK_SECONDS = 0.2


def default_node_id(name: str | None = None) -> str:
    """``name-pid-random`` (name: the host by default): unique per worker process incarnation."""
    return new_node_id(name)


class Worker:
    """One worker per process. Use :meth:`run` (blocking, signal-aware) or start/stop."""

    def __init__(self, app: AppHost, config: WorkerConfig, *, node_id: str | None = None) -> None:
        self.app = app
        self.config = config
        self.store = app.store
        self.node_id = node_id or default_node_id(app.config.node_name)
        self.stats = WorkerStats()
        self.outages: OutageLog
        """Failing store calls that are retried, logged once per run of failures."""
        self.slots: SlotTable
        """Which jobs occupy this worker's slots; shared by the parts below."""
        self.start_check: StartCheck
        """Every attempt confirms the job is still this node's right before it starts."""
        self.gates: list[Gate]
        """Checked in order before every attempt."""
        self.meter: Meter
        """Measurements for the metrics hooks (nothing while no plugin implements them)."""
        self.sampler: MetricsSampler
        """Samples the gauges for the metrics hooks (one of the periodic tasks)."""
        self.runner: AttemptRunner
        self.completer: Completer
        self.producer: Producer
        self.watchdog: Watchdog
        """Times every attempt (soft warning, cancellation request, deadline)."""
        self.liveness: Liveness
        """Incarnation, heartbeats, watcher, takeovers, progress, drain."""
        self.periodic: list[PeriodicTask]
        """Maintenance tasks run on the maintenance thread."""
        self.cluster_share = ClusterShare(app.store)
        """Spreads the cluster-wide periodic tasks over the live nodes."""
        self.hints = HintResponder.spreading(config.hint_spread.total_seconds())
        """When this worker claims for the new-work hints it receives."""
        assemble_worker(self)
        self._stopping = threading.Event()
        self._maintenance_wake = threading.Event()
        """Set to make the maintenance thread look at its tasks now (a task made due, a stop)."""
        self._next_run: dict[str, float] = {}
        """When each periodic task runs next (monotonic seconds)."""
        self._signaled = False
        """SIGTERM / SIGINT arrived (set by the signal handler, read by :meth:`run`)."""
        self._draining = threading.Event()
        self._maintenance: threading.Thread | None = None
        self._started = False
        self._stop_notified = False

    @property
    def strategy(self) -> AdaptivePollingStrategy:
        """The producer's adaptive polling strategy."""
        return self.producer.strategy

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Register the node and start the poller, writer and maintenance threads.

        The ``ratchet_worker_starting`` hooks run first, ``ratchet_worker_started`` after.

        :raises LifecycleHookError: a starting hook raised; nothing was started or registered.
        """
        if self._started:
            return
        try:
            self.app.plugins.worker_starting(self)
        except Exception as exc:
            raise LifecycleHookError(
                f"worker {self.node_id} did not start: a ratchet_worker_starting hook raised "
                f"{describe_error(exc)}"
            ) from exc
        self._started = True
        install_log_record_factory()
        self.liveness.start()  # registers this incarnation, then heart-beats
        self.app.coordinator.add_listener(self._on_hint)
        self.watchdog.start()
        self.producer.start()
        self.completer.start()
        self._maintenance = NamedThread(target=self._maintenance_loop, name="ratchet-maintenance")
        self._maintenance.start()
        log.info(
            "worker %s started with %d slots on %s",
            self.node_id,
            self.config.concurrency,
            self.store.location,
        )
        self.app.plugins.notify_worker("ratchet_worker_started", self)

    def run(self, *, install_signal_handlers: bool = True) -> None:
        """Start, then block until SIGTERM / SIGINT (or :meth:`request_stop`), then drain."""
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)
        self.start()
        # A timed wait: a process-directed signal may land on another thread (Linux picks one
        # when the main thread cannot take it, e.g. right after SIGSTOP/SIGCONT), and Python runs
        # the handler only when the main thread next executes bytecode; an untimed wait would
        # then never return.
        while not self._signaled and not self._stopping.wait(timeout=SIGNAL_CHECK_SECONDS):
            pass
        self.stop()

    def _on_signal(self, *_: object) -> None:
        """SIGTERM / SIGINT. The handler runs on the main thread, possibly inside :meth:`run`'s
        wait on ``_stopping`` while that wait holds the event's lock, so it takes no lock at
        all: it sets a flag that :meth:`run` reads within ``SIGNAL_CHECK_SECONDS``."""
        self._signaled = True

    def request_stop(self) -> None:
        """Ask :meth:`run` to drain and return (from any thread but the one in :meth:`run`)."""
        self._draining.set()
        self._stopping.set()
        self._maintenance_wake.set()
        self.producer.wake()

    @property
    def draining(self) -> bool:
        """True once the worker stopped claiming (readiness probes report not ready)."""
        return self._draining.is_set()

    def stop(self, timeout: timedelta | None = None) -> None:
        """Drain: stop claiming, wait for running jobs (bounded), hand the rest back, deregister.

        A started worker calls ``ratchet_worker_stopping`` first and ``ratchet_worker_stopped``
        last (once each, however often it is stopped).
        """
        notify = self._started and not self._stop_notified
        self._stop_notified = True
        if notify:
            self.app.plugins.notify_worker("ratchet_worker_stopping", self)
        self._draining.set()
        self._stopping.set()
        self._maintenance_wake.set()
        self.liveness.begin_drain()  # DRAINING; running attempts are asked to stop
        limit = (timeout if timeout is not None else self.config.drain_timeout).total_seconds()
        deadline = time.monotonic() + limit
        self.producer.stop(timeout=max(1.0, limit))
        unfinished = set(self.slots.wait_for_runs(deadline))
        for attempt in self.slots.attempts():
            if attempt.job.job_id in unfinished:
                attempt.finish()  # its late result is discarded; the job is handed back
        # Jobs claimed ahead that still wait for a thread are handed back too: one that starts
        # after this reads the store and finds the job no longer this node's.
        self.start_check.forget_all()
        self.completer.stop(deadline)
        if self._maintenance is not None:
            self._maintenance.join(timeout=max(1.0, deadline - time.monotonic()))
        self.sampler.stop(self)
        try:
            self.liveness.hand_back()
        except StoreUnavailable:
            log.error("drain: database unavailable; the watcher will recover the jobs")
        self.liveness.stop()
        try:
            self.store.deregister_node(self.node_id)
        except StoreUnavailable:
            log.error("drain: could not deregister node %s", self.node_id)
        self.watchdog.stop()
        for executor in self.runner.executors():
            executor.shutdown(wait=False)
        self.app.beans.clear()
        self.runner.forget_targets()
        log.info("worker %s stopped", self.node_id)
        if notify:
            self.app.plugins.notify_worker("ratchet_worker_stopped", self)

    def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until ``predicate()`` holds (checked again whenever a run ends or an outcome
        batch is written) or ``timeout`` seconds pass; returns whether it held.

        The predicate runs on the calling thread without any of the worker's locks held, so it
        may call the worker (``free_slots()``) or read the database.
        """
        return self.slots.wait_until(predicate, timeout)

    # ------------------------------------------------------------------ the parts' public faces
    def _on_hint(self, hint: WakeupHint) -> None:
        if hint.target == CANCEL_REQUESTS_TARGET:
            self.run_task_soon(CancellationRequestPoller.name)
            return
        if hint.target == CLAIMED_TARGET:
            if hint.origin_node != self.node_id:
                self.hints.on_claimed_elsewhere(hint.jobs)
            return
        self.stats.wakeups_received += 1
        delay = self.hints.on_new_work(
            hint.jobs,
            time.monotonic(),
            self.cluster_share.known_live_nodes(),
            remote=hint.remote,
        )
        if delay == 0:
            self.wakeup()
        elif delay is not None:
            self.producer.replan()

    def report_claimed(self, jobs: int) -> None:
        """Tell the other nodes that this worker's claim took the ``jobs`` it could see, so
        that they skip the claims they planned for the same hints."""
        if self.cluster_share.known_live_nodes() <= 1:
            return
        try:
            self.app.coordinator.notify_new_work(
                WakeupHint(JobPriority.NORMAL, self.node_id, target=CLAIMED_TARGET, jobs=jobs)
            )
        except Exception:  # a coordinator never raises here; a hint is never needed anyway
            log.debug("could not report claimed jobs", exc_info=True)
        else:
            self.stats.claims_reported += 1

    def run_task_soon(self, name: str) -> None:
        """Run the periodic task ``name`` on the maintenance thread now rather than at its next
        turn (nothing happens if this worker has no such task)."""
        if name in self._next_run:
            self._next_run[name] = 0.0
            self._maintenance_wake.set()

    def wakeup(self) -> None:
        """Poll at once and enter burst mode."""
        self.producer.wakeup()

    def free_slots(self) -> int:
        """Slots neither running a job nor holding a finished run whose outcome waits to be
        written beyond the write-ahead allowance (``concurrency`` such runs; until its write
        lands a job is still RUNNING in the store: back-pressure). While the last poll found
        work and runs end fast, the slots ahead of the threads count too (``claim_ahead``), so
        this may exceed ``concurrency``; an idle worker has ``concurrency`` at most."""
        return self.slots.free()

    def poll_once(self) -> list[ClaimedJob]:
        """Claim as many due jobs as there are free slots (up to the batch size); the caller
        runs them (:meth:`execute`) or hands them to the executors (the poller does)."""
        return self.producer.poll_once()

    def execute(self, job: ClaimedJob) -> Outcome | None:
        """Run one attempt of ``job`` here and return its outcome (None: not ours any more)."""
        return self.runner.execute(job)

    def record(self, outcomes: list[Outcome]) -> list[uuid.UUID]:
        """Write outcomes now (one transaction) and emit their events; returns fenced ids."""
        return self.completer.record(outcomes)

    def run_claimed(self, jobs: list[ClaimedJob]) -> list[Outcome]:
        """Run claimed jobs one after another on this thread, record their outcomes in one
        write and free their slots; returns the outcomes written (tests and tools)."""
        outcomes = [o for o in (self.execute(job) for job in jobs) if o is not None]
        for job in jobs:
            self.slots.release(job)
        if outcomes:
            self.record(outcomes)
        return outcomes

    def run_due(self, *, limit: int | None = None) -> int:
        """Claim and run every due job on this thread until none is due (or ``limit`` jobs
        ran); returns how many ran. No threads are started: for tests and scripts."""
        ran = 0
        while limit is None or ran < limit:
            jobs = self.poll_once()
            if not jobs:
                break
            self.start_check.expect(job.key for job in jobs)  # just claimed
            self.run_claimed(jobs)
            ran += len(jobs)
        return ran

    def executor_for(self, job: ClaimedJob) -> ExecutorProvider:
        """The executor provider that runs ``job``."""
        return self.runner.executor_for(job)

    def executor(self, name: str) -> ExecutorProvider:
        """The executor provider registered as ``name`` (created on first use)."""
        return self.runner.executor(name)

    def target_ref(self, target: str) -> TargetRef:
        """The parsed form of a stored target (cached)."""
        return self.runner.target_ref(target)

    def failure_outcome(
        self, job: ClaimedJob, started: datetime, exc: BaseException, **kwargs: Any
    ) -> Outcome:
        """The retry decision for a failed attempt, as an outcome to record."""
        return self.runner.failure_outcome(job, started, exc, **kwargs)

    def request_cancellation(
        self, job_id: uuid.UUID, reason: str, epoch: int | None = None
    ) -> bool:
        """Set the cancellation request of this node's running attempt of ``job_id`` (of
        ``epoch`` when given); True if it was running here and not yet requested."""
        return self.runner.request_cancellation(job_id, reason, epoch)

    def deliver_cancellation_requests(self) -> int:
        """Deliver this node's ``cancel_job(id, interrupt=True)`` requests to their attempts."""
        return self.runner.deliver_cancellation_requests()

    # ------------------------------------------------------------------ maintenance
    def _maintenance_loop(self) -> None:
        next_run = self._next_run
        next_run.update((task.name, time.monotonic()) for task in self.periodic)
        while True:
            self._maintenance_wake.wait(
                timeout=max(
                    0.0, min(next_run.values(), default=time.monotonic() + 1) - time.monotonic()
                )
            )
            self._maintenance_wake.clear()
            if self._stopping.is_set():
                return
            now = time.monotonic()
            current = {task.name for task in self.periodic}
            for name in [n for n in next_run if n not in current]:
                del next_run[name]  # a task that removed itself must not keep the wait at zero
            for task in list(self.periodic):
                if now >= next_run.get(task.name, 0.0):
                    if getattr(task, "cluster_wide", False):
                        next_run[task.name] = now + self.cluster_share.wait(task.interval)
                    else:
                        next_run[task.name] = now + task.interval.total_seconds()
                    try:
                        task.run_once(self)
                    except Exception as exc:
                        log.warning("maintenance task %s failed: %s", task.name, exc)
