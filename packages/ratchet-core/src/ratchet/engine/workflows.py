"""Chains, workflow branches, callbacks and signals: building flows, and what follows a commit.

The store does everything that must happen exactly once inside the transaction that ends a job;
this module turns builders into flows, delivers signals, runs the signal-timeout scan, and after
each commit applies the store's effects: events, ``on_success`` / ``on_failure`` callbacks, batch
progress hooks and wakeups.
"""

from __future__ import annotations

import functools
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from ratchet.domain.errors import (
    DuplicateIdempotencyKeyError,
    InvalidJobOptions,
    InvalidJobTarget,
)
from ratchet.domain.flows import BranchSpec, FlowJob
from ratchet.domain.lifecycle import JobPriority, JobStatus
from ratchet.domain.model import NewJob
from ratchet.domain.options import validate_option_text
from ratchet.domain.workflow import (
    BatchContext,
    ConditionType,
    EffectKind,
    FlowEffect,
    FlowResolver,
    JobFailedError,
    JobType,
    SignalDecision,
    SignalOutcome,
    WorkflowCondition,
    validate_signal_key,
)
from ratchet.engine.tracing import submission
from ratchet.events import EventKind, JobEvent
from ratchet.ports import InsertResult, Store, WakeupHint, WorkflowStore
from ratchet.serialization import (
    EnumPolicy,
    EnumResolver,
    decode_result,
    encode_payload,
    encode_result,
)
from ratchet.targets import TargetRef, check_arguments, resolve_attribute, target_of

if TYPE_CHECKING:
    from ratchet.engine.host import AppHost, WorkerHost

log = logging.getLogger("ratchet.workflows")

#: The longest branch description (its column's size).
MAX_DESCRIPTION_LENGTH = 255

#: Signal-timeout scan: rows per pass, passes per round.
SIGNAL_SCAN_BATCH = 200
SIGNAL_SCAN_PASSES = 10


# ---------------------------------------------------------------------------------------------
# stored references (callbacks and predicates follow the rule of job targets)
# ---------------------------------------------------------------------------------------------
def stored_callable(app: AppHost, fn: Callable[..., Any], what: str, arity: int = 1) -> str:
    """``module:qualname`` of an importable function allowed by the class policy, which is
    called with ``arity`` positional arguments.

    :raises InvalidJobTarget: a lambda, closure, bean method or anything not importable.
    :raises InvalidJobArguments: it cannot take ``arity`` positional arguments.
    :raises ClassPolicyViolation: the policy refuses its module.
    """
    try:
        ref = target_of(fn)
    except InvalidJobTarget as exc:
        raise InvalidJobTarget(f"{what}: {exc}") from None
    if ref.bean:
        raise InvalidJobTarget(
            f"{what}: {ref} is a method that needs an instance; use a module-level function "
            "or a static method"
        )
    app.enforce_policy(ref)
    check_arguments(fn, ref, (None,) * arity, {}, what)
    return str(ref)


def resolve_stored(app: AppHost, text: str) -> Callable[..., Any]:
    """The callable behind a stored reference, after the class policy allowed it again."""
    ref = TargetRef.parse(text)
    app.enforce_policy(ref)
    fn = resolve_attribute(ref)
    if not callable(fn):
        raise InvalidJobTarget(f"{text} is not callable")
    return fn  # type: ignore[no-any-return]


def flow_resolver(app: AppHost) -> FlowResolver:
    """What the app passes to every store call that can end jobs: branch predicates and the
    enum classes of the results they read, both resolved under the app's class policy."""
    return FlowResolver(
        predicate=functools.partial(resolve_stored, app),
        enum=app.enums,
        reveal=app.protection.open_result,
    )


# ---------------------------------------------------------------------------------------------
# builder parts
# ---------------------------------------------------------------------------------------------
@dataclass
class Step:
    """A job to create later in the flow: target and encoded arguments."""

    ref: TargetRef
    payload: str


@dataclass
class Branch:
    step: Step
    condition: WorkflowCondition
    description: str | None = None

    def __post_init__(self) -> None:
        if self.description is not None:
            validate_option_text(self.description, "branch description")
            if len(self.description) > MAX_DESCRIPTION_LENGTH:
                raise InvalidJobOptions(
                    f"branch description is {len(self.description)} characters; at most "
                    f"{MAX_DESCRIPTION_LENGTH} allowed"
                )


@dataclass
class FlowParts:
    """What a :class:`~ratchet.engine.builder.JobBuilder` collects beyond a plain job."""

    on_success: str | None = None
    on_failure: str | None = None
    chain: list[Step] = field(default_factory=list)
    branches: list[Branch] = field(default_factory=list)
    first_match: bool = False
    signal_key: str | None = None
    signal_timeout: timedelta | None = None


def make_step(
    app: AppHost, fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Step:
    """Check and encode a later job now, so bad input fails at the call, not at submit."""
    ref = app.check_target(fn)
    check_arguments(fn, ref, args, kwargs)
    payload = encode_payload(
        list(args), dict(kwargs), app.config.max_payload_bytes, enums=app.enums
    )
    return Step(ref, app.protection.seal_payload(payload))


def predicate_condition(
    app: AppHost, type_: ConditionType, predicate: Callable[..., Any], priority: int = 0
) -> WorkflowCondition:
    """A CUSTOM / RESULT_VALUE / BATCH_CUSTOM condition on an importable predicate."""
    return WorkflowCondition(type_, stored_callable(app, predicate, "predicate"), priority)


def check_signal_wait(key: str, timeout: timedelta) -> tuple[str, timedelta]:
    """Validate ``with_await_signal`` arguments."""
    key = validate_signal_key(key)
    if not isinstance(timeout, timedelta) or timeout <= timedelta(0):
        raise InvalidJobOptions(f"signal timeout must be a positive timedelta, got {timeout!r}")
    return key, timeout


def later_job(template: NewJob, app: AppHost, step: Step, now: datetime) -> NewJob:
    """A WAITING job of a flow: the head's options (its caller principal too), its own
    target, arguments, id and key."""
    app.guard.create(str(step.ref), template.caller_principal)
    return dc_replace(
        template,
        job_id=app.new_id(),
        target=str(step.ref),
        payload=step.payload,
        scheduled_time=now,
        idempotency_key=str(uuid.uuid4()),
        business_key=None,
        status=JobStatus.WAITING,
    )


def build_flow(
    app: AppHost, head: NewJob, parts: FlowParts, now: datetime
) -> tuple[list[FlowJob], list[BranchSpec]]:
    """The rows of a job with chain steps, branches, callbacks or a signal wait."""
    chain_id = head.job_id if parts.chain else None
    if parts.signal_key is not None:
        head = dc_replace(head, status=JobStatus.WAITING)
    jobs: list[FlowJob] = [
        FlowJob(
            head,
            JobType.SINGLE,
            chain_id=chain_id,
            has_dependents=bool(parts.chain or parts.branches),
            on_success=parts.on_success,
            on_failure=parts.on_failure,
            signal_key=parts.signal_key,
            signal_wait=parts.signal_timeout,
        )
    ]
    previous = head.job_id
    for i, step in enumerate(parts.chain):
        job = later_job(head, app, step, now)
        jobs.append(
            FlowJob(
                job,
                JobType.CHAIN_STEP,
                chain_id=chain_id,
                depends_on=previous,
                waiting_for=previous,
                has_dependents=i < len(parts.chain) - 1,
            )
        )
        previous = job.job_id
    specs: list[BranchSpec] = []
    for order, branch in enumerate(parts.branches):
        job = later_job(head, app, branch.step, now)
        jobs.append(
            FlowJob(job, JobType.WORKFLOW_BRANCH, depends_on=head.job_id, waiting_for=head.job_id)
        )
        specs.append(
            BranchSpec(
                head.job_id,
                job.job_id,
                branch.condition,
                order,
                parts.first_match,
                branch.description,
            )
        )
    return jobs, specs


class FlowHead(Protocol):
    """The builder of a flow's first job (a :class:`~ratchet.engine.builder.JobBuilder`)."""

    @property
    def wants_wakeup(self) -> bool: ...

    def _new_job(self, now: datetime, trace_context: str | None = None) -> NewJob: ...


def submit_flow(app: AppHost, builder: FlowHead, parts: FlowParts, connection: Any) -> InsertResult:
    """Insert a flow in one transaction (the caller's, when given); events after commit.
    Returns the head job's id and whether it was inserted (False: an idempotent duplicate)."""
    store = _flow_store(app)
    caller = app._caller_transactions(connection)
    if any(b.condition.type.is_batch for b in parts.branches):
        raise InvalidJobOptions("batch conditions apply to batches (enqueue_batch) only")
    now = app.now()
    with submission(app.tracer, "workflow", {}) as span:
        # Every job of the flow (steps, branches) inherits the head's trace context.
        head = builder._new_job(now, span.trace_context)
        jobs, specs = build_flow(app, head, parts, now)
        span.note("ratchet.job.target", head.target)
        span.note("ratchet.job.id", str(head.job_id))
        span.note("ratchet.job.count", len(jobs))
        try:
            result = store.insert_flow(jobs, now=now, branches=specs, connection=connection)
        except DuplicateIdempotencyKeyError:
            if connection is not None:
                raise
            # As for a plain submit: a racing submitter won; a fresh transaction returns its job.
            result = store.insert_flow(jobs, now=now, branches=specs)
    if not result.inserted:
        return result

    def after_commit() -> None:
        app._after_submit([head], [head] if builder.wants_wakeup else [], now)
        if parts.chain:
            app.emit(
                JobEvent(
                    EventKind.CHAIN_STARTED, head.job_id, now, data={"steps": 1 + len(parts.chain)}
                )
            )
        if parts.signal_key is not None:
            app.emit(
                JobEvent(EventKind.SIGNAL_WAITING, head.job_id, now, data={"key": parts.signal_key})
            )

    if caller is None:
        after_commit()
    else:
        caller.after_commit(connection, after_commit)
    return result


def workflow_store(store: Store) -> WorkflowStore | None:
    """The store's workflow capability, or None."""
    return store.capability(WorkflowStore)  # type: ignore[type-abstract]


def _flow_store(app: AppHost) -> WorkflowStore:
    flows = workflow_store(app.store)
    if flows is None:
        raise InvalidJobOptions("this store does not support batches, chains, workflows or signals")
    return flows


# ---------------------------------------------------------------------------------------------
# signals
# ---------------------------------------------------------------------------------------------
def encode_signal(payload: Any, max_bytes: int, enums: EnumPolicy) -> str:
    """The stored form of a payload or :class:`SignalDecision` (JSON); enum members must be of
    classes ``enums`` allows, as in job arguments."""
    if isinstance(payload, SignalDecision):
        inner = encode_result(payload.payload, max_bytes, enums)
        doc: dict[str, Any] = {
            "decision": {
                "outcome": payload.outcome.value,
                "reason": payload.reason,
                "payload": None if inner is None else json.loads(inner),
            }
        }
    else:
        inner = encode_result(payload, max_bytes, enums)
        doc = {"payload": None if inner is None else json.loads(inner)}
    return json.dumps(doc, separators=(",", ":"))


def decode_signal(text: str | None, resolve_enum: EnumResolver) -> Any:
    """Inverse of :func:`encode_signal` (None: no signal)."""
    if text is None:
        return None
    doc = json.loads(text)
    if "decision" in doc:
        d = doc["decision"]
        value = (
            None if d["payload"] is None else decode_result(json.dumps(d["payload"]), resolve_enum)
        )
        return SignalDecision(SignalOutcome(d["outcome"]), d["reason"], value)
    if doc["payload"] is None:
        return None
    return decode_result(json.dumps(doc["payload"]), resolve_enum)


def deliver_signal(app: AppHost, target: uuid.UUID | str, payload: Any = None) -> int:
    """WAITING -> PENDING for the job ``target`` (a UUID) or every job waiting on key ``target``.

    Idempotent: a job that is no longer waiting is not counted. Returns how many were released.
    """
    store = _flow_store(app)
    text = encode_signal(payload, app.config.max_payload_bytes, app.enums)
    now = app.now()
    if isinstance(target, uuid.UUID):
        count = store.deliver_signal(target, text, now=now)
        if count:
            app.emit(JobEvent(EventKind.SIGNALED, target, now, data={"by": "id"}))
    elif isinstance(target, str):
        key = validate_signal_key(target)
        count = store.deliver_signal_by_key(key, text, now=now)
        if count:
            app.emit(
                JobEvent(EventKind.BULK_SIGNALED, None, now, data={"key": key, "count": count})
            )
    else:
        raise InvalidJobOptions(
            f"deliver_signal needs a job id (UUID) or a signal key, got {target!r}"
        )
    if count:
        _notify(app, JobPriority.NORMAL)
    return count


def signal_reader(worker: WorkerHost) -> Callable[[uuid.UUID], Any] | None:
    """What ``JobContext.signal()`` of ``worker``'s jobs calls: reads the payload or decision
    delivered to a job and decodes it under the app's class policy (None: the store has no
    signals)."""
    flows = workflow_store(worker.store)
    if flows is None:
        return None
    enums = worker.app.enums

    def read(job_id: uuid.UUID) -> Any:
        return decode_signal(flows.read_signal(job_id), enums)

    return read


class SignalTimeoutScanner:
    """Periodic task: fails (or re-arms, with retries left) signal waits whose timeout passed.

    Every node runs it; rows another node is scanning are skipped (``SKIP LOCKED``).
    """

    name = "signal-timeouts"
    cluster_wide = True
    """Work for the whole cluster: spread over the live nodes (``ClusterShare``)."""

    def __init__(self, interval: timedelta, batch_size: int = SIGNAL_SCAN_BATCH) -> None:
        self.interval = interval
        self.batch_size = batch_size

    def run_once(self, worker: WorkerHost) -> None:
        flows = workflow_store(worker.store)
        if flows is None:
            return
        app = worker.app
        for _ in range(SIGNAL_SCAN_PASSES):
            written = flows.expire_signal_waits(
                now=app.now(), limit=self.batch_size, resolve=app.resolver, policy=app.retry_policy
            )
            apply_effects(app, written.effects, worker.node_id, worker)
            if written.value < self.batch_size:
                break


# ---------------------------------------------------------------------------------------------
# after commit
# ---------------------------------------------------------------------------------------------
def after_flow_write(worker: WorkerHost, effects: Sequence[FlowEffect]) -> None:
    """Called by the worker after it recorded outcomes: apply the ``effects`` that write returned
    (only outcomes that applied produce any, fenced ones none)."""
    if effects:
        apply_effects(worker.app, effects, worker.node_id, worker)


def apply_effects(
    app: AppHost,
    effects: Iterable[FlowEffect],
    node_id: str | None,
    worker: WorkerHost | None = None,
) -> None:
    """Emit events, run callbacks and progress hooks, and wake workers for released jobs."""
    for effect in effects:
        now = app.now()
        kind = effect.kind
        try:
            if kind is EffectKind.ON_SUCCESS or kind is EffectKind.ON_FAILURE:
                _run_callback(app, effect, node_id)
            elif kind is EffectKind.BATCH_PROGRESS:
                _run_progress(app, effect, node_id)
            elif kind is EffectKind.BATCH_COMPLETED:
                ctx = effect.batch
                data = ctx.to_dict() if ctx is not None else {}
                app.emit(JobEvent(EventKind.BATCH_COMPLETED, effect.job_id, now, node_id, data))
            elif kind is EffectKind.CHAIN_COMPLETED:
                app.emit(JobEvent(EventKind.CHAIN_COMPLETED, effect.job_id, now, node_id))
            elif kind is EffectKind.CHAIN_FAILED:
                app.emit(JobEvent(EventKind.CHAIN_FAILED, effect.job_id, now, node_id, effect.data))
            elif kind is EffectKind.BRANCH_TRIGGERED:
                app.emit(
                    JobEvent(
                        EventKind.WORKFLOW_BRANCH_TRIGGERED,
                        effect.job_id,
                        now,
                        node_id,
                        effect.data,
                    )
                )
            elif kind is EffectKind.CONDITION_FAILED:
                app.emit(
                    JobEvent(
                        EventKind.WORKFLOW_CONDITION_FAILED,
                        effect.job_id,
                        now,
                        node_id,
                        effect.data,
                    )
                )
            elif kind is EffectKind.SIGNAL_TIMED_OUT:
                app.emit(
                    JobEvent(EventKind.SIGNAL_TIMED_OUT, effect.job_id, now, node_id, effect.data)
                )
            elif kind is EffectKind.RELEASED:
                if worker is not None:
                    worker.wakeup()
                _notify(app, JobPriority.NORMAL)
        except Exception:
            log.exception("could not apply %s for job %s", kind.value, effect.job_id)


def _notify(app: AppHost, priority: JobPriority) -> None:
    try:
        app.coordinator.notify_new_work(WakeupHint(priority, app.node_name))
    except Exception:
        log.warning("wakeup could not be sent; polling will still find the job", exc_info=True)


def _context(effect: FlowEffect, node_id: str | None, now: datetime) -> Any:
    """The callback's JobContext; ``now`` (the app's clock) stands in for a missing start."""
    from ratchet.engine.context import JobContext

    d = effect.data
    at = d.get("started_at") or d.get("finished_at") or now
    return JobContext(
        job_id=effect.job_id,  # type: ignore[arg-type]
        attempt=int(d.get("attempt") or 0),
        epoch=int(d.get("epoch") or 0),
        node_id=node_id or "",
        scheduled_time=at,
        params=d.get("params") or {},
        tags=tuple(d.get("tags") or ()),
    )


def _run_callback(app: AppHost, effect: FlowEffect, node_id: str | None) -> None:
    from ratchet.engine.context import bound

    ctx = _context(effect, node_id, app.now())
    try:
        fn = resolve_stored(app, str(effect.target))
        with bound(ctx):
            if effect.kind is EffectKind.ON_SUCCESS:
                fn(ctx)
            else:
                fn(ctx, JobFailedError(effect.job_id, effect.data.get("error")))
    except Exception as exc:
        _callback_failed(app, effect, node_id, exc)


def _run_progress(app: AppHost, effect: FlowEffect, node_id: str | None) -> None:
    try:
        resolve_stored(app, str(effect.target))(effect.batch)
    except Exception as exc:
        _callback_failed(app, effect, node_id, exc)


def _callback_failed(app: AppHost, effect: FlowEffect, node_id: str | None, exc: Exception) -> None:
    """A callback never changes the job's outcome: log it and emit ``JobCallbackFailed``."""
    log.error(
        "%s callback %s of job %s raised %s: %s (the job's outcome stands)",
        effect.kind.value,
        effect.target,
        effect.job_id,
        type(exc).__name__,
        exc,
        exc_info=exc,
    )
    app.emit(
        JobEvent(
            EventKind.CALLBACK_FAILED,
            effect.job_id,
            app.now(),
            node_id,
            {
                "callback": effect.kind.value,
                "target": effect.target,
                "error": f"{type(exc).__name__}: {exc}",
            },
        )
    )


def batch_of(app: AppHost, batch_id: uuid.UUID) -> BatchContext | None:
    """The counters of a batch now."""
    return _flow_store(app).get_batch(batch_id)
