"""``Ratchet``: the scheduler API (the composition root of an application)."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any

from ratchet.clock import SystemClock
from ratchet.config import RatchetConfig, WorkerConfig
from ratchet.domain.affinity import StrandedJob
from ratchet.domain.authorization import AuthorizationRequest, JobAction
from ratchet.domain.errors import (
    ClassPolicyViolation,
    ConfigurationError,
    DuplicateIdempotencyKeyError,
    InvalidJobOptions,
)
from ratchet.domain.lifecycle import JobPriority
from ratchet.domain.masking import MaskingPolicy
from ratchet.domain.model import AttemptRecord, FlowWrite, JobFilter, JobRecord, NewJob
from ratchet.domain.options import JobOptions, validate_option_text
from ratchet.domain.retry import RetryPolicy
from ratchet.domain.workflow import BatchContext, FlowResolver
from ratchet.engine.assembly import assemble_app
from ratchet.engine.batches import BatchBuilder, StreamingBatchBuilder
from ratchet.engine.builder import JobBuilder, JobHandle
from ratchet.engine.bulk import Call, CallJobs
from ratchet.engine.collector import paused_for
from ratchet.engine.jobs_api import Jobs
from ratchet.engine.limits_api import LimitsApi
from ratchet.engine.recurring import RecurringMixin
from ratchet.engine.retention import RetentionMixin
from ratchet.engine.security import Guard, Protection, as_principal, current_principal
from ratchet.engine.tracing import submission
from ratchet.engine.watchdog import cancellation_store
from ratchet.engine.worker import Worker
from ratchet.engine.workflows import apply_effects, batch_of, deliver_signal
from ratchet.events import EventKind, JobEvent
from ratchet.ids import uuid7
from ratchet.plugins import Plugins, make_plugin_manager
from ratchet.ports import (
    CANCEL_REQUESTS_TARGET,
    BeanResolver,
    ClassPolicy,
    Clock,
    ClusterCoordinator,
    JobAuthorizationPolicy,
    KeyProvider,
    ResilienceStrategy,
    SpanValue,
    Store,
    StreamingInsertStore,
    Tracer,
    TransactionalStore,
    WakeupHint,
)
from ratchet.serialization import EnumPolicy
from ratchet.targets import TargetRef, check_arguments, target_of

log = logging.getLogger("ratchet")

EventListener = Callable[[JobEvent], None]


class Ratchet(LimitsApi, RecurringMixin, RetentionMixin):
    """A scheduler bound to one database.

    :param url: SQLAlchemy URL of the store (``sqlite:///jobs.db``, ``postgresql+psycopg://...``).
    :param allowed_modules: module prefixes whose callables may run as jobs (the class policy);
        a single string is one prefix.
    :param allow_empty_class_policy: start without a policy (every job is then refused).
    :param auto_migrate: create/upgrade the schema on start (default: True for SQLite).
    :param coordinator: wakeup coordinator name or URL (default ``local``: this process only).
    :param clock: where time comes from (tests pass a FakeClock).
    :param plugins: a prepared :class:`~ratchet.plugins.Plugins` (default: built-ins + entry points).
    :param retry_policy: a :class:`~ratchet.domain.retry.RetryPolicy` consulted on every failure.
    :param authorization: a :class:`~ratchet.ports.JobAuthorizationPolicy` (default: the
        ``ratchet_authorization_policy`` hook's, else permit-all); see docs/security.md.
    :param key_provider: a :class:`~ratchet.ports.KeyProvider`: job arguments and results are
        then stored encrypted (default: the ``ratchet_key_provider`` hook's, else
        ``RATCHET_ENCRYPTION_KEYS``, else no encryption).
    :param masking: which fields read surfaces mask (default:
        :class:`~ratchet.domain.masking.MaskingPolicy` with its built-in words).
    """

    def __init__(
        self,
        url: str = "sqlite:///ratchet.db",
        *,
        allowed_modules: str | Sequence[str] = (),
        allow_empty_class_policy: bool = False,
        auto_migrate: bool | None = None,
        coordinator: str = "local",
        clock: Clock | None = None,
        plugins: Plugins | None = None,
        store_options: dict[str, Any] | None = None,
        retry_policy: RetryPolicy | None = None,
        authorization: JobAuthorizationPolicy | None = None,
        key_provider: KeyProvider | None = None,
        masking: MaskingPolicy | None = None,
        **config: Any,
    ) -> None:
        self.config = RatchetConfig(
            allowed_modules=(
                (allowed_modules,) if isinstance(allowed_modules, str) else tuple(allowed_modules)
            ),
            allow_empty_class_policy=allow_empty_class_policy,
            **config,
        )
        self.plugins = plugins or Plugins(make_plugin_manager())
        self.clock: Clock = clock or SystemClock()
        self.retry_policy = retry_policy
        """Consulted after ``@do_not_retry`` and before ``max_retries`` (None: always retry)."""
        self._listeners: list[EventListener] = []
        self._listeners_lock = threading.Lock()
        self.class_policy: ClassPolicy
        self.enums: EnumPolicy
        """The enum classes arguments, results and signals may hold (those the policy allows)."""
        self.beans: BeanResolver
        self.resilience: ResilienceStrategy
        self.store: Store
        self.node_name: str
        self.coordinator: ClusterCoordinator
        self.resolver: FlowResolver
        self.tracer: Tracer | None
        """Makes spans for submissions and attempts (None: tracing is off, the default)."""
        """Passed to every store call that can end jobs: the branch predicates and result enums
        it evaluates are resolved under this app's class policy."""
        self.guard: Guard
        """Asks the authorization policy (docs/security.md)."""
        self.protection: Protection
        """Seals and opens stored arguments and results; masks what readers see."""
        assemble_app(
            self,
            url,
            coordinator=coordinator,
            store_options=store_options,
            auto_migrate=auto_migrate,
            authorization=authorization,
            key_provider=key_provider,
            masking=masking,
        )
        self.jobs = Jobs(self)
        """The query API: keyset pages of jobs, a job's history, counts, queue health."""

    def enable_tracing(self, tracing: str | Tracer = "otel") -> None:
        """Trace this app's submissions and attempts from now on (``ratchet worker --otel``):
        with the tracer a plugin supplies for the name ``tracing``, or with ``tracing`` itself
        (an ``OpenTelemetryTracer`` on a tracer provider of your own, say).

        :raises ConfigurationError: no plugin supplies the tracer ``tracing`` names.
        """
        if not isinstance(tracing, str):
            self.tracer = tracing
            return
        self.config.tracing = tracing
        self.tracer = self.plugins.tracer(self.config)

    # -- ids, time, events -------------------------------------------------------------------
    def new_id(self) -> uuid.UUID:
        return uuid7()

    def now(self) -> datetime:
        return self.clock.now()

    def add_event_listener(self, listener: EventListener) -> None:
        """Call ``listener`` for every event of this app (after commit, on the writer's thread)."""
        with self._listeners_lock:
            self._listeners.append(listener)

    def remove_event_listener(self, listener: EventListener) -> None:
        with self._listeners_lock:
            self._listeners.remove(listener)

    def observed(self) -> bool:
        """Whether anybody would see an event now (a listener or an observer plugin): callers
        on hot paths build events only then."""
        return bool(self._listeners) or self.plugins.has_observers()

    def emit(self, event: JobEvent) -> None:
        """Deliver an event to listeners and observer hooks (sensitive ``data`` fields masked);
        their errors are only logged."""
        if event.data:
            event = self.protection.mask_event(event)
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(event)
            except Exception:
                log.exception("event listener failed on %s", event.kind)
        self.plugins.emit(event)

    def register_bean(self, instance: object) -> None:
        """Use ``instance`` for method jobs of its class."""
        register = getattr(self.beans, "register", None)
        if register is None:
            raise InvalidJobOptions("the installed bean resolver does not accept registrations")
        register(instance)

    # -- targets -------------------------------------------------------------------------------
    def check_target(self, fn: Callable[..., Any]) -> TargetRef:
        """The stored reference of ``fn``, after the class policy allowed it.

        :raises InvalidJobTarget: ``fn`` cannot be stored.
        :raises ClassPolicyViolation: the policy refuses its module.
        """
        ref = target_of(fn)
        self.enforce_policy(ref)
        return ref

    def enforce_policy(self, ref: TargetRef) -> None:
        if not self.class_policy.is_allowed(ref.module, ref.qualname):
            raise ClassPolicyViolation(
                f"the class policy does not allow {ref.module}:{ref.qualname}; add its module "
                f"prefix to allowed_modules (now {list(self.config.allowed_modules)})"
            )

    # -- principal and authorization (docs/security.md) ---------------------------------------
    @staticmethod
    def as_principal(principal: str | None) -> AbstractContextManager[str | None]:
        """``with app.as_principal("alice"):`` jobs submitted in the block store ``alice`` as
        their caller principal, and cancels, retries, signals and reads there are authorized
        for ``alice``. Follows ``contextvars`` (per thread and asyncio task).

        :raises InvalidPrincipal: the name cannot be stored.
        """
        return as_principal(principal)

    @staticmethod
    def current_principal() -> str | None:
        """The principal this context acts as (None: anonymous)."""
        return current_principal()

    def _authorize(self, action: JobAction, job_id: uuid.UUID) -> None:
        """:raises NotAuthorized: the current principal may not do ``action`` to the job."""
        if not self.guard.permits_all:
            self.guard.job_action(action, job_id, self.store.get_job(job_id))

    def _authorize_bulk(self, action: JobAction, **about: Any) -> None:
        """:raises NotAuthorized: the current principal may not do ``action`` in bulk."""
        if not self.guard.permits_all:
            self.guard.require(AuthorizationRequest(action, current_principal(), **about))

    # -- scheduling API ------------------------------------------------------------------------
    def enqueue(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> JobBuilder:
        """A builder for a job due now; call ``.submit()``.

        :raises InvalidJobArguments: ``fn`` cannot be called with these arguments.
        """
        ref = self.check_target(fn)
        check_arguments(fn, ref, args, kwargs)
        return JobBuilder(self, ref, args, kwargs)

    def enqueue_now(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> JobHandle:
        """Submit a job due now with an immediate wakeup."""
        return self.enqueue(fn, *args, **kwargs).immediate().submit()

    def schedule(
        self, delay: timedelta | datetime, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> JobBuilder:
        """A builder for a job due after ``delay`` (or at an aware ``datetime``)."""
        ref = self.check_target(fn)
        check_arguments(fn, ref, args, kwargs)
        if isinstance(delay, datetime):
            return JobBuilder(self, ref, args, kwargs, run_at=delay)
        if not isinstance(delay, timedelta):
            raise InvalidJobOptions(f"delay must be a timedelta or datetime, got {delay!r}")
        return JobBuilder(self, ref, args, kwargs, delay=delay)

    def submit_many(
        self, builders: Sequence[JobBuilder], connection: Any = None
    ) -> list[JobHandle]:
        """Submit several builders in one transaction (bulk insert). Many calls of one function
        with the same options are cheaper through :meth:`enqueue_many`."""
        return self._submit(builders, connection=connection)

    def enqueue_many(
        self,
        fn: Callable[..., Any],
        calls: Iterable[Call],
        options: JobOptions | None = None,
        *,
        delay: timedelta | None = None,
        connection: Any = None,
    ) -> list[JobHandle]:
        """Submit one job of ``fn`` for each of ``calls`` in one transaction, all with
        ``options`` (default: a builder's defaults), due ``delay`` from now (None: at once).

        Each call (``calls`` may be any iterable) is a tuple or list of positional arguments,
        or a dict of keyword ones. Each job gets its own id and its id as its idempotency key;
        the handles come back in the order of ``calls``. With ``connection`` the jobs commit
        or roll back with the caller's transaction. Nothing is stored when a call is refused.

        :raises InvalidJobArguments: a call does not fit ``fn``'s signature (its place named).
        :raises UnserializableArgument: an argument is not storable.
        :raises PayloadTooLargeError: a call's arguments are larger than the payload cap.
        :raises ClassPolicyViolation: the class policy refuses ``fn``.
        """
        if not isinstance(calls, Sequence):
            calls = list(calls)
        source = CallJobs(self, fn, calls, options or JobOptions(), delay)
        count = len(calls)
        if count == 0:
            return []

        def wants_wakeup(_: int) -> bool:
            return source.wants_wakeup

        with paused_for(count, self.config.pause_gc_in_bulk):
            caller = self._caller_transactions(connection)
            if self.tracer is None:
                return self._store_jobs(count, source.build, wants_wakeup, connection, caller, None)
            attributes: dict[str, SpanValue] = {
                "ratchet.job.count": count,
                "ratchet.job.target": source.target,
            }
            with submission(self.tracer, "submit_many", attributes) as span:
                trace = span.trace_context
                return self._store_jobs(
                    count, source.build, wants_wakeup, connection, caller, trace
                )

    def _submit(self, builders: Sequence[JobBuilder], connection: Any = None) -> list[JobHandle]:
        for b in builders:
            b._submitted = True
        with paused_for(len(builders), self.config.pause_gc_in_bulk):
            return self._submit_traced(builders, connection)

    def _submit_traced(self, builders: Sequence[JobBuilder], connection: Any) -> list[JobHandle]:
        caller = self._caller_transactions(connection)

        def build(start: int, stop: int, now: datetime, trace: str | None) -> list[NewJob]:
            return [b.build(now, trace) for b in builders[start:stop]]

        def wants_wakeup(place: int) -> bool:
            return builders[place].wants_wakeup

        count = len(builders)
        if self.tracer is None:
            return self._store_jobs(count, build, wants_wakeup, connection, caller, None)
        one = count == 1
        attributes: dict[str, SpanValue] = {"ratchet.job.count": count}
        if one:
            attributes["ratchet.job.target"] = str(builders[0]._ref)
        with submission(
            self.tracer, builders[0].operation if one else "submit_many", attributes
        ) as span:
            handles = self._store_jobs(
                count, build, wants_wakeup, connection, caller, span.trace_context
            )
            if one:
                span.note("ratchet.job.id", str(handles[0].id))
            return handles

    def _store_jobs(
        self,
        count: int,
        build: Callable[[int, int, datetime, str | None], list[NewJob]],
        wants_wakeup: Callable[[int], bool],
        connection: Any,
        caller: TransactionalStore | None,
        trace_context: str | None,
    ) -> list[JobHandle]:
        """Insert the ``count`` jobs that ``build(start, stop, now, trace_context)`` makes, in
        order (in the trace ``trace_context``); events and the wakeup (for the jobs whose place
        ``wants_wakeup``) after commit."""
        now = self.now()
        streaming = self._streaming_store() if connection is None else None
        if streaming is not None and count > streaming.insert_chunk_size:
            jobs: list[NewJob] = []
            size = streaming.insert_chunk_size

            def chunks() -> Iterator[list[NewJob]]:
                for start in range(0, count, size):
                    chunk = build(start, min(count, start + size), now, trace_context)
                    jobs.extend(chunk)
                    yield chunk

            try:
                results = streaming.insert_job_chunks(chunks(), now=now)
            except DuplicateIdempotencyKeyError:
                jobs.extend(build(len(jobs), count, now, trace_context))
                results = self.store.insert_jobs(jobs, now=now)
        else:
            jobs = build(0, count, now, trace_context)
            try:
                results = self.store.insert_jobs(jobs, now=now, connection=connection)
            except DuplicateIdempotencyKeyError:
                if connection is not None:
                    raise
                # A racing submitter won; a fresh transaction now sees its job and returns it.
                results = self.store.insert_jobs(jobs, now=now)
        handles = [JobHandle(r.job_id, self, r.inserted) for r in results]
        inserted = [
            (p, j) for p, (j, r) in enumerate(zip(jobs, results, strict=True)) if r.inserted
        ]

        def after_commit() -> None:
            self._after_submit(
                [j for _, j in inserted], [j for p, j in inserted if wants_wakeup(p)], now
            )

        if caller is None:
            after_commit()
        else:
            caller.after_commit(connection, after_commit)
        return handles

    def _caller_transactions(self, connection: Any) -> TransactionalStore | None:
        """The store's caller-transaction capability when a submission joins ``connection``
        (None when it does not).

        :raises InvalidJobOptions: ``connection`` given to a store that cannot join it.
        """
        if connection is None:
            return None
        found = self.store.capability(TransactionalStore)  # type: ignore[type-abstract]
        if found is None:
            raise InvalidJobOptions("this store cannot join a caller's transaction (connection=)")
        return found

    def _streaming_store(self) -> StreamingInsertStore | None:
        """The store's streaming insert if it has one (a large ``submit_many`` then builds a
        chunk while the database inserts the one before), looked up once."""
        try:
            return self._streaming
        except AttributeError:
            found = self.store.capability(StreamingInsertStore)  # type: ignore[type-abstract]
            self._streaming: StreamingInsertStore | None = found
            return found

    def _after_submit(
        self, inserted: Sequence[NewJob], woken: Sequence[NewJob], now: datetime
    ) -> None:
        """After the jobs ``inserted`` committed: one wakeup for those of them in ``woken``
        (at the highest priority among them), and a SUBMITTED event for each."""
        if woken:
            top = max(j.priority for j in woken)
            try:
                self.coordinator.notify_new_work(
                    WakeupHint(JobPriority(top), self.node_name, jobs=len(woken))
                )
            except Exception:
                log.warning(
                    "wakeup could not be sent; polling will still find the job", exc_info=True
                )
        if not inserted or not self.observed():
            return  # nobody would see the events: do not build one per job
        for job in inserted:
            self.emit(JobEvent(EventKind.SUBMITTED, job.job_id, now, data={"target": job.target}))

    def replace(
        self,
        job_id: uuid.UUID,
        delay: timedelta,
        fn: Callable[..., Any],
        *args: Any,
        options: JobOptions | None = None,
        **kwargs: Any,
    ) -> JobHandle:
        """Cancel a live job and submit ``fn(*args, **kwargs)`` due after ``delay`` in its place,
        atomically (the old job's ``superseded_by`` names the new one).

        :param options: the replacement's priority, retries, backoff, timeout, tags and params
            (fields not given take :class:`JobOptions` defaults). None: the old job's. Either
            way the replacement keeps the old job's business key, executor, resource and stall
            timeout. (``options`` is this method's keyword, never passed on to ``fn``.)
        :raises JobNotFound: the job does not exist or is already terminal.
        """
        from ratchet.domain.errors import JobNotFound

        if options is not None and not isinstance(options, JobOptions):
            raise InvalidJobOptions(f"options must be a JobOptions, got {options!r}")
        builder = self.schedule(delay, fn, *args, **kwargs)
        builder._submitted = True
        old = self.store.get_job(job_id)
        if not self.guard.permits_all:
            self.guard.job_action(JobAction.CANCEL, job_id, old)
        if old is None or old.status.is_terminal:
            raise JobNotFound(f"job {job_id} does not exist or is no longer live")
        builder.with_options(JobOptions.from_record(old) if options is None else options)
        builder.with_resource(old.resource_name)
        if old.executor is not None:
            builder.with_executor(old.executor)
        if old.stall_timeout is not None:
            builder.with_stall_timeout(old.stall_timeout)
        now = self.now()
        attributes: dict[str, SpanValue] = {"ratchet.job.replaced": str(job_id)}
        with submission(self.tracer, "replace", attributes) as span:
            new_job = builder.build(now, span.trace_context)
            span.note("ratchet.job.id", str(new_job.job_id))
            # A job's options never change once stored, so reading them first is safe; whether
            # it is still live is checked again in the replacing transaction.
            replaced = self.store.replace_job(job_id, new_job, now=now, resolve=self.resolver)
        if not replaced.value:
            raise JobNotFound(f"job {job_id} does not exist or is no longer live")
        self.emit(
            JobEvent(EventKind.REPLACED, job_id, now, data={"superseded_by": str(new_job.job_id)})
        )
        apply_effects(self, replaced.effects, None)
        self._after_submit([new_job], [new_job] if builder.wants_wakeup else [], now)
        return JobHandle(new_job.job_id, self)

    def _operator(self, kind: EventKind, ok: bool, job_id: uuid.UUID) -> bool:
        if ok:
            self.emit(JobEvent(kind, job_id, self.now()))
        return ok

    def cancel_job(self, job_id: uuid.UUID, *, interrupt: bool = False) -> bool:
        """Cancel a live job; a RUNNING one finishes but its result is discarded.

        :param interrupt: also set the running attempt's cancellation request (its node picks
            it up at once through a coordinator that reaches it, else within
            ``cancel_request_interval``), so a job that checks
            ``JobContext.is_cancellation_requested()`` stops at its next safe point.
        :returns: False if the job is missing or already terminal.
        :raises NotAuthorized: the current principal may not cancel it.
        """
        self._authorize(JobAction.CANCEL, job_id)
        canceled: FlowWrite[bool] | None = None
        if interrupt:
            store = cancellation_store(self.store)
            if store is not None:
                canceled = store.request_cancellation(job_id, now=self.now(), resolve=self.resolver)
            else:
                log.warning("this store cannot deliver cancellation requests; canceling without")
        if canceled is None:
            canceled = self.store.cancel_job(job_id, now=self.now(), resolve=self.resolver)
        elif canceled.value:
            # the request is stored: its node reads it now rather than at its next poll of them
            self.coordinator.notify_new_work(
                WakeupHint(JobPriority.NORMAL, self.node_name, target=CANCEL_REQUESTS_TARGET)
            )
        ok = self._operator(EventKind.CANCELLED, canceled.value, job_id)
        apply_effects(self, canceled.effects, None)  # what the cancellation ended in its flows
        return ok

    def pause_job(self, job_id: uuid.UUID) -> bool:
        """Pause a PENDING job (True if already paused)."""
        self._authorize(JobAction.PAUSE, job_id)
        return self._operator(
            EventKind.PAUSED, self.store.pause_job(job_id, now=self.now()), job_id
        )

    def resume_job(self, job_id: uuid.UUID) -> bool:
        """Resume a PAUSED job; False unless it was paused."""
        self._authorize(JobAction.RESUME, job_id)
        return self._operator(
            EventKind.RESUMED, self.store.resume_job(job_id, now=self.now()), job_id
        )

    def retry_job(self, job_id: uuid.UUID) -> bool:
        """Move a dead-lettered (FAILED) job back to PENDING with its attempts reset."""
        self._authorize(JobAction.RETRY, job_id)
        ok = self.store.retry_job(job_id, now=self.now())
        if ok:
            self.coordinator.notify_new_work(WakeupHint(JobPriority.NORMAL, self.node_name))
        return self._operator(EventKind.RETRIED_BY_OPERATOR, ok, job_id)

    def retry_jobs(self, job_filter: JobFilter | None = None, limit: int = 100) -> int:
        """Retry up to ``limit`` (1..1000) FAILED jobs matching the filter, all or nothing.

        Authorized once as a bulk retry; the filter is narrowed for the current principal.
        """
        self._authorize_bulk(JobAction.RETRY)
        job_filter = self.guard.narrow(job_filter or JobFilter())
        count = self.store.retry_jobs(job_filter, limit, now=self.now())
        if count:
            self.coordinator.notify_new_work(
                WakeupHint(JobPriority.NORMAL, self.node_name, jobs=count)
            )
            self.emit(JobEvent(EventKind.BULK_RETRIED, None, self.now(), data={"count": count}))
        return count

    def cancel_jobs_by_tag(self, tag: str) -> int:
        """Cancel every PENDING, PAUSED or WAITING job with ``tag`` (never RUNNING ones).

        Authorized once as a bulk cancel of the tag (no per-job check).
        """
        self._authorize_bulk(JobAction.CANCEL, tag=tag)
        canceled = self.store.cancel_jobs_by_tag(
            validate_option_text(tag, "tag"), now=self.now(), resolve=self.resolver
        )
        count = canceled.value
        if count:
            self.emit(
                JobEvent(
                    EventKind.BULK_CANCELLED, None, self.now(), data={"tag": tag, "count": count}
                )
            )
        apply_effects(self, canceled.effects, None)
        return count

    # -- batches and signals (docs/workflows.md) -------------------------------------------------
    def enqueue_batch(self, name: str) -> BatchBuilder:
        """A batch builder: ``.for_each(items, fn)``, options, branches, then ``.submit()``."""
        return BatchBuilder(self, name)

    def streaming_batch(self, name: str) -> StreamingBatchBuilder:
        """A streaming batch: ``.from_iterable(it).process(fn).with_chunk_size(n)...start()``."""
        return StreamingBatchBuilder(self, name)

    def get_batch(self, batch_id: uuid.UUID) -> BatchContext | None:
        """A batch's counters now (None if there is no such batch)."""
        return batch_of(self, batch_id)

    def deliver_signal(self, target: uuid.UUID | str, payload: Any = None) -> int:
        """Release the job ``target`` (a job id) or every job waiting on signal key ``target``
        with ``payload`` (JSON-storable, or a :class:`~ratchet.SignalDecision`).

        Atomic and idempotent (by key: one statement); returns how many jobs were released.

        :raises NotAuthorized: the current principal may not signal that job (by key: asked
            once, with the key).
        """
        if isinstance(target, uuid.UUID):
            self._authorize(JobAction.DELIVER_SIGNAL, target)
        elif isinstance(target, str):
            self._authorize_bulk(JobAction.DELIVER_SIGNAL, signal_key=target)
        return deliver_signal(self, target, payload)

    # -- reading ---------------------------------------------------------------------------------
    def get_job(self, job_id: uuid.UUID) -> JobRecord | None:
        """The job as readers see it: arguments and result decrypted where the keys are at
        hand, sensitive fields masked (docs/security.md).

        :raises NotAuthorized: the current principal may not read it.
        """
        record = self.store.get_job(job_id)
        if record is None:
            return None
        if not self.guard.permits_all:
            self.guard.job_action(JobAction.READ, job_id, record)
        return self.protection.reveal(record)

    def list_jobs(self, job_filter: JobFilter | None = None, limit: int = 100) -> list[JobRecord]:
        """Jobs matching the filter, newest first, as :meth:`get_job` shows them; the filter
        is narrowed for the current principal by the authorization policy."""
        records = self.store.list_jobs(self.guard.narrow(job_filter or JobFilter()), limit)
        return [self.protection.reveal(r) for r in records]

    def attempts(self, job_id: uuid.UUID) -> list[AttemptRecord]:
        return self.store.attempts(job_id)

    def stranded_jobs(self, limit: int = 100) -> list[StrandedJob]:
        """Live jobs waiting for a node whose affinity no ALIVE node's tags satisfy, oldest
        first (docs/affinity-and-limits.md).

        :raises ConfigurationError: the store cannot tell (no affinity capability).
        """
        from ratchet.ports import AffinityStore

        store = self.store.capability(AffinityStore)  # type: ignore[type-abstract]
        if store is None:
            raise ConfigurationError(
                f"the store at {self.store.location} has no node tag affinity capability"
            )
        return store.stranded_jobs(limit)

    # -- workers -----------------------------------------------------------------------------------
    def worker(self, config: WorkerConfig | None = None, **options: Any) -> Any:
        """A :class:`~ratchet.engine.worker.Worker` for this app (not started)."""

        return Worker(self, config or WorkerConfig(**options))

    def run_worker(self, config: WorkerConfig | None = None, **options: Any) -> None:
        """Run a worker in this thread until SIGTERM / SIGINT, then drain."""
        self.worker(config, **options).run()

    def close(self) -> None:
        """Release the store and the coordinator. Idempotent."""
        self.coordinator.close()
        self.beans.clear()
        self.store.close()

    def __enter__(self) -> Ratchet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
