"""The attempt runner: what a slot does with one claimed job.

For each job, on the slot's executor thread: confirm the job is still this node's, pass the
gates (circuit breaker, resource permit), check the class policy again, resolve the target,
decode the arguments, call it (under the resilience strategy, interruptibly where the executor
can), and turn what happened into an :class:`~ratchet.domain.model.Outcome` with the retry
decision. The watchdog times every attempt; at the deadline it records a timeout in the
attempt's place (:meth:`AttemptRunner.on_deadline`) and the late outcome is discarded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import logging
import threading
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from ratchet.domain.authorization import AuthorizationRequest, JobAction
from ratchet.domain.breaker import CircuitOpenError
from ratchet.domain.errors import FencedOut, JobTimeoutError, StoreUnavailable
from ratchet.domain.model import ClaimedJob, Outcome, OutcomeKind
from ratchet.domain.retry import decide_retry
from ratchet.engine.context import (
    JobContext,
    ProgressReporter,
    about_job,
    bind,
    log_about,
    stopped_on_request,
    unbind,
)
from ratchet.engine.gates import breaker_service, reschedule
from ratchet.engine.host import Gate
from ratchet.engine.joblogger import JobLogBuffer, JobLogger, store_job_log
from ratchet.engine.running import Attempt, seconds_text
from ratchet.engine.sanitizing import sanitized_error, sanitized_traceback
from ratchet.engine.tracing import NOT_RECORDED, end_span, record_failure, start_attempt_span
from ratchet.engine.watchdog import cancellation_store
from ratchet.engine.workflows import signal_reader
from ratchet.ports import ExecutorProvider, InterruptibleExecutor, JobCall
from ratchet.serialization import decode_payload, encode_result
from ratchet.targets import TargetRef, owner_class, resolve_attribute

if TYPE_CHECKING:
    from ratchet.engine.host import WorkerHost

log = logging.getLogger("ratchet.worker")


def execute_request(job: ClaimedJob) -> AuthorizationRequest:
    """The authorization request of running ``job``: on behalf of the principal that
    submitted it."""
    return AuthorizationRequest(
        JobAction.EXECUTE,
        job.caller_principal,
        job_id=job.job_id,
        target=job.target,
        owner=job.caller_principal,
    )


class AttemptRunner:
    """Runs attempts for one worker; holds its executors and resolved targets."""

    def __init__(self, worker: WorkerHost) -> None:
        self.worker = worker
        self._lock = threading.Lock()
        self._executors: dict[str, ExecutorProvider] = {}
        self._executor_lock = threading.Lock()
        self._provides_cache: dict[tuple[int, type], bool] = {}
        self._async_targets: dict[str, bool] = {}
        self._targets: dict[str, Callable[..., Any]] = {}
        self._refs: dict[str, TargetRef] = {}
        self.services: dict[str, str] = {}
        """Circuit-breaker service per target (the breaker is configured on first use)."""
        self._signals = signal_reader(worker)

    def is_resolved(self, ref: TargetRef) -> bool:
        """Whether ``ref``'s callable has been resolved (and cached) here."""
        return str(ref) in self._targets

    def executors(self) -> list[ExecutorProvider]:
        """The executor providers created so far."""
        return list(self._executors.values())

    def forget_targets(self) -> None:
        """Drop resolved targets and breaker services (the worker stopped)."""
        self._targets.clear()
        self.services.clear()

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
                executor = self.worker.app.plugins.executor_factory(name)(
                    self.worker.config.concurrency
                )
                self._executors[name] = executor
            return executor

    def _default_executor(self, job: ClaimedJob) -> str:
        is_async = self._async_targets.get(job.target)
        if is_async is None:
            is_async = False
            try:
                ref = TargetRef.parse(job.target)
                if self.worker.app.class_policy.is_allowed(
                    ref.module, ref.qualname
                ):  # import only then
                    is_async = inspect.iscoroutinefunction(resolve_attribute(ref))
            except Exception:
                pass  # the attempt itself reports an unusable target
            self._async_targets[job.target] = is_async
        if is_async and "asyncio" in self.worker.app.plugins.executor_providers:
            return "asyncio"
        return "threads"

    # ------------------------------------------------------------------ running a job
    def run(self, job: ClaimedJob) -> None:
        """The job task a slot runs: the attempt, then its outcome to the completer (or, with
        none to write, the slot freed at once)."""
        try:
            outcome = self.execute(job)
        except BaseException:  # pragma: no cover - execute() catches everything it can
            log.exception("job task crashed for %s", job.job_id)
            outcome = None
        worker = self.worker
        # Without an outcome to write the slot is free now; with one, now while the unwritten
        # outcomes fit the write-ahead allowance, else when the completer has written it.
        wake = worker.slots.run_ended(job, outcome=outcome is not None)
        if outcome is not None:
            worker.completer.put(outcome)
        if wake:
            worker.producer.wake()

    def target_ref(self, target: str) -> TargetRef:
        """The parsed form of a stored target (cached)."""
        ref = self._refs.get(target)
        if ref is None:
            ref = TargetRef.parse(target)
            if len(self._refs) < 10_000:
                self._refs[target] = ref
        return ref

    def resolve(self, ref: TargetRef) -> Callable[..., Any]:
        """The callable of ``ref`` (cached; a bean method is looked up on its bean)."""
        key = str(ref)
        fn = self._targets.get(key)
        if fn is None:
            if ref.bean:
                instance: Any = self.worker.app.beans.resolve(owner_class(ref))
                fn = getattr(instance, ref.qualname.rsplit(".", 1)[1])
            else:
                fn = resolve_attribute(ref)
            self._targets[key] = fn
        return fn

    def execute(self, job: ClaimedJob) -> Outcome | None:
        """Run one attempt (ownership, gates, policy, call, retry decision) and return its outcome (None: not ours any more).

        The watchdog times the attempt from its start. Whoever ends it first wins: this task with
        its outcome, or the watchdog with a timeout at the deadline (this task's late outcome is
        then discarded).
        """
        worker = self.worker
        attempt = worker.watchdog.begin(job, worker.app.now())
        attempt.node_id = worker.node_id
        tracer = worker.app.tracer
        span = attempt.span = (
            None if tracer is None else start_attempt_span(tracer, job, worker.node_id)
        )
        worker.slots.began(attempt)
        limits = worker.app.config.retention.job_logs
        lines = JobLogBuffer(job.job_id, job.epoch, job.attempt, limits)
        progress = worker.liveness.channel(job)
        try:
            if span is None:
                outcome = self._attempt(job, attempt, lines, progress)
            else:
                with span.activate():
                    outcome = self._attempt(job, attempt, lines, progress)
        finally:
            self._end_attempt(attempt)
            store_job_log(worker.store, lines, worker.app.now)
        # Fenced out, or handed back by the drain: not written.
        outcome = worker.liveness.finish(job, attempt, outcome, progress)
        if not attempt.finish():
            if outcome is not None:
                self._discard_late(attempt, outcome)
            if span is not None:
                end_span(span, "TIMED_OUT" if attempt.timed_out else NOT_RECORDED)
                if not attempt.timed_out:  # handed back; a timeout's span is the watchdog's
                    attempt.span = None
            return None
        if span is not None:
            # Ended spans are let go at once: the watchdog's heap keeps a finished attempt for
            # about a thousand more, and a span held that long would reach the oldest GC
            # generation (more and longer full collections).
            attempt.span = None
            end_span(span, NOT_RECORDED if outcome is None else outcome.kind.value)
        return outcome

    def _attempt(
        self, job: ClaimedJob, attempt: Attempt, lines: JobLogBuffer, progress: ProgressReporter
    ) -> Outcome | None:
        worker = self.worker
        app = worker.app
        started = attempt.plan.started
        ctx = JobContext(
            job_id=job.job_id,
            attempt=job.attempt,
            epoch=job.epoch,
            node_id=worker.node_id,
            scheduled_time=job.scheduled_time,
            params=job.params,
            tags=job.tags,
            cancellation=attempt.cancellation,
            progress=progress,
            signals=self._signals,
            caller_principal=job.caller_principal,
            job_log=JobLogger(lines, app.now),
        )
        token = bind(ctx)
        try:
            passed: list[Gate] = []
            try:
                owned = worker.start_check.confirm(job.key)
            except StoreUnavailable as exc:
                finished = app.now()
                return reschedule(
                    job, started, finished, finished, f"not started: {sanitized_error(app, exc)}"
                )
            if not owned:
                log.info("job %s was canceled or taken before it started; not run", job.job_id)
                return None
            try:
                for gate in worker.gates:
                    stop = gate.enter(worker, job, started)
                    if stop is not None:
                        return stop
                    passed.append(gate)
                ref = self.target_ref(job.target)
                app.enforce_policy(ref)
                if not app.guard.permits_all:
                    app.guard.require(execute_request(job))
                fn = self.resolve(ref)
                plain = app.protection.open(job.payload, "payload")
                if plain is not job.payload:  # sealed: executors get the plain arguments
                    job = dataclasses.replace(job, payload=plain)
                args, kwargs = decode_payload(plain, app.enums)
                value = self.invoke(job, fn, args, kwargs, attempt)
                result = app.protection.seal_result(
                    encode_result(value, app.config.max_result_bytes)
                )
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
                        gate.leave(worker, job)
                    except Exception:
                        log.exception("gate %s failed to release job %s", gate.name, job.job_id)
        finally:
            unbind(token)

    def invoke(
        self,
        job: ClaimedJob,
        fn: Callable[..., Any],
        args: list[Any],
        kwargs: dict[str, Any],
        attempt: Attempt,
    ) -> Any:
        """Call the target under the resilience strategy (``async def`` targets run to completion).

        An :class:`~ratchet.ports.InterruptibleExecutor` provider runs the call itself, so the
        watchdog can stop it at ``attempt``'s deadline; otherwise it runs here, unstoppable.
        """
        direct = functools.partial(call_target, fn, args, kwargs)
        call: Callable[[], Any] = direct
        provider = self.executor_for(job)
        if self.provides(provider, InterruptibleExecutor):
            job_call = JobCall(
                job=job,
                target=job.target,
                payload=job.payload,
                fn=fn,
                args=args,
                kwargs=kwargs,
                context=JobContext.current_or_none(),
                invoke=direct,
                max_result_bytes=self.worker.app.config.max_result_bytes,
            )
            call = functools.partial(cast(InterruptibleExecutor, provider).run, job_call, attempt)
        return self.worker.app.resilience.execute(breaker_service(self.worker, job.target), call)

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
        finished = self.worker.app.now()
        attempt = self.worker.slots.attempt(job.key)
        # Already ended by the watchdog (or a drain): this outcome will be discarded.
        late = timed_out is None and attempt is not None and attempt.finished
        if timed_out is None:
            timed_out = attempt is not None and stopped_on_request(exc, attempt.cancellation.token)
        if timed_out and not late:
            timeout = attempt.plan.timeout if attempt is not None else job.timeout
            self.worker.completer.timeouts[job.key] = {
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
            policy=self.worker.app.retry_policy,
        )
        app = self.worker.app
        error = sanitized_error(app, exc)
        traceback = None if late else sanitized_traceback(app, exc)
        if traceback is not None and attempt is not None and attempt.span is not None:
            record_failure(attempt.span, exc, error, traceback, timed_out)
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
            traceback=traceback,
        )

    # ------------------------------------------------------------------ timeouts and cancellation
    def _end_attempt(self, attempt: Attempt) -> None:
        """The task running ``attempt`` returned: stop timing it, account for a zombie."""
        worker = self.worker
        worker.watchdog.forget(attempt)
        worker.start_check.discard(attempt.key)
        zombie = worker.slots.returned(attempt)
        if zombie:
            with self._lock:
                worker.stats.zombies_active -= 1
        if zombie:
            log_about(
                log,
                logging.WARNING,
                (attempt.job.job_id, attempt.job.attempt, attempt.node_id),
                "job %s attempt %d: the zombie call returned %s after its deadline; its slot is "
                "free again",
                attempt.job.job_id,
                attempt.job.attempt,
                seconds_text(self.worker.app.now() - attempt.deadline),
            )

    def _discard_late(self, attempt: Attempt, outcome: Outcome) -> None:
        with self._lock:
            self.worker.stats.late_results_discarded += 1
        log_about(
            log,
            logging.WARNING if attempt.zombie or not attempt.timed_out else logging.INFO,
            (attempt.job.job_id, attempt.job.attempt, attempt.node_id),
            "job %s attempt %d ended (%s: %s) after it was %s; that outcome was discarded",
            attempt.job.job_id,
            attempt.job.attempt,
            outcome.kind.value,
            outcome.error or "a result",
            "recorded as timed out" if attempt.timed_out else "handed back",
        )

    def on_deadline(self, attempt: Attempt) -> None:
        """Watchdog: the attempt reached its deadline still running. Record the timeout now,
        then interrupt the call; its slot stays taken until the call returns."""
        job = attempt.job
        attempt.cancellation.request("the deadline passed", self.worker.app.now())
        if not attempt.finish(timed_out=True):
            return
        outcome = self.failure_outcome(
            job,
            attempt.plan.started,
            JobTimeoutError(attempt.timeout_message()),
            timed_out=True,
        )
        self.worker.slots.expire(job, attempt.key)
        self.worker.completer.put(outcome)
        if attempt.span is not None:
            end_span(attempt.span, "TIMED_OUT")
        try:
            attempt.interrupt()
        except Exception:
            log.exception("could not interrupt job %s attempt %d", job.job_id, job.attempt)
        worker = self.worker
        worker.watchdog.check_zombie_at(worker.app.now() + worker.config.zombie_grace, attempt)

    def on_zombie_check(self, attempt: Attempt) -> None:
        if not self.worker.slots.mark_zombie(attempt):
            return
        with self._lock:
            self.worker.stats.zombies += 1
            self.worker.stats.zombies_active += 1
        log.warning(
            "job %s attempt %d was recorded as timed out, but its call has not returned %s after "
            "the %s (blocked in C code?); it is a zombie holding a slot until it returns, and its "
            "result will be discarded",
            attempt.job.job_id,
            attempt.job.attempt,
            seconds_text(self.worker.config.zombie_grace),
            "interrupt" if attempt.interrupted else "deadline (this executor cannot interrupt)",
        )

    def request_cancellation(
        self, job_id: uuid.UUID, reason: str, epoch: int | None = None
    ) -> bool:
        """Set the cancellation request of this node's running attempt of ``job_id`` (of
        ``epoch`` when given); True if it was running here and not yet requested."""
        attempts = self.worker.slots.attempts(job_id, epoch)
        requested = False
        for a in attempts:
            with about_job(job_id, a.job.attempt, a.node_id):
                requested = a.cancellation.request(reason, self.worker.app.now()) or requested
        return requested

    def deliver_cancellation_requests(self) -> int:
        """Take this node's ``cancel_job(id, interrupt=True)`` requests from the store and set
        the matching attempts' cancellation requests; returns how many reached an attempt."""
        store = cancellation_store(self.worker.store)
        if store is None or not self.worker.slots.busy():
            return 0
        delivered = 0
        for request in store.cancellation_requests(self.worker.node_id, now=self.worker.app.now()):
            if self.request_cancellation(request.job_id, "the job was canceled", request.epoch):
                delivered += 1
                log_about(
                    log,
                    logging.INFO,
                    (request.job_id, None, self.worker.node_id),
                    "job %s: cancellation request delivered to its attempt",
                    request.job_id,
                )
        with self._lock:
            self.worker.stats.cancellations_delivered += delivered
        return delivered

    def provides(self, provider: Any, protocol: type) -> bool:
        """Whether the executor ``provider`` implements ``protocol`` (say, runs calls under a
        deadline, or takes batches); cached per provider, as a Protocol isinstance check walks
        the protocol's members on every call."""
        key = (id(provider), protocol)
        known = self._provides_cache.get(key)
        if known is None:
            known = self._provides_cache[key] = isinstance(provider, protocol)
        return known


def call_target(fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    """``fn(*args, **kwargs)``; an awaitable it returns is run to completion on a new loop."""
    value = fn(*args, **kwargs)
    if value is not None and inspect.isawaitable(value):
        return asyncio.run(_await(value))
    return value


async def _await(value: Any) -> Any:
    return await value
