"""``JobBuilder``: options for one job, then ``submit()``."""

from __future__ import annotations

import math
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ratchet.domain.affinity import NO_AFFINITY, Affinity, node_tags
from ratchet.domain.authorization import check_principal
from ratchet.domain.errors import InvalidJobOptions
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
from ratchet.domain.takeover import TakeoverPolicy, schedule_to_start, takeover_policy
from ratchet.engine.security import current_principal
from ratchet.engine.workflows import (
    Branch,
    FlowParts,
    check_signal_wait,
    make_step,
    predicate_condition,
    stored_callable,
    submit_flow,
)
from ratchet.serialization import encode_payload

if TYPE_CHECKING:
    from ratchet.domain.model import JobRecord
    from ratchet.engine.host import AppHost
    from ratchet.targets import TargetRef

MAX_KEY_LENGTH = 255


class UnsubmittedJobWarning(RuntimeWarning):
    """A JobBuilder was dropped without ``submit()``: the job was never stored."""


def validate_business_key(key: str) -> str:
    """Trim and check a business key: 1..255 printable ASCII characters.

    :raises InvalidJobOptions: blank, too long, or non-printable / non-ASCII characters.
    """
    if not isinstance(key, str):
        raise InvalidJobOptions(f"business key must be a string, got {type(key).__name__}")
    trimmed = key.strip()
    if not trimmed:
        raise InvalidJobOptions("business key must not be blank")
    if len(trimmed) > MAX_KEY_LENGTH:
        raise InvalidJobOptions(
            f"business key is {len(trimmed)} characters; at most {MAX_KEY_LENGTH} allowed"
        )
    bad = next((c for c in trimmed if not " " <= c <= "~"), None)
    if bad is not None:
        raise InvalidJobOptions(
            f"business key contains {bad!r} (U+{ord(bad):04X}); only printable ASCII "
            "(U+0020..U+007E) is allowed"
        )
    return trimmed


def validate_idempotency_key(key: str) -> str:
    """Check an idempotency key: 1..64 printable ASCII characters."""
    if not isinstance(key, str) or not key.strip():
        raise InvalidJobOptions("idempotency key must be a non-blank string")
    key = key.strip()
    if len(key) > 64 or any(not " " <= c <= "~" for c in key):
        raise InvalidJobOptions("idempotency key must be at most 64 printable ASCII characters")
    return key


@dataclass(frozen=True, slots=True)
class JobHandle:
    """A submitted job. ``inserted`` is False when an idempotency key matched an earlier job."""

    id: uuid.UUID
    app: AppHost
    inserted: bool = True

    def record(self) -> JobRecord | None:
        """The job as stored now."""
        return self.app.get_job(self.id)

    def status(self) -> JobStatus:
        """The job's current status (the handle is the submitter's: no authorization asked)."""
        rec = self.app.store.get_job(self.id)
        if rec is None:
            raise LookupError(f"job {self.id} does not exist")
        return rec.status

    def wait(self, timeout: float) -> JobStatus:
        """Block until the job has ended (SUCCEEDED, FAILED or CANCELED); return that status.

        Submitting only stores the job: a worker (``ratchet worker MODULE:APP``) runs it. This
        reads the job every 10 ms at first, backing off to every 0.5 s.

        :param timeout: seconds to wait at most.
        :raises TimeoutError: the job has not ended within ``timeout`` (the message says where
            it is).
        :raises LookupError: the job does not exist.
        """
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not (0 <= timeout < math.inf)
        ):
            raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            status = self.status()
            if status.is_terminal:
                return status
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                hint = (
                    "; is a worker running? (`ratchet worker MODULE:APP`)"
                    if status in (JobStatus.PENDING, JobStatus.QUEUED)
                    else ""
                )
                raise TimeoutError(
                    f"job {self.id} is still {status.value} after {timeout:g} s{hint}"
                )
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.5)

    def result(self) -> Any:
        """The decoded JSON result of a SUCCEEDED job (None otherwise: use :meth:`wait` first
        to let a worker run it)."""
        from ratchet.serialization import decode_result

        rec = self.app.store.get_job(self.id)
        if rec is None:
            return None
        return decode_result(self.app.protection.open_result(rec.result), self.app.enums)


def check_delay(delay: object) -> None:
    """Refuse a submission's ``delay`` unless it is a ``timedelta`` of zero or more.

    :raises InvalidJobOptions: it is not.
    """
    if not isinstance(delay, timedelta) or delay < timedelta(0):
        raise InvalidJobOptions(f"delay must be a non-negative timedelta, got {delay!r}")


def wakes_workers(immediate: bool, priority: JobPriority, due_later: bool) -> bool:
    """Whether a stored job wakes the workers at once: asked to (``immediate``), CRITICAL, or
    due now (not ``due_later``); the others wait for the next poll."""
    return immediate or priority is JobPriority.CRITICAL or not due_later


#: Held while a builder gets its job's id (only at its first build).
_FIRST_BUILD = threading.Lock()


class JobBuilder:
    """Collects the options of one job; nothing is stored until :meth:`submit`."""

    # Slots: a submission of many jobs holds a builder per job, and fewer objects per builder
    # keep the garbage collector's passes over them short.
    __slots__ = (
        "__weakref__", "_affinity", "_app", "_args", "_backoff", "_backoff_delay", "_business_key", "_delay",
        "_executor", "_flow", "_idempotency_key", "_immediate", "_job_id", "_kwargs", "_max_retries",
        "_params", "_principal", "_principal_set", "_priority", "_ref", "_resource", "_run_at",
        "_schedule_to_start", "_stall_timeout", "_submitted", "_tags", "_takeover_policy",
        "_timeout",
    )  # fmt: skip

    def __init__(
        self,
        app: AppHost,
        ref: TargetRef,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        *,
        delay: timedelta | None = None,
        run_at: datetime | None = None,
    ) -> None:
        if delay is not None:
            check_delay(delay)
        if run_at is not None and run_at.tzinfo is None:
            raise InvalidJobOptions("run_at must be a timezone-aware datetime")
        self._app = app
        self._ref = ref
        self._args = tuple(args)
        self._kwargs = dict(kwargs)
        self._delay = delay
        self._run_at = run_at
        self._priority = JobPriority.NORMAL
        self._max_retries = 0
        self._backoff = BackoffPolicy.NONE
        self._backoff_delay = timedelta(0)
        self._timeout: timedelta | None = None
        self._tags: tuple[str, ...] = ()
        self._params: dict[str, str] = {}
        self._idempotency_key: str | None = None  # made on first use unless set
        self._job_id: uuid.UUID | None = None  # the id of every job built (made at the first)
        self._business_key: str | None = None
        self._immediate = False
        self._executor: str | None = None
        self._principal: str | None = None
        self._principal_set = False
        self._resource: str | None = None
        self._stall_timeout: timedelta | None = None
        self._affinity = NO_AFFINITY
        self._schedule_to_start: timedelta | None = None
        self._takeover_policy: TakeoverPolicy | None = None
        self._flow: FlowParts | None = None
        self._submitted = False

    # -- options ---------------------------------------------------------------------------
    def with_priority(self, priority: JobPriority | int) -> JobBuilder:
        """A :class:`JobPriority`, or its value 0..4."""
        self._priority = job_priority(priority)
        return self

    def with_max_retries(self, max_retries: int) -> JobBuilder:
        JobOptions(max_retries=max_retries)
        self._max_retries = max_retries
        return self

    def with_backoff(
        self, policy: BackoffPolicy | str, delay: timedelta = timedelta(0)
    ) -> JobBuilder:
        opts = JobOptions(backoff=policy, backoff_delay=delay)  # type: ignore[arg-type]
        self._backoff, self._backoff_delay = opts.backoff, opts.backoff_delay
        return self

    def with_timeout(self, timeout: timedelta) -> JobBuilder:
        JobOptions(timeout=timeout)
        self._timeout = timeout
        return self

    def with_stall_timeout(self, timeout: timedelta) -> JobBuilder:
        """No progress (checkpoint or touch) for ``timeout`` makes the RUNNING job TIMED_OUT,
        from its start on; its owner may revive it, else another node takes it over
        (docs/clustering.md). Without it only jobs that report progress are watched."""
        if not isinstance(timeout, timedelta) or timeout <= timedelta(0):
            raise InvalidJobOptions(f"stall timeout must be a positive timedelta, got {timeout!r}")
        self._stall_timeout = timeout
        return self

    def with_require_tags(self, *tags: str) -> JobBuilder:
        """Run only on a node that has every one of these node tags (``ratchet worker --tags``).

        :raises InvalidTag: a malformed tag.
        :raises ConflictingAffinity: a tag is also excluded.
        """
        a = self._affinity
        self._affinity = Affinity(a.require | node_tags(tags, "required tag"), a.exclude)
        return self

    def with_exclude_tags(self, *tags: str) -> JobBuilder:
        """Never run on a node that has any of these node tags.

        :raises InvalidTag: a malformed tag.
        :raises ConflictingAffinity: a tag is also required.
        """
        a = self._affinity
        self._affinity = Affinity(a.require, a.exclude | node_tags(tags, "excluded tag"))
        return self

    def with_schedule_to_start(self, deadline: timedelta) -> JobBuilder:
        """Fail the job (without running it) if it has not started ``deadline`` after it is due
        (the watcher's schedule-to-start rule; off by default).

        :raises InvalidJobOptions: not a positive timedelta of at most a year.
        """
        self._schedule_to_start = schedule_to_start(deadline)
        return self

    def with_takeover_policy(self, policy: TakeoverPolicy | str) -> JobBuilder:
        """What a takeover of a stalled attempt does: ``RESUME`` from the last checkpoint (the
        default), ``RESTART`` from scratch, or ``FAIL`` (docs/clustering.md).

        :raises InvalidJobOptions: an unknown policy.
        """
        self._takeover_policy = takeover_policy(policy)
        return self

    def with_tags(self, *tags: str) -> JobBuilder:
        self._tags = normalize_tags((*self._tags, *tags))
        return self

    def with_param(self, key: str, value: str) -> JobBuilder:
        JobOptions(params={key: value})
        self._params[key] = value
        return self

    def with_idempotency_key(self, key: str) -> JobBuilder:
        self._idempotency_key = validate_idempotency_key(key)
        return self

    def with_business_key(self, key: str) -> JobBuilder:
        self._business_key = validate_business_key(key)
        return self

    def with_resource(self, name: str | None) -> JobBuilder:
        """Execute only while holding a permit of resource ``name`` (None: no resource).

        See ``app.register_resource_limit``; a resource without a limit is unlimited.
        """
        self._resource = None if name is None else validate_resource_name(name)
        return self

    def with_executor(self, name: str) -> JobBuilder:
        if not name or not isinstance(name, str):
            raise InvalidJobOptions("executor name must be a non-empty string")
        self._executor = validate_option_text(name, "executor name")
        return self

    def with_options(self, options: JobOptions) -> JobBuilder:
        """Apply a whole :class:`JobOptions` value."""
        self._priority = options.priority
        self._max_retries = options.max_retries
        self._backoff, self._backoff_delay = options.backoff, options.backoff_delay
        self._timeout = options.timeout
        self._tags = normalize_tags((*self._tags, *options.tags))
        self._params.update(options.params)
        self._immediate = self._immediate or options.immediate
        return self

    def immediate(self) -> JobBuilder:
        """Send a cluster wakeup after commit so an idle worker polls at once."""
        self._immediate = True
        return self

    # -- callbacks, chains, workflows, signals (docs/workflows.md) -----------------------------
    def _parts(self) -> FlowParts:

        if self._flow is None:
            self._flow = FlowParts()
        return self._flow

    def on_success(self, fn: Callable[[Any], Any]) -> JobBuilder:
        """After the job succeeded (and that committed), call importable ``fn(ctx)``.

        A raising callback never changes the outcome: it is logged and emits
        ``job_callback_failed``.
        """

        self._parts().on_success = stored_callable(self._app, fn, "on_success callback")
        return self

    def on_failure(self, fn: Callable[[Any, BaseException], Any]) -> JobBuilder:
        """After the job failed for good (the DLQ, not each retry), call ``fn(ctx, error)``."""

        self._parts().on_failure = stored_callable(self._app, fn, "on_failure callback", 2)
        return self

    def then(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> JobBuilder:
        """Append a chain step: ``fn(*args, **kwargs)`` runs once the previous step succeeded.

        Stored at submit, invisible to the poller until then; a permanent failure or a
        cancellation cancels every later step.
        """

        self._parts().chain.append(make_step(self._app, fn, args, kwargs))
        return self

    def _add_branch(
        self,
        condition: Any,
        fn: Callable[..., Any],
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        description: str | None = None,
    ) -> JobBuilder:

        step = make_step(self._app, fn, args, kwargs)
        self._parts().branches.append(Branch(step, condition, description))
        return self

    def then_on_success(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> JobBuilder:
        """Branch: run ``fn`` if this job succeeds."""
        from ratchet.domain.workflow import WorkflowCondition

        return self._add_branch(WorkflowCondition.success(), fn, args, kwargs)

    def then_on_failure(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> JobBuilder:
        """Branch: run ``fn`` if this job fails for good."""
        from ratchet.domain.workflow import WorkflowCondition

        return self._add_branch(WorkflowCondition.failure(), fn, args, kwargs)

    def when(
        self,
        predicate: Callable[[Any], bool],
        fn: Callable[..., Any],
        *args: Any,
        priority: int = 0,
        **kwargs: Any,
    ) -> JobBuilder:
        """Branch: run ``fn`` if importable ``predicate(JobResult)`` is true when this job ends."""
        from ratchet.domain.workflow import ConditionType

        condition = predicate_condition(self._app, ConditionType.CUSTOM, predicate, priority)
        return self._add_branch(condition, fn, args, kwargs)

    def when_result(
        self, predicate: Callable[[Any], bool], fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> JobBuilder:
        """Branch: run ``fn`` if this job succeeds and ``predicate(return value)`` is true."""
        from ratchet.domain.workflow import ConditionType

        condition = predicate_condition(self._app, ConditionType.RESULT_VALUE, predicate)
        return self._add_branch(condition, fn, args, kwargs)

    def branch(
        self,
        condition: Any,
        fn: Callable[..., Any],
        *args: Any,
        description: str | None = None,
        **kwargs: Any,
    ) -> JobBuilder:
        """Branch: run ``fn`` when a :class:`~ratchet.WorkflowCondition` holds."""
        from ratchet.domain.workflow import WorkflowCondition

        if not isinstance(condition, WorkflowCondition):
            raise InvalidJobOptions("branch() needs a WorkflowCondition")
        return self._add_branch(condition, fn, args, kwargs, description)

    def with_first_match(self, enabled: bool = True) -> JobBuilder:
        """Fire only the first matching branch (default: every matching branch fires)."""
        self._parts().first_match = enabled
        return self

    def with_await_signal(self, key: str, timeout: timedelta) -> JobBuilder:
        """Create the job WAITING until ``app.deliver_signal(job_id or key, ...)`` (at most
        ``timeout``; then it fails with ``SignalTimeoutError`` through its retry policy)."""

        parts = self._parts()
        parts.signal_key, parts.signal_timeout = check_signal_wait(key, timeout)
        return self

    # -- submission ------------------------------------------------------------------------
    @property
    def idempotency_key(self) -> str:
        """The key given, else this builder's own: a random UUID if asked for before the first
        build, else the id of the job it builds (unique, free to make, and held by the job's
        own row)."""
        if self._idempotency_key is None:
            self._idempotency_key = str(uuid.uuid4())
        return self._idempotency_key

    @property
    def wants_wakeup(self) -> bool:
        """Whether this job wakes the workers at once when it is stored (:func:`wakes_workers`)."""
        due_later = self._run_at is not None or bool(self._delay)
        return wakes_workers(self._immediate, self._priority, due_later)

    def build(self, now: datetime, trace_context: str | None = None) -> Any:
        """The :class:`~ratchet.domain.model.NewJob` this builder describes, at ``now``, in
        the trace ``trace_context`` (see :mod:`ratchet.engine.tracing`)."""
        if self._flow is not None:
            raise InvalidJobOptions(
                "a job with callbacks, chain steps, branches or a signal wait is stored with its "
                "own submit(), not submit_many() or replace()"
            )
        return self._new_job(now, trace_context)

    @property
    def operation(self) -> str:
        """How the submission's span is named: ``schedule`` for a job due later, else ``enqueue``."""
        return "schedule" if self._run_at is not None or self._delay else "enqueue"

    def with_principal(self, principal: str | None) -> JobBuilder:
        """Store ``principal`` as the job's caller principal instead of the current one (set
        by ``app.as_principal``); it never changes afterwards.

        :raises InvalidPrincipal: the name cannot be stored.
        """
        self._principal = check_principal(principal)
        self._principal_set = True
        return self

    def _first_id(self) -> uuid.UUID:
        """Give this builder its job's id (and, unless one is set, the id as its key), once
        even when threads build it at the same time: two ids would make two jobs."""
        with _FIRST_BUILD:
            job_id = self._job_id
            if job_id is None:
                job_id = self._job_id = self._app.new_id()
                if self._idempotency_key is None:
                    self._idempotency_key = str(job_id)
            return job_id

    def _new_job(self, now: datetime, trace_context: str | None = None) -> Any:
        app = self._app
        principal = self._principal if self._principal_set else current_principal()
        target = str(self._ref)
        app.guard.create(target, principal)
        payload = app.protection.seal_payload(
            encode_payload(self._args, self._kwargs, app.config.max_payload_bytes, enums=app.enums)
        )
        scheduled = self._run_at or (now + self._delay if self._delay else now)
        # One builder, one job: building it again (a second submit, a retry) names the same
        # job, which the store then finds instead of inserting another.
        job_id = self._job_id
        if job_id is None:
            job_id = self._first_id()
        return NewJob(
            job_id=job_id,
            target=target,
            payload=payload,
            priority=self._priority,
            max_retries=self._max_retries,
            backoff=self._backoff,
            backoff_delay=self._backoff_delay,
            timeout=self._timeout,
            scheduled_time=scheduled,
            created_at=now,
            idempotency_key=self.idempotency_key,
            business_key=self._business_key,
            tags=self._tags,
            params=dict(self._params),
            executor=self._executor,
            resource_name=self._resource,
            stall_timeout=self._stall_timeout,
            trace_context=trace_context,
            caller_principal=principal,
            affinity=self._affinity,
            schedule_to_start=self._schedule_to_start,
            takeover_policy=self._takeover_policy,
        )

    def submit(self, connection: Any = None) -> JobHandle:
        """Store the job (in ``connection``'s transaction when given) and return its handle.

        With a caller's SQLAlchemy ``Connection`` or ``Session`` the job commits or rolls back
        with the caller's transaction, and the wakeup is sent only after it commits.
        """
        self._submitted = True
        if self._flow is not None:
            result = submit_flow(self._app, self, self._flow, connection)
            return JobHandle(result.job_id, self._app, result.inserted)
        handle: JobHandle = self._app._submit([self], connection=connection)[0]
        return handle

    def __del__(self) -> None:
        if not getattr(self, "_submitted", True):
            warnings.warn(
                f"a job for {self._ref} was built but never submitted; call .submit()",
                UnsubmittedJobWarning,
                stacklevel=2,
            )
