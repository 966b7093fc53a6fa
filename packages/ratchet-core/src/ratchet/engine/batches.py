"""Batches and streaming batches: one parent that does no work, one child job per item.

``app.enqueue_batch(name).for_each(items, fn)...submit()`` inserts the parent, every child and
the batch branches in one transaction. ``app.streaming_batch(name).from_iterable(it)
.process(fn).with_chunk_size(500)...start()`` reads the items lazily and inserts each chunk in its
own transaction (children run while the stream is read); memory stays bounded by the chunk size.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ratchet.domain.errors import InvalidJobOptions, RatchetError
from ratchet.domain.flows import BatchSpec, BranchSpec, FlowJob
from ratchet.domain.lifecycle import JobPriority, JobStatus
from ratchet.domain.model import NewJob
from ratchet.domain.options import (
    BackoffPolicy,
    JobOptions,
    job_priority,
    normalize_tags,
    validate_option_text,
)
from ratchet.domain.resources import validate_resource_name
from ratchet.domain.workflow import (
    BatchContext,
    ConditionType,
    JobType,
    WorkflowCondition,
)
from ratchet.engine.collector import paused_for
from ratchet.engine.security import current_principal
from ratchet.engine.tracing import submission
from ratchet.engine.workflows import (
    Branch,
    Step,
    _flow_store,
    _notify,
    apply_effects,
    later_job,
    make_step,
    predicate_condition,
    stored_callable,
)
from ratchet.events import EventKind, JobEvent
from ratchet.ports import SpanValue
from ratchet.serialization import encode_payload
from ratchet.targets import check_arguments

if TYPE_CHECKING:
    from ratchet.engine.host import AppHost

#: What a batch parent's row names as its target; it never runs.
PARENT_TARGET = "ratchet.engine.batches:batch_parent"
DEFAULT_CHUNK_SIZE = 500
MAX_NAME_LENGTH = 255


def batch_parent(name: str) -> None:
    """The stored target of a batch parent. Parents do no work and are never claimed."""
    raise RuntimeError(f"batch parent {name!r} must not run")


class BatchChunkError(RatchetError):
    """A streaming batch chunk could not be read or inserted; the batch was canceled."""


@dataclass(frozen=True)
class StreamingBatchContext:
    """Progress of reading a streaming batch (the total is unknown until the stream ends)."""

    batch_id: uuid.UUID
    processed_items: int
    chunks_inserted: int


@dataclass(frozen=True)
class BatchHandle:
    """A submitted batch; its id is the parent job's id."""

    id: uuid.UUID
    app: AppHost
    inserted: bool = True

    def context(self) -> BatchContext:
        """The batch's counters now."""
        ctx = _flow_store(self.app).get_batch(self.id)
        if ctx is None:
            raise LookupError(f"batch {self.id} does not exist")
        return ctx

    def status(self) -> JobStatus:
        """The parent's status: WAITING until the batch completes, then SUCCEEDED (CANCELED if
        it was canceled)."""
        rec = self.app.get_job(self.id)
        if rec is None:
            raise LookupError(f"batch {self.id} does not exist")
        return rec.status

    def cancel(self) -> bool:
        """Cancel the batch: the parent, every live child and the branches."""
        return self.app.cancel_job(self.id)


def _validate_name(name: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise InvalidJobOptions("a batch needs a non-blank name")
    validate_option_text(name, "batch name")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidJobOptions(f"batch name is longer than {MAX_NAME_LENGTH} characters")
    return name.strip()


class _BatchOptions:
    """Options and branches shared by both batch builders."""

    def __init__(self, app: AppHost, name: str) -> None:
        self._app = app
        self._name = _validate_name(name)
        self._priority = JobPriority.NORMAL
        self._max_retries = 0
        self._backoff = BackoffPolicy.NONE
        self._backoff_delay = timedelta(0)
        self._timeout: timedelta | None = None
        self._tags: tuple[str, ...] = ()
        self._resource: str | None = None
        self._progress: str | None = None
        self._branches: list[Branch] = []
        self._first_match = False
        self._fn: Callable[..., Any] | None = None

    # -- child options --------------------------------------------------------------------
    def with_resource(self, name: str | None) -> Any:
        """Every child needs a permit of resource ``name`` (the parent and branches do not)."""
        self._resource = None if name is None else validate_resource_name(name)
        return self

    def with_priority(self, priority: JobPriority | int) -> Any:
        self._priority = job_priority(priority)
        return self

    def with_max_retries(self, max_retries: int) -> Any:
        """Retries of each child (each child retries on its own)."""
        self._max_retries = JobOptions(max_retries=max_retries).max_retries
        return self

    def with_backoff(self, policy: BackoffPolicy | str, delay: timedelta = timedelta(0)) -> Any:
        opts = JobOptions(backoff=policy, backoff_delay=delay)  # type: ignore[arg-type]
        self._backoff, self._backoff_delay = opts.backoff, opts.backoff_delay
        return self

    def with_timeout(self, timeout: timedelta) -> Any:
        """Timeout of each child attempt."""
        self._timeout = JobOptions(timeout=timeout).timeout
        return self

    def with_tags(self, *tags: str) -> Any:
        self._tags = normalize_tags((*self._tags, *tags))
        return self

    def with_first_match(self, enabled: bool = True) -> Any:
        """Fire only the first matching branch (priority, then definition order)."""
        self._first_match = enabled
        return self

    # -- progress and branches --------------------------------------------------------------
    def _set_progress(self, fn: Callable[..., Any]) -> None:
        self._progress = stored_callable(self._app, fn, "progress hook")

    def _branch(
        self,
        condition: WorkflowCondition,
        fn: Callable[..., Any],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        description: str | None = None,
    ) -> Any:
        self._branches.append(
            Branch(make_step(self._app, fn, args, kwargs), condition, description)
        )
        return self

    def then_on_batch_success(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` once every child succeeded."""
        return self._branch(WorkflowCondition.batch_success(), fn, args, kwargs)

    def then_on_batch_failure(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` once the batch completed with at least one failed (or canceled) child."""
        return self._branch(WorkflowCondition.batch_failure(), fn, args, kwargs)

    def then_when_success_rate(
        self, rate: float, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """Run ``fn`` if ``success_rate >= rate`` when the batch completed."""
        return self._branch(WorkflowCondition.success_rate(rate), fn, args, kwargs)

    def then_when_failure_count(
        self, n: int, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """Run ``fn`` if at least ``n`` children failed (``failed >= n``) when it completed."""
        return self._branch(WorkflowCondition.failure_count(n), fn, args, kwargs)

    def then_when_batch(
        self,
        predicate: Callable[[BatchContext], bool],
        fn: Callable[..., Any],
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn`` if ``predicate(BatchContext)`` holds when the batch completed."""
        condition = predicate_condition(self._app, ConditionType.BATCH_CUSTOM, predicate)
        return self._branch(condition, fn, args, kwargs)

    def then_branch(
        self,
        condition: WorkflowCondition,
        fn: Callable[..., Any],
        *args: Any,
        description: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn`` when ``condition`` holds (any condition type) once the batch completed."""
        if not isinstance(condition, WorkflowCondition):
            raise InvalidJobOptions("then_branch needs a WorkflowCondition")
        return self._branch(condition, fn, args, kwargs, description)

    # -- rows ----------------------------------------------------------------------------------
    def _template(self, now: datetime, trace_context: str | None) -> NewJob:
        app = self._app
        return NewJob(
            job_id=app.new_id(),
            target=PARENT_TARGET,
            payload=app.protection.seal_payload(
                encode_payload([self._name], {}, app.config.max_payload_bytes, enums=app.enums)
            ),
            priority=self._priority,
            max_retries=self._max_retries,
            backoff=self._backoff,
            backoff_delay=self._backoff_delay,
            timeout=self._timeout,
            scheduled_time=now,
            created_at=now,
            idempotency_key=str(uuid.uuid4()),
            tags=self._tags,
            status=JobStatus.WAITING,
            trace_context=trace_context,
            caller_principal=current_principal(),
        )

    def _parent_and_branches(
        self, parent: NewJob, now: datetime
    ) -> tuple[list[FlowJob], list[BranchSpec]]:

        jobs = [FlowJob(parent, JobType.BATCH_PARENT, has_dependents=bool(self._branches))]
        specs: list[BranchSpec] = []
        for order, branch in enumerate(self._branches):
            job = later_job(parent, self._app, branch.step, now)
            jobs.append(
                FlowJob(
                    job,
                    JobType.WORKFLOW_BRANCH,
                    depends_on=parent.job_id,
                    waiting_for=parent.job_id,
                )
            )
            specs.append(
                BranchSpec(
                    parent.job_id,
                    job.job_id,
                    branch.condition,
                    order,
                    self._first_match,
                    branch.description,
                )
            )
        return jobs, specs

    def _children(
        self, parent: NewJob, step_ref: str, items: Iterable[Any], now: datetime
    ) -> list[FlowJob]:
        app = self._app
        max_bytes, enums, seal = (
            app.config.max_payload_bytes,
            app.enums,
            app.protection.seal_payload,
        )
        app.guard.create(step_ref, parent.caller_principal)
        out = []
        for item in items:
            job = NewJob(
                job_id=app.new_id(),
                target=step_ref,
                payload=seal(encode_payload([item], {}, max_bytes, enums=enums)),
                priority=self._priority,
                max_retries=self._max_retries,
                backoff=self._backoff,
                backoff_delay=self._backoff_delay,
                timeout=self._timeout,
                scheduled_time=now,
                created_at=now,
                idempotency_key=str(uuid.uuid4()),
                tags=self._tags,
                resource_name=self._resource,
                trace_context=parent.trace_context,  # every child joins the batch's trace
                caller_principal=parent.caller_principal,
            )
            out.append(FlowJob(job, JobType.BATCH_CHILD, batch_id=parent.job_id))
        return out

    def _span_attributes(self, count: int) -> dict[str, SpanValue]:
        return {"ratchet.batch.name": self._name, "ratchet.job.count": count}

    def _emit_submitted(self, parent: NewJob, now: datetime, total: int | None) -> None:

        _notify(self._app, self._priority)
        self._app.emit(
            JobEvent(
                EventKind.SUBMITTED,
                parent.job_id,
                now,
                data={"target": PARENT_TARGET, "batch": self._name, "total": total},
            )
        )


class BatchBuilder(_BatchOptions):
    """``app.enqueue_batch(name)``: items known up front, all inserted in one transaction."""

    def __init__(self, app: AppHost, name: str) -> None:
        super().__init__(app, name)
        self._items: list[Any] | None = None
        self._step: Step | None = None

    def for_each(self, items: Iterable[Any], fn: Callable[..., Any]) -> BatchBuilder:
        """One child job ``fn(item)`` per item (items must be JSON-storable arguments).

        :raises InvalidJobOptions: no items.
        """
        listed = list(items)
        if not listed:
            raise InvalidJobOptions("a batch needs at least one item")
        self._step = _item_step(self._app, fn)
        self._items = listed
        return self

    def on_progress(self, fn: Callable[[BatchContext], Any]) -> BatchBuilder:
        """Call importable ``fn(BatchContext)`` after each child ends (on the worker that
        recorded it, after commit)."""
        self._set_progress(fn)
        return self

    def submit(self, connection: Any = None) -> BatchHandle:
        """Insert the parent, the children and the branches in one transaction."""
        if self._items is None or self._step is None:
            raise InvalidJobOptions("call for_each(items, fn) before submit()")
        store = _flow_store(self._app)
        caller = self._app._caller_transactions(connection)
        now = self._app.now()
        attributes = self._span_attributes(len(self._items))
        paused = paused_for(len(self._items), self._app.config.pause_gc_in_bulk)
        with paused, submission(self._app.tracer, "batch", attributes) as span:
            parent = self._template(now, span.trace_context)
            span.note("ratchet.batch.id", str(parent.job_id))
            jobs, specs = self._parent_and_branches(parent, now)
            jobs += self._children(parent, str(self._step.ref), self._items, now)
            spec = BatchSpec(parent.job_id, self._name, len(self._items), True, self._progress)
            result = store.insert_flow(
                jobs, now=now, branches=specs, batch=spec, connection=connection
            )
        total = len(self._items)

        def after_commit() -> None:
            self._emit_submitted(parent, now, total)

        if caller is None:
            after_commit()
        else:
            caller.after_commit(connection, after_commit)
        return BatchHandle(result.job_id, self._app, result.inserted)


class StreamingBatchBuilder(_BatchOptions):
    """``app.streaming_batch(name)``: items read lazily and inserted chunk by chunk."""

    def __init__(self, app: AppHost, name: str) -> None:
        super().__init__(app, name)
        self._source: Iterable[Any] | None = None
        self._step: Step | None = None
        self._chunk = DEFAULT_CHUNK_SIZE
        self._on_stream: Callable[[StreamingBatchContext], Any] | None = None

    def from_iterable(self, items: Iterable[Any]) -> StreamingBatchBuilder:
        """The items (any iterable, read once, lazily)."""
        self._source = items
        return self

    def process(self, fn: Callable[..., Any]) -> StreamingBatchBuilder:
        """One child job ``fn(item)`` per item."""
        self._step = _item_step(self._app, fn)
        return self

    def with_chunk_size(self, size: int) -> StreamingBatchBuilder:
        """Items per insert transaction (default 500).

        :raises InvalidJobOptions: ``size`` is not a positive int.
        """
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise InvalidJobOptions(f"chunk size must be a positive int, got {size!r}")
        self._chunk = size
        return self

    def on_progress(self, fn: Callable[[StreamingBatchContext], Any]) -> StreamingBatchBuilder:
        """Call ``fn(StreamingBatchContext)`` in the caller's thread after each chunk."""
        self._on_stream = fn
        return self

    def on_batch_progress(self, fn: Callable[[BatchContext], Any]) -> StreamingBatchBuilder:
        """Call importable ``fn(BatchContext)`` after each child ends (as ``on_progress`` of a
        plain batch)."""
        self._set_progress(fn)
        return self

    def start(self) -> BatchHandle:
        """Read and insert every chunk, then seal the batch; returns once the stream ended.

        A chunk that cannot be read or inserted rolls back (nothing of it is stored), emits
        ``batch_chunk_failed``, cancels the batch (the parent and children already inserted)
        and raises :class:`BatchChunkError`.

        :raises InvalidJobOptions: no items, or ``from_iterable``/``process`` missing.
        """
        if self._source is None or self._step is None:
            raise InvalidJobOptions("call from_iterable(items) and process(fn) before start()")
        store = _flow_store(self._app)
        app = self._app
        ref = str(self._step.ref)
        chunks = _chunks(iter(self._source), self._chunk)
        now = app.now()
        first = next(chunks, None)
        if not first:
            raise InvalidJobOptions("a batch needs at least one item")
        paused = paused_for(len(first), app.config.pause_gc_in_bulk)
        with paused, submission(app.tracer, "batch", self._span_attributes(len(first))) as span:
            parent = self._template(now, span.trace_context)
            span.note("ratchet.batch.id", str(parent.job_id))
            jobs, specs = self._parent_and_branches(parent, now)
            jobs += self._children(parent, ref, first, now)
            spec = BatchSpec(parent.job_id, self._name, len(first), False, self._progress)
            store.insert_flow(jobs, now=now, branches=specs, batch=spec)
        self._emit_submitted(parent, now, None)
        processed, inserted = len(first), 1
        self._stream_progress(parent.job_id, processed, inserted)
        index = 1
        try:
            for chunk in chunks:
                index += 1
                now = app.now()
                with paused_for(len(chunk), app.config.pause_gc_in_bulk):
                    store.add_batch_children(
                        parent.job_id, self._children(parent, ref, chunk, now), now=now
                    )
                processed += len(chunk)
                inserted += 1
                self._stream_progress(parent.job_id, processed, inserted)

                _notify(app, self._priority)
        except Exception as exc:
            app.emit(
                JobEvent(
                    EventKind.BATCH_CHUNK_FAILED,
                    parent.job_id,
                    app.now(),
                    data={"chunk": index, "processed": processed, "error": repr(exc)},
                )
            )
            app.cancel_job(parent.job_id)
            raise BatchChunkError(
                f"streaming batch {self._name!r}: chunk {index} failed after {processed} items "
                f"({type(exc).__name__}: {exc}); the batch was canceled"
            ) from exc
        sealed = store.seal_batch(parent.job_id, now=app.now(), resolve=app.resolver)

        apply_effects(app, sealed.effects, None)
        return BatchHandle(parent.job_id, app)

    def _stream_progress(self, batch_id: uuid.UUID, processed: int, chunks: int) -> None:
        if self._on_stream is not None:
            self._on_stream(StreamingBatchContext(batch_id, processed, chunks))


def _item_step(app: AppHost, fn: Callable[..., Any]) -> Step:
    """The step of a batch's children: ``fn`` must take one positional argument, the item."""
    ref = app.check_target(fn)
    check_arguments(fn, ref, (None,), {}, "batch item function")
    return Step(ref, "")


def _chunks(items: Iterator[Any], size: int) -> Iterator[list[Any]]:
    while True:
        chunk = list(itertools.islice(items, size))
        if not chunk:
            return
        yield chunk
