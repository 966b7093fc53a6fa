"""The worker: poller, job tasks on an executor, batched outcome writes, heartbeat, recovery.

Threads: the poller claims as many due jobs as there are free slots and hands each to the
executor; job threads run the attempt and put its :class:`~ratchet.domain.model.Outcome` on a
queue; the writer thread drains that queue and records outcomes in batches (one transaction per
batch, fenced by epoch); the heartbeat thread refreshes this node and returns jobs of dead nodes
to PENDING. Every database error is survived: the loop logs once per outage and backs off.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import inspect
import logging
import queue
import signal
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from ratchet.config import WorkerConfig
from ratchet.domain.breaker import CircuitOpenError
from ratchet.domain.errors import (
    FencedOut,
    JobTimeoutError,
    OutcomeNotStorable,
    StoreUnavailable,
)
from ratchet.domain.model import ClaimedJob, Outcome, OutcomeKind
from ratchet.domain.polling import AdaptivePollingStrategy, PollingConfig
from ratchet.domain.retry import decide_retry
from ratchet.domain.text import storable_text
from ratchet.engine.context import (
    JobContext,
    bound,
    install_log_record_factory,
    stopped_on_request,
)
from ratchet.engine.pipeline import (
    CircuitBreakerGate,
    Gate,
    OrphanRecovery,
    PeriodicTask,
    PermitGate,
    PermitJanitor,
    breaker_service,
    reschedule,
)
from ratchet.engine.start_check import StartCheck
from ratchet.engine.watchdog import (
    Attempt,
    CancellationRequestPoller,
    Watchdog,
    cancellation_store,
    seconds_text,
)
from ratchet.engine.watcher import attach_liveness, new_node_id
from ratchet.engine.workflows import after_flow_write, attach_flows
from ratchet.events import EventKind, JobEvent
from ratchet.ports import Dispatcher, ExecutorProvider, InterruptibleExecutor, JobCall, WakeupHint
from ratchet.serialization import decode_payload, encode_result
from ratchet.targets import TargetRef, owner_class, resolve_attribute

if TYPE_CHECKING:
    from ratchet.engine.app import Ratchet

log = logging.getLogger("ratchet.worker")

MAX_ERROR_CHARS = 4000
#: How often the main thread of :meth:`Worker.run` wakes to let Python run signal handlers.
SIGNAL_CHECK_SECONDS = 0.2


def default_node_id(name: str | None = None) -> str:
    """``name-pid-random`` (name: the host by default): unique per worker process incarnation."""
    return new_node_id(name)


def describe_error(exc: BaseException) -> str:
    """``module.Type: message``, storable on every database, at most ``MAX_ERROR_CHARS``."""
    remote = getattr(exc, "ratchet_description", None)  # an error reported by a child process
    if isinstance(remote, str):
        text = remote
    else:
        klass = type(exc)
        name = (
            klass.__qualname__
            if klass.__module__ == "builtins"
            else f"{klass.__module__}.{klass.__qualname__}"
        )
        try:
            message = str(exc)
        except Exception as unprintable:  # a job's exception type may break its own __str__
            message = f"<message unavailable: its __str__ raised {type(unprintable).__name__}>"
        text = f"{name}: {message}"
    text = storable_text(text)
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


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
    by_job: dict[uuid.UUID, str] = field(default_factory=lambda: RecentOutcomes(10_000))
    """How the most recent jobs ended here (the last 10,000; older ones are forgotten)."""


class RecentOutcomes(dict[uuid.UUID, str]):
    """A dict that keeps only its ``limit`` most recently added keys (bounded memory)."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def __setitem__(self, key: uuid.UUID, value: str) -> None:
        if key in self:
            del self[key]  # re-inserted: now the most recent
        elif len(self) >= self.limit:
            del self[next(iter(self))]
        super().__setitem__(key, value)


class Worker:
    """One worker per process. Use :meth:`run` (blocking, signal-aware) or start/stop."""

    def __init__(self, app: Ratchet, config: WorkerConfig, *, node_id: str | None = None) -> None:
        self.app = app
        self.config = config
        self.store = app.store
        self.node_id = node_id or default_node_id(app.config.node_name)
        self.stats = WorkerStats()
        self._executors: dict[str, ExecutorProvider] = {}
        self._interruptible_cache: dict[int, bool] = {}
        self.gates: list[Gate] = [CircuitBreakerGate(), PermitGate()]
        """Checked in order before every attempt; features append theirs."""
        self.periodic: list[PeriodicTask] = [
            OrphanRecovery(config.orphan_scan_interval),
            PermitJanitor(config.orphan_scan_interval),
        ]
        """Maintenance tasks run on the heartbeat thread; features append theirs."""
        self._attempts: dict[tuple[uuid.UUID, int], Attempt] = {}
        self._expired: dict[tuple[uuid.UUID, int], ClaimedJob] = {}
        self._timeouts: dict[tuple[uuid.UUID, int], dict[str, Any]] = {}
        self._async_targets: dict[str, bool] = {}
        self._executor_lock = threading.Lock()
        self.watchdog = Watchdog(
            app,
            config.timeout_settings(),
            on_deadline=self._on_deadline,
            on_zombie_check=self._on_zombie_check,
        )
        """Times every attempt (soft warning, cancellation request, deadline)."""
        if cancellation_store(self.store) is not None:
            self.periodic.append(CancellationRequestPoller(config.cancel_request_interval))
        attach_flows(self)  # signal-timeout scan; JobContext.signal() lookups
        self.liveness = attach_liveness(self)
        """Incarnation, heartbeats, watcher, takeovers, progress, drain (None: legacy store)."""
        self._inflight: dict[uuid.UUID, ClaimedJob] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._draining = threading.Event()
        self._outcomes: queue.Queue[Outcome | None] = queue.Queue()
        self._pending_writes = 0
        self._idle = threading.Condition(self._lock)
        self._due: list[datetime] = []
        self._found_work = False
        """The last poll claimed something: a slot that frees may find more waiting (the
        poller is woken then). After a poll that found nothing, only the poll delay, a wakeup
        hint or a due time wakes it."""
        self._threads: list[threading.Thread] = []
        self._targets: dict[str, Callable[..., Any]] = {}
        self._refs: dict[str, TargetRef] = {}
        self._services: dict[str, str] = {}
        """Circuit-breaker service per target (the breaker is configured on first use)."""
        self._started = False
        self._outage_logged = False
        self._progress = threading.Condition(threading.Lock())
        self._progress_count = 0
        """Bumped (and ``_progress`` notified) whenever a run ends or an outcome batch lands."""
        self.start_check = StartCheck(lambda jobs: self.store.owned_jobs(self.node_id, jobs))
        """Every attempt confirms the job is still this node's right before it starts."""
        self.strategy = AdaptivePollingStrategy(
            PollingConfig(
                burst_delay=config.burst_delay,
                min_delay=config.min_delay,
                max_delay=config.max_delay,
                deep_idle_delay=config.deep_idle_delay,
                deep_idle_threshold=config.deep_idle_after,
            )
        )

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Register the node and start the poller, writer and heartbeat threads."""
        if self._started:
            return
        self._started = True
        install_log_record_factory()
        if self.liveness is not None:
            self.liveness.start()  # registers this incarnation, then heart-beats
        else:
            self.store.register_node(self.node_id, now=self.app.now())
        self.app.coordinator.add_listener(self._on_hint)
        self.watchdog.start()
        for name, target in (
            ("poller", self._poll_loop),
            ("writer", self._write_loop),
            ("heartbeat", self._heartbeat_loop),
        ):
            thread = threading.Thread(target=target, name=f"ratchet-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("worker %s started with %d slots", self.node_id, self.config.concurrency)

    def run(self, *, install_signal_handlers: bool = True) -> None:
        """Start, then block until SIGTERM / SIGINT (or :meth:`request_stop`), then drain."""
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.request_stop())
        self.start()
        # A timed wait: a process-directed signal may land on another thread (Linux picks one
        # when the main thread cannot take it, e.g. right after SIGSTOP/SIGCONT), and Python runs
        # the handler only when the main thread next executes bytecode; an untimed wait would
        # then never return.
        while not self._stopping.wait(timeout=SIGNAL_CHECK_SECONDS):
            pass
        self.stop()

    def request_stop(self) -> None:
        """Ask :meth:`run` to drain and return (safe from a signal handler)."""
        self._draining.set()
        self._stopping.set()
        self._wake.set()

    @property
    def draining(self) -> bool:
        """True once the worker stopped claiming (readiness probes report not ready)."""
        return self._draining.is_set()

    def stop(self, timeout: timedelta | None = None) -> None:
        """Drain: stop claiming, wait for running jobs (bounded), hand the rest back, deregister."""
        self._draining.set()
        self._stopping.set()
        self._wake.set()
        if self.liveness is not None:
            self.liveness.begin_drain()  # DRAINING; running attempts are asked to stop
        limit = (timeout if timeout is not None else self.config.drain_timeout).total_seconds()
        deadline = time.monotonic() + limit
        with self._idle:
            while self._inflight and time.monotonic() < deadline:
                self._idle.wait(timeout=max(0.0, deadline - time.monotonic()))
            unfinished = list(self._inflight)
            handed_back = [a for a in self._attempts.values() if a.job.job_id in self._inflight]
        for attempt in handed_back:
            attempt.finish()  # their late results are discarded, the jobs go back to PENDING
        self._outcomes.put(None)
        for thread in self._threads:
            thread.join(timeout=max(1.0, deadline - time.monotonic()))
        self._flush_remaining()
        if self.liveness is not None:
            try:
                self.liveness.hand_back()
            except StoreUnavailable:
                log.error("drain: database unavailable; the watcher will recover the jobs")
            self.liveness.stop()
        elif unfinished:
            try:
                released = self.store.release_jobs(self.node_id, unfinished, now=self.app.now())
                log.warning("drain: handed %d unfinished job(s) back to PENDING", released)
            except StoreUnavailable:
                log.error("drain: database unavailable; orphan recovery will return the jobs")
        try:
            self.store.deregister_node(self.node_id)
        except StoreUnavailable:
            log.error("drain: could not deregister node %s", self.node_id)
        self.watchdog.stop()
        for executor in self._executors.values():
            executor.shutdown(wait=False)
        self.app.beans.clear()
        self._targets.clear()
        self._services.clear()
        log.info("worker %s stopped", self.node_id)

    def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until ``predicate()`` holds (checked again whenever a run ends or an outcome
        batch is written) or ``timeout`` seconds pass; returns whether it held.

        The predicate runs on the calling thread without any of the worker's locks held, so it
        may call the worker (``free_slots()``) or read the database.
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

    def _notify_progress(self) -> None:
        with self._progress:
            self._progress_count += 1
            self._progress.notify_all()

    # ------------------------------------------------------------------ wakeups
    def _on_hint(self, hint: WakeupHint) -> None:
        self.wakeup()

    def wakeup(self) -> None:
        """Poll at once and enter burst mode."""
        self.strategy.on_wakeup(self.app.now())
        self._wake.set()

    def _wake_at(self, when: datetime) -> None:
        with self._lock:
            heapq.heappush(self._due, when)
        self._wake.set()

    # ------------------------------------------------------------------ polling
    def free_slots(self) -> int:
        """Slots neither running a job nor waiting for a finished run's outcome to be written:
        until that write lands the job is still RUNNING here in the store (back-pressure)."""
        with self._lock:
            busy = len(self._inflight) + len(self._expired) + self._pending_writes
            return max(0, self.config.concurrency - busy)

    def poll_once(self) -> list[ClaimedJob]:
        """Claim as many due jobs as there are free slots (up to the batch size)."""
        free = self.free_slots()
        if free <= 0 or self._draining.is_set():
            if free <= 0 and self.liveness is not None:
                self.liveness.refill()  # keep the prefetch reservations topped up
            return []
        want = min(free, self.config.batch_size)
        if self.liveness is not None:  # takeovers first, then reserved jobs, then new claims
            claimed = self.liveness.acquire(want)
        else:
            claimed = self.store.claim(
                self.node_id,
                want,
                now=self.app.now(),
                boost_interval=self.app.config.boost_interval,
            )
        self.stats.polls += 1
        self.stats.claimed += len(claimed)
        with self._lock:
            for job in claimed:
                self._inflight[job.job_id] = job
            self._found_work = bool(claimed)
        if claimed and self.app.observed():
            for job in claimed:
                self.app.emit(
                    JobEvent(
                        EventKind.STARTED,
                        job.job_id,
                        job.claimed_at,
                        self.node_id,
                        {"attempt": job.attempt},
                    )
                )
        return claimed

    def _start_all(self, jobs: Sequence[ClaimedJob]) -> None:
        """Hand each job to its executor: one hand-off per executor where the provider takes a
        batch (without a future), else one per job."""
        by_provider: dict[int, tuple[ExecutorProvider, list[Callable[[], Any]]]] = {}
        run = self._run_and_queue
        self.start_check.expect((job.job_id, job.epoch) for job in jobs)
        for job in jobs:
            provider = self.executor_for(job)
            entry = by_provider.get(id(provider))
            if entry is None:
                entry = by_provider[id(provider)] = (provider, [])
            entry[1].append(functools.partial(run, job))
        for provider, calls in by_provider.values():
            if isinstance(provider, Dispatcher):
                provider.dispatch_many(calls)
            else:
                for call in calls:
                    provider.submit(call)

    def executor_for(self, job: ClaimedJob) -> ExecutorProvider:
        """The executor provider that runs ``job``: its ``executor`` option, else ``asyncio``
        for an ``async def`` target, else ``threads``."""
        return self.executor(job.executor or self._default_executor(job))

    def executor(self, name: str) -> ExecutorProvider:
        """The executor provider registered as ``name`` (created on first use)."""
        executor = self._executors.get(name)
        if executor is not None:
            return executor
        with self._executor_lock:
            executor = self._executors.get(name)
            if executor is None:
                executor = self.app.plugins.executor_factory(name)(self.config.concurrency)
                self._executors[name] = executor
            return executor

    def _default_executor(self, job: ClaimedJob) -> str:
        is_async = self._async_targets.get(job.target)
        if is_async is None:
            is_async = False
            try:
                ref = TargetRef.parse(job.target)
                if self.app.class_policy.is_allowed(ref.module, ref.qualname):  # import only then
                    is_async = inspect.iscoroutinefunction(resolve_attribute(ref))
            except Exception:
                pass  # the attempt itself reports an unusable target
            self._async_targets[job.target] = is_async
        if is_async and "asyncio" in self.app.plugins.executor_providers:
            return "asyncio"
        return "threads"

    def _poll_loop(self) -> None:
        backoff = 0.05
        while not self._stopping.is_set():
            try:
                claimed = self.poll_once()
                if claimed:
                    self._start_all(claimed)
                utilisation = 1 - self.free_slots() / self.config.concurrency
                decision = self.strategy.on_poll(
                    self.app.now(), len(claimed), self.config.batch_size, utilisation
                )
                delay = decision.delay.total_seconds()
                self._outage_over()
                backoff = 0.05
            except Exception as exc:
                self._outage(exc)
                delay = backoff
                backoff = min(backoff * 2, 5.0)
            delay = min(delay, self._seconds_until_due())
            if (delay > 0 and self._wake.wait(timeout=delay)) or delay <= 0:
                self._wake.clear()

    def _seconds_until_due(self) -> float:
        with self._lock:
            now = self.app.now()
            while self._due and self._due[0] <= now:
                heapq.heappop(self._due)
                return 0.0
            if not self._due:
                return float("inf")
            return max(0.0, (self._due[0] - now).total_seconds())

    def _outage(self, exc: Exception) -> None:
        """Count and log (once per run of failures) an error of a store call that is retried."""
        self.stats.store_errors += 1
        if not self._outage_logged:
            self._outage_logged = True
            if isinstance(exc, StoreUnavailable):
                log.error("%s; retrying with backoff", exc)
            else:
                log.error("store call failed (%s); retrying with backoff", describe_error(exc))
        else:
            log.debug("still failing: %s", exc)

    def _outage_over(self) -> None:
        if self._outage_logged:
            self._outage_logged = False
            log.warning("database reachable again")

    # ------------------------------------------------------------------ running a job
    def _run_and_queue(self, job: ClaimedJob) -> None:
        try:
            outcome = self.execute(job)
        except BaseException:  # pragma: no cover - execute() catches everything it can
            log.exception("job task crashed for %s", job.job_id)
            outcome = None
        with self._lock:
            if self._inflight.get(job.job_id) is job:
                del self._inflight[job.job_id]
            self._expired.pop((job.job_id, job.epoch), None)
            if outcome is not None:
                self._pending_writes += 1
            # With an outcome to write, the slot frees when the writer has written it (and the
            # writer wakes the poller then); without one it is free now.
            wake = self._found_work and outcome is None
        if outcome is not None:
            self._outcomes.put(outcome)
        if wake:
            self._wake.set()
        if outcome is None or self._draining.is_set():
            # stop() waits for the last running job; wait_until() hears from the writer.
            with self._idle:
                self._idle.notify_all()
        if outcome is None:
            self._notify_progress()

    def target_ref(self, target: str) -> TargetRef:
        """The parsed form of a stored target (cached)."""
        ref = self._refs.get(target)
        if ref is None:
            ref = TargetRef.parse(target)
            if len(self._refs) < 10_000:
                self._refs[target] = ref
        return ref

    def _resolve(self, ref: TargetRef) -> Callable[..., Any]:
        key = str(ref)
        fn = self._targets.get(key)
        if fn is None:
            if ref.bean:
                instance: Any = self.app.beans.resolve(owner_class(ref))
                fn = getattr(instance, ref.qualname.rsplit(".", 1)[1])
            else:
                fn = resolve_attribute(ref)
            self._targets[key] = fn
        return fn

    def execute(self, job: ClaimedJob) -> Outcome | None:
        """Run one attempt (seed 000 steps 1-10) and return its outcome (None: not ours any more).

        The watchdog times the attempt from its start. Whoever ends it first wins: this task with
        its outcome, or the watchdog with a timeout at the deadline (this task's late outcome is
        then discarded).
        """
        attempt = self.watchdog.begin(job, self.app.now())
        with self._lock:
            self._attempts[attempt.key] = attempt
        try:
            outcome = self._attempt(job, attempt)
        finally:
            self._end_attempt(attempt)
        if self.liveness is not None:  # fenced out, or handed back by the drain: not written
            outcome = self.liveness.finish(job, attempt, outcome)
        if not attempt.finish():
            if outcome is not None:
                self._discard_late(attempt, outcome)
            return None
        return outcome

    def _attempt(self, job: ClaimedJob, attempt: Attempt) -> Outcome | None:
        app = self.app
        started = attempt.plan.started
        ctx = JobContext(
            job_id=job.job_id,
            attempt=job.attempt,
            epoch=job.epoch,
            node_id=self.node_id,
            scheduled_time=job.scheduled_time,
            params=job.params,
            tags=job.tags,
            cancellation=attempt.cancellation,
            progress=self.liveness.channel(job) if self.liveness is not None else None,
        )
        with bound(ctx):
            passed: list[Gate] = []
            try:
                owned = self.start_check.confirm(job.job_id, job.epoch)
            except StoreUnavailable as exc:
                finished = app.now()
                return reschedule(
                    job, started, finished, finished, f"not started: {describe_error(exc)}"
                )
            if not owned:
                log.info("job %s was canceled or taken before it started; not run", job.job_id)
                return None
            try:
                for gate in self.gates:
                    stop = gate.enter(self, job, started)
                    if stop is not None:
                        return stop
                    passed.append(gate)
                ref = self.target_ref(job.target)
                app.enforce_policy(ref)
                fn = self._resolve(ref)
                args, kwargs = decode_payload(job.payload, app.enums)
                value = self.invoke(job, ref, fn, args, kwargs)
                result = encode_result(value, app.config.max_result_bytes)
                return Outcome(
                    job.job_id,
                    job.epoch,
                    job.attempt,
                    OutcomeKind.SUCCEEDED,
                    started,
                    app.now(),
                    result=result,
                    flow_effects=job.flow_effects,
                )
            except CircuitOpenError as exc:
                finished = app.now()
                return reschedule(job, started, finished, finished + exc.retry_delay, str(exc))
            except FencedOut:
                return None  # a progress write was refused: logged once, the run is over
            except (Exception, JobTimeoutError) as exc:
                return self.failure_outcome(job, started, exc)
            finally:
                for gate in reversed(passed):
                    try:
                        gate.leave(self, job)
                    except Exception:
                        log.exception("gate %s failed to release job %s", gate.name, job.job_id)

    def invoke(
        self,
        job: ClaimedJob,
        ref: TargetRef,
        fn: Callable[..., Any],
        args: list[Any],
        kwargs: dict[str, Any],
    ) -> Any:
        """Call the target under the resilience strategy (``async def`` targets run to completion).

        An :class:`~ratchet.ports.InterruptibleExecutor` provider runs the call itself, so the
        watchdog can stop it at the deadline; otherwise it runs here, unstoppable.
        """

        def direct() -> Any:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                return asyncio.run(_await(value))
            return value

        call = direct
        provider = self.executor_for(job)
        attempt = self._attempts.get((job.job_id, job.epoch))
        if attempt is not None and self._interruptible(provider):
            job_call = JobCall(
                job=job,
                target=job.target,
                payload=job.payload,
                fn=fn,
                args=args,
                kwargs=kwargs,
                context=JobContext.current_or_none(),
                invoke=direct,
                max_result_bytes=self.app.config.max_result_bytes,
            )
            watched = attempt

            interruptible = cast(InterruptibleExecutor, provider)

            def call() -> Any:
                return interruptible.run(job_call, watched)

        return self.app.resilience.execute(breaker_service(self, ref), call)

    def failure_outcome(
        self,
        job: ClaimedJob,
        started: datetime,
        exc: BaseException,
        *,
        timed_out: bool | None = None,
    ) -> Outcome:
        """The retry decision for a failed attempt, as an outcome to record.

        :param timed_out: whether the attempt counts as a timeout; None decides from ``exc``
            (a :class:`~ratchet.engine.context.CancellationRequestedException` created after
            this attempt's cancellation request, alone or in the cause / context chain).
        """
        finished = self.app.now()
        attempt = self._attempts.get((job.job_id, job.epoch))
        # Already ended by the watchdog (or a drain): this outcome will be discarded.
        late = timed_out is None and attempt is not None and attempt.finished
        if timed_out is None:
            timed_out = attempt is not None and stopped_on_request(exc, attempt.cancellation.token)
        if timed_out and not late:
            timeout = attempt.plan.timeout if attempt is not None else job.timeout
            self._timeouts[(job.job_id, job.epoch)] = {
                "executionTimeout": timeout,
                "elapsed": finished - started,
                "attempt": job.attempt,
            }
        decision = decide_retry(
            attempt=job.attempt,
            max_retries=job.max_retries,
            exc=exc,
            now=finished,
            backoff=job.backoff,
            backoff_base=job.backoff_delay,
            policy=self.app.retry_policy,
        )
        error = describe_error(exc)
        log.log(
            logging.DEBUG if late else logging.WARNING,
            "job %s attempt %d %s: %s (%s)",
            job.job_id,
            job.attempt,
            "timed out" if timed_out else "failed",
            error,
            decision.reason,
        )
        kind = OutcomeKind.RETRY if decision.retry else OutcomeKind.DEAD
        return Outcome(
            job.job_id,
            job.epoch,
            job.attempt,
            kind,
            started,
            finished,
            error=error,
            retry_at=decision.retry_at,
            flow_effects=job.flow_effects,
        )

    # ------------------------------------------------------------------ timeouts and cancellation
    def _end_attempt(self, attempt: Attempt) -> None:
        """The task running ``attempt`` returned: stop timing it, account for a zombie."""
        self.watchdog.forget(attempt)
        self.start_check.discard(attempt.key)
        with self._lock:
            self._attempts.pop(attempt.key, None)
            attempt.returned = True
            zombie = attempt.zombie
            if zombie:
                self.stats.zombies_active -= 1
        if zombie:
            log.warning(
                "job %s attempt %d: the zombie call returned %s after its deadline; its slot is "
                "free again",
                attempt.job.job_id,
                attempt.job.attempt,
                seconds_text(self.app.now() - attempt.deadline),
            )

    def _discard_late(self, attempt: Attempt, outcome: Outcome) -> None:
        with self._lock:
            self.stats.late_results_discarded += 1
        log.log(
            logging.WARNING if attempt.zombie or not attempt.timed_out else logging.INFO,
            "job %s attempt %d ended (%s: %s) after it was %s; that outcome was discarded",
            attempt.job.job_id,
            attempt.job.attempt,
            outcome.kind.value,
            outcome.error or "a result",
            "recorded as timed out" if attempt.timed_out else "handed back",
        )

    def _on_deadline(self, attempt: Attempt) -> None:
        """Watchdog: the attempt reached its deadline still running. Record the timeout now,
        then interrupt the call; its slot stays taken until the call returns."""
        job = attempt.job
        attempt.cancellation.request("the deadline passed", self.app.now())
        if not attempt.finish(timed_out=True):
            return
        outcome = self.failure_outcome(
            job,
            attempt.plan.started,
            JobTimeoutError(attempt.timeout_message()),
            timed_out=True,
        )
        with self._lock:
            if self._inflight.get(job.job_id) is job:
                del self._inflight[job.job_id]
                self._expired[attempt.key] = job
            self._pending_writes += 1
        self._outcomes.put(outcome)
        try:
            attempt.interrupt()
        except Exception:
            log.exception("could not interrupt job %s attempt %d", job.job_id, job.attempt)
        self.watchdog.check_zombie_at(self.app.now() + self.config.zombie_grace, attempt)

    def _on_zombie_check(self, attempt: Attempt) -> None:
        with self._lock:
            if attempt.returned or attempt.zombie:
                return
            attempt.zombie = True
            self.stats.zombies += 1
            self.stats.zombies_active += 1
        log.warning(
            "job %s attempt %d was recorded as timed out, but its call has not returned %s after "
            "the %s (blocked in C code?); it is a zombie holding a slot until it returns, and its "
            "result will be discarded",
            attempt.job.job_id,
            attempt.job.attempt,
            seconds_text(self.config.zombie_grace),
            "interrupt" if attempt.interrupted else "deadline (this executor cannot interrupt)",
        )

    def request_cancellation(
        self, job_id: uuid.UUID, reason: str, epoch: int | None = None
    ) -> bool:
        """Set the cancellation request of this node's running attempt of ``job_id`` (of
        ``epoch`` when given); True if it was running here and not yet requested."""
        with self._lock:
            attempts = [
                a
                for a in self._attempts.values()
                if a.job.job_id == job_id and (epoch is None or a.job.epoch == epoch)
            ]
        return any([a.cancellation.request(reason, self.app.now()) for a in attempts])

    def deliver_cancellation_requests(self) -> int:
        """Take this node's ``cancel_job(id, interrupt=True)`` requests from the store and set
        the matching attempts' cancellation requests; returns how many reached an attempt."""
        store = cancellation_store(self.store)
        with self._lock:
            busy = bool(self._attempts)
        if store is None or not busy:
            return 0
        delivered = 0
        for request in store.cancellation_requests(self.node_id, now=self.app.now()):
            if self.request_cancellation(request.job_id, "the job was canceled", request.epoch):
                delivered += 1
                log.info("job %s: cancellation request delivered to its attempt", request.job_id)
        with self._lock:
            self.stats.cancellations_delivered += delivered
        return delivered

    # ------------------------------------------------------------------ writing outcomes
    def _write_loop(self) -> None:
        while True:
            first = self._outcomes.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self.config.completion_batch:
                try:
                    item = self._outcomes.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._outcomes.put(None)
                    break
                batch.append(item)
            self._write(batch, retry_forever=True)

    def _flush_remaining(self) -> None:
        batch = []
        while True:
            try:
                item = self._outcomes.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                batch.append(item)
        if batch:
            self._write(batch, retry_forever=False)

    def record(self, outcomes: list[Outcome]) -> list[uuid.UUID]:
        """Write outcomes now (one transaction) and emit their events; returns fenced ids."""
        if len({o.job_id for o in outcomes}) < len(outcomes):
            # Two attempts of one job (a zombie's and the current one): fenced ids would be
            # ambiguous, so a job's second outcome goes in a separate write.
            first: dict[uuid.UUID, Outcome] = {}
            rest: list[Outcome] = []
            for o in outcomes:
                if o.job_id in first:
                    rest.append(o)
                else:
                    first[o.job_id] = o
            return self.record(list(first.values())) + self.record(rest)
        fenced = self.store.record_outcomes(self.node_id, outcomes, now=self.app.now())
        self._after_write(outcomes, set(fenced))
        return fenced

    def _write(self, batch: list[Outcome], *, retry_forever: bool) -> None:
        """Record ``batch``: through database outages with backoff (until stopping, unless
        ``retry_forever``); an outcome the store refuses for any other reason is isolated and
        its job failed with a storable error, so it never holds up the rest."""
        delay = 0.05
        pending = batch
        while pending:
            try:
                self.record(pending)
                self._outage_over()
                break
            except StoreUnavailable as exc:
                self._outage(exc)
            except Exception as exc:
                pending = self._write_one_by_one(pending, exc)
                if not pending:
                    break
            if not retry_forever and self._stopping.is_set():
                log.error(
                    "could not record %d outcome(s); the watcher will recover their jobs",
                    len(pending),
                )
                break
            time.sleep(delay)  # waiting out a database outage, not synchronising
            delay = min(delay * 2, 5.0)
        with self._idle:
            self._pending_writes -= len(batch)
            self._idle.notify_all()
            wake = self._found_work
        self._notify_progress()
        if wake:
            self._wake.set()  # the written runs' slots are free now

    def _write_one_by_one(self, batch: list[Outcome], error: Exception) -> list[Outcome]:
        """After a batch write failed with ``error`` (not an outage): write each outcome on its
        own; one the store refuses becomes a dead-lettering failure that names the refusal.
        Returns what is left to write once the database is reachable again."""
        log.error(
            "writing %d outcome(s) failed (%s); writing them one at a time to isolate the "
            "outcome the store refuses",
            len(batch),
            describe_error(error),
        )
        for index, outcome in enumerate(batch):
            try:
                self.record([outcome])
                continue
            except StoreUnavailable as exc:
                self._outage(exc)
                return batch[index:]
            except Exception as exc:
                refused = self._refused_outcome(outcome, exc)
            try:
                self.record([refused])
            except StoreUnavailable as exc:
                self._outage(exc)
                return [refused, *batch[index + 1 :]]
            except Exception as exc:
                self.stats.store_errors += 1
                log.error(
                    "job %s: the store refused even the failure that replaced its outcome (%s); "
                    "the job stays RUNNING here until the watcher recovers it",
                    outcome.job_id,
                    describe_error(exc),
                )
        return []

    def _refused_outcome(self, outcome: Outcome, exc: Exception) -> Outcome:
        """The dead-lettering failure that replaces an outcome the store refused."""
        self.stats.store_errors += 1
        error = OutcomeNotStorable(
            f"the {outcome.kind.value} outcome of attempt {outcome.attempt} could not be "
            f"stored ({describe_error(exc)}); the job was failed instead"
        )
        log.error("job %s: %s", outcome.job_id, error)
        return Outcome(
            outcome.job_id,
            outcome.epoch,
            outcome.attempt,
            OutcomeKind.DEAD,
            outcome.started_at,
            outcome.finished_at,
            error=describe_error(error),
            flow_effects=outcome.flow_effects,
        )

    def _after_write(self, outcomes: list[Outcome], fenced: set[uuid.UUID]) -> None:
        stats = self.stats
        stats.outcome_batches += 1
        observed = self.app.observed()  # build events only if somebody listens
        for o in outcomes:
            timeout = self._timeouts.pop((o.job_id, o.epoch), None)
            if o.job_id in fenced:
                stats.fenced_out += 1
                stats.by_job[o.job_id] = "FENCED_OUT"
                log.error(  # fatal for this run, logged once (its write is never retried)
                    "fatal: FencedOut: job %s epoch %d: this node no longer owns it (canceled, "
                    "recovered or taken over); its outcome %s was discarded",
                    o.job_id,
                    o.epoch,
                    o.kind.value,
                )
                if observed:
                    self.app.emit(
                        JobEvent(EventKind.FENCED_OUT, o.job_id, o.finished_at, self.node_id)
                    )
                continue
            stats.by_job[o.job_id] = o.kind.value
            if o.kind is OutcomeKind.SUCCEEDED:
                stats.succeeded += 1
            elif o.kind is OutcomeKind.RESCHEDULE:
                stats.rescheduled += 1
            else:
                if timeout is not None:
                    stats.timed_out += 1
                if o.kind is OutcomeKind.RETRY:
                    stats.retried += 1
                else:
                    stats.dead_lettered += 1
            if o.retry_at is not None and o.kind in (OutcomeKind.RETRY, OutcomeKind.RESCHEDULE):
                self._wake_at(o.retry_at)
            if observed:
                for event in self._outcome_events(o, timeout):
                    self.app.emit(event)
        after_flow_write(self, outcomes, fenced)  # callbacks, chain/batch events, wakeups

    def _outcome_events(self, o: Outcome, timeout: dict[str, Any] | None) -> list[JobEvent]:
        """The events of one written outcome, in the order listeners see them."""
        data: dict[str, Any] = {"attempt": o.attempt, "error": o.error}

        def event(kind: EventKind, payload: dict[str, Any]) -> JobEvent:
            return JobEvent(kind, o.job_id, o.finished_at, self.node_id, payload)

        if o.kind is OutcomeKind.SUCCEEDED:
            return [event(EventKind.COMPLETED, data)]
        if o.kind is OutcomeKind.RESCHEDULE:
            return [event(EventKind.RESCHEDULED, data)]
        events = [event(EventKind.TIMED_OUT, timeout)] if timeout is not None else []
        events.append(event(EventKind.FAILED, data))
        if o.kind is OutcomeKind.RETRY:
            events.append(event(EventKind.RETRYING, {**data, "retry_at": o.retry_at}))
        else:
            events.append(event(EventKind.DEAD_LETTERED, data))
        return events

    # ------------------------------------------------------------------ heartbeat and recovery
    def heartbeat_once(self) -> None:
        """Refresh this node's heartbeat (re-registering if its row vanished)."""
        if self.liveness is not None:
            return  # the liveness thread beats (and restarts a dead incarnation)
        now = self.app.now()
        if not self.store.heartbeat(self.node_id, now=now):
            log.warning(
                "node %s was not registered (declared dead?); registering again", self.node_id
            )
            self.store.register_node(self.node_id, now=now)

    def recover_once(self) -> int:
        """Return RUNNING jobs of silent nodes to PENDING; returns how many."""
        count = self.store.recover_orphans(now=self.app.now(), grace=self.config.orphan_grace)
        if count:
            self.stats.recovered += count
            log.warning("recovered %d job(s) from dead nodes", count)
            self.app.emit(
                JobEvent(EventKind.RECOVERED, None, self.app.now(), self.node_id, {"count": count})
            )
            self._wake.set()
        return count

    def _interruptible(self, provider: Any) -> bool:
        """Whether a provider supports deadlines (cached: a Protocol isinstance check is slow)."""
        key = id(provider)
        known = self._interruptible_cache.get(key)
        if known is None:
            known = self._interruptible_cache[key] = isinstance(provider, InterruptibleExecutor)
        return known

    def _heartbeat_loop(self) -> None:
        next_run = {task.name: time.monotonic() for task in self.periodic}
        next_beat = time.monotonic() + self.config.heartbeat_interval.total_seconds()
        while not self._stopping.wait(
            timeout=max(0.0, min([next_beat, *next_run.values()]) - time.monotonic())
        ):
            now = time.monotonic()
            current = {task.name for task in self.periodic}
            for name in [n for n in next_run if n not in current]:
                del next_run[name]  # a task that removed itself must not keep the wait at zero
            if now >= next_beat:
                next_beat = now + self.config.heartbeat_interval.total_seconds()
                try:
                    self.heartbeat_once()
                    self._outage_over()
                except Exception as exc:
                    self._outage(exc)
            for task in list(self.periodic):
                if now >= next_run.get(task.name, 0.0):
                    next_run[task.name] = now + task.interval.total_seconds()
                    try:
                        task.run_once(self)
                    except Exception as exc:
                        log.warning("maintenance task %s failed: %s", task.name, exc)


async def _await(value: Any) -> Any:
    return await value
