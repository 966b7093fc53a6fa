"""Recurring jobs: the scheduler API, the ``@app.recurring`` decorator and the materializer.

Mixed into :class:`~ratchet.engine.app.Ratchet`; see ``docs/recurring.md``. A master is stored
by :meth:`RecurringMixin.schedule_recurring` (or by a decorator when a worker starts); every
worker runs a :class:`RecurringMaterializer` that turns due fire times into ordinary jobs.
"""

from __future__ import annotations

import functools
import inspect
import logging
import uuid
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast
from zoneinfo import ZoneInfo

from ratchet.cron import parse, resolve_zone
from ratchet.domain.errors import (
    ClassPolicyViolation,
    ConfigurationError,
    InvalidJobOptions,
    InvalidJobTarget,
)
from ratchet.domain.lifecycle import JobPriority
from ratchet.domain.misfire import RecurringMisfirePolicy, plan_fires
from ratchet.domain.model import JobRecord, NewJob
from ratchet.domain.options import (
    BackoffPolicy,
    JobOptions,
    job_priority,
    normalize_tags,
    validate_option_text,
)
from ratchet.domain.quartz import UnknownTimeZone
from ratchet.domain.recurring import (
    FIRE_TIME_PARAM,
    MASTER_PARAM,
    FirePlan,
    MaterializedFire,
    NewRecurring,
    RecurringRecord,
    RecurringSource,
    SyncReport,
    fire_idempotency_key,
)
from ratchet.engine.builder import UnsubmittedJobWarning, validate_business_key
from ratchet.engine.tracing import submission
from ratchet.events import EventKind, JobEvent
from ratchet.ids import uuid7
from ratchet.ports import RecurringStore, SpanValue, WakeupHint
from ratchet.serialization import NO_ARGUMENTS, EnumPolicy, encode_payload
from ratchet.targets import TargetRef, check_arguments, resolve_attribute

if TYPE_CHECKING:
    from ratchet.config import RatchetConfig
    from ratchet.engine.host import WorkerHost
    from ratchet.engine.security import Protection
    from ratchet.plugins import Plugins
    from ratchet.ports import ClassPolicy, Clock, ClusterCoordinator, Store, Tracer

log = logging.getLogger("ratchet.recurring")

F = TypeVar("F", bound=Callable[..., Any])

REGISTRATION_LOCK = "recurring-registration"
"""The ``scheduler_lock`` lease held while a node registers its decorators."""
REGISTRATION_LEASE = timedelta(seconds=60)
DEFAULT_BATCH_LIMIT = 20
"""Masters claimed per materializer transaction (the original's ``recurring.batch-limit``)."""
MAX_ROUNDS = 50
"""Transactions one materializer run makes at most (then the next run continues)."""


# --------------------------------------------------------------------------- pure helpers
def zone_name(zone: str | ZoneInfo) -> str:
    """The IANA name of ``zone`` (checked).

    :raises UnknownTimeZone: not a known IANA zone (or a ZoneInfo without a key).
    """
    if isinstance(zone, ZoneInfo):
        if not zone.key:
            raise UnknownTimeZone(repr(zone))
        return zone.key
    return resolve_zone(zone).key


def next_fire_after(cron: str, zone: str, after: datetime) -> datetime | None:
    """The first fire time strictly after ``after`` (UTC), or None when the schedule ended or its
    next fire is more than a century ahead of ``after`` (callers pass the present)."""
    following = parse(cron).next_after(after, resolve_zone(zone))
    return None if following is None else following.astimezone(UTC)


def _first_fire(cron: str, zone: str, now: datetime) -> datetime:
    first = next_fire_after(cron, zone, now)
    if first is None:
        raise InvalidJobOptions(
            f"cron expression {cron!r} has no fire time after {now.isoformat()} in {zone} "
            "(its years are over or more than 100 years ahead, or its days never exist)"
        )
    return first


def _decorator_priority(value: object) -> JobPriority:
    """A decorator's priority: the 0..4 of :class:`JobPriority`, as everywhere else.

    :raises InvalidJobOptions: anything else; 5..10 (the decorator's scale in early versions)
        says so.
    """
    try:
        return job_priority(value)
    except InvalidJobOptions as exc:
        if isinstance(value, int) and not isinstance(value, bool) and 5 <= value <= 10:
            raise InvalidJobOptions(
                f"{exc}; @app.recurring no longer takes a 1-10 scale: use JobPriority.HIGH "
                "(3) for what 7-8 meant, JobPriority.CRITICAL (4) for 9-10, NORMAL (2) for 5-6"
            ) from None
        raise


def _check_policy(policy: object) -> RecurringMisfirePolicy:
    if not isinstance(policy, RecurringMisfirePolicy):
        raise InvalidJobOptions(
            "misfire policy must be RecurringMisfirePolicy.skip(), .fire_once() or "
            f".catch_up(n), got {policy!r}"
        )
    return policy


def _context_annotation(annotation: Any) -> bool:
    from ratchet.engine.context import JobContext

    if annotation is inspect.Parameter.empty:
        return True
    if isinstance(annotation, str):
        return "JobContext" in annotation
    return isinstance(annotation, type) and issubclass(annotation, JobContext)


def takes_context(fn: Callable[..., Any]) -> bool:
    """Whether a recurring function wants the JobContext (one parameter) or nothing.

    :raises InvalidJobTarget: any other signature.
    """
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        raise InvalidJobTarget(f"{fn!r} has no inspectable signature") from None
    params = list(signature.parameters.values())
    if not params:
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if (
        len(params) == 1
        and params[0].kind in positional
        and _context_annotation(params[0].annotation)
    ):
        return True
    name = getattr(fn, "__qualname__", repr(fn))
    raise InvalidJobTarget(
        f"@app.recurring function {name}{signature} must take no argument or a single "
        f"JobContext, e.g. `def {getattr(fn, '__name__', 'job')}()` or "
        f"`def {getattr(fn, '__name__', 'job')}(ctx: JobContext)`"
    )


# --------------------------------------------------------------------------- the builder
@dataclass(frozen=True)
class RecurringHandle:
    """A stored recurring master."""

    id: uuid.UUID
    app: RecurringMixin
    business_key: str | None = None

    def record(self) -> RecurringRecord | None:
        """The master as stored now."""
        return self.app.get_recurring(self.id)

    def fires(self, limit: int = 1000) -> list[JobRecord]:
        """The occurrences created so far, oldest first."""
        return self.app.recurring_fires(self.id, limit)

    def pause(self) -> bool:
        return self.app.pause_recurring(self.id)

    def resume(self) -> bool:
        return self.app.resume_recurring(self.id)

    def cancel(self) -> bool:
        return self.app.cancel_recurring(self.id)


class RecurringJobBuilder:
    """Options of one recurring master; nothing is stored until :meth:`submit`.

    The expression and the zone were already checked when the builder was made.
    """

    def __init__(
        self,
        app: RecurringMixin,
        cron: str,
        zone: str,
        ref: TargetRef,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
    ) -> None:
        self._app = app
        self._cron = cron
        self._zone = zone
        self._ref = ref
        self._payload = app.protection.seal_payload(
            encode_payload(args, kwargs, app.config.max_payload_bytes, enums=app.enums)
        )
        self._options = JobOptions()
        self._tags: tuple[str, ...] = ()
        self._business_key: str | None = None
        self._misfire = RecurringMisfirePolicy.default()
        self._name: str | None = None
        self._submitted = False

    def with_options(self, options: JobOptions) -> RecurringJobBuilder:
        """Options every occurrence gets: priority, retries, backoff, timeout, tags, params."""
        if not isinstance(options, JobOptions):
            raise InvalidJobOptions(f"with_options needs a JobOptions, got {options!r}")
        self._options = options
        return self

    def with_tags(self, *tags: str | Iterable[str]) -> RecurringJobBuilder:
        """Tags of the master and of every occurrence (``with_tags("a", "b")`` or a list)."""
        flat: list[str] = []
        for tag in tags:
            if isinstance(tag, str):
                flat.append(tag)
            else:
                flat.extend(tag)
        self._tags = normalize_tags((*self._tags, *flat))
        return self

    def with_business_key(self, key: str) -> RecurringJobBuilder:
        """At most one active master holds ``key`` (1-255 printable ASCII characters)."""
        self._business_key = validate_business_key(key)
        return self

    def with_misfire_policy(self, policy: RecurringMisfirePolicy) -> RecurringJobBuilder:
        """What a backlog of two or more overdue fire times creates (default ``catch_up(11)``)."""
        self._misfire = _check_policy(policy)
        return self

    def with_name(self, name: str) -> RecurringJobBuilder:
        """A display name (up to 255 characters)."""
        if not isinstance(name, str) or not name.strip() or len(name.strip()) > 255:
            raise InvalidJobOptions("a recurring job's name must be 1-255 characters")
        self._name = validate_option_text(name, "recurring job name").strip()
        return self

    def build(self, now: datetime) -> NewRecurring:
        """The master this builder describes, first fire strictly after ``now``."""
        opts = self._options
        return NewRecurring(
            recurring_id=self._app.new_id(),
            cron=self._cron,
            zone=self._zone,
            target=str(self._ref),
            payload=self._payload,
            next_fire=_first_fire(self._cron, self._zone, now),
            created_at=now,
            priority=opts.priority,
            max_retries=opts.max_retries,
            backoff=opts.backoff,
            backoff_delay=opts.backoff_delay,
            timeout=opts.timeout,
            tags=normalize_tags((*opts.tags, *self._tags)),
            params=dict(opts.params),
            business_key=self._business_key,
            name=self._name,
            misfire=self._misfire,
            source=RecurringSource.API,
        )

    def submit(self) -> RecurringHandle:
        """Store the master and return its handle.

        :raises DuplicateBusinessKeyError: an active master already holds the business key.
        :raises InvalidJobOptions: the schedule has no fire time left.
        """
        self._submitted = True
        master = self.build(self._app.now())
        store = self._app._recurring_store()
        store.create_recurring(master, now=master.created_at)
        log.info(
            "recurring master %s (%s %s) stored; first fire %s",
            master.recurring_id,
            master.cron,
            master.zone,
            master.next_fire,
        )
        return RecurringHandle(master.recurring_id, self._app, master.business_key)

    def __del__(self) -> None:
        if not getattr(self, "_submitted", True):
            warnings.warn(
                f"a recurring job for {self._ref} was built but never submitted; call .submit()",
                UnsubmittedJobWarning,
                stacklevel=2,
            )


# --------------------------------------------------------------------------- the decorator
@dataclass(frozen=True)
class RecurringDefinition:
    """What one ``@app.recurring`` declares; registered when a worker starts."""

    id: str
    name: str
    cron: str
    zone: str
    target: str
    options: JobOptions
    misfire: RecurringMisfirePolicy
    enabled: bool
    wrapper: Callable[..., Any] = field(repr=False, compare=False)
    function: Callable[..., Any] = field(repr=False, compare=False)

    def master(self, recurring_id: uuid.UUID, now: datetime) -> NewRecurring:
        """The master this definition wants, first fire strictly after ``now``."""
        opts = self.options
        return NewRecurring(
            recurring_id=recurring_id,
            cron=self.cron,
            zone=self.zone,
            target=self.target,
            payload=NO_ARGUMENTS,
            next_fire=next_fire_after(self.cron, self.zone, now),
            created_at=now,
            priority=opts.priority,
            max_retries=opts.max_retries,
            backoff=opts.backoff,
            backoff_delay=opts.backoff_delay,
            timeout=opts.timeout,
            tags=opts.tags,
            params=dict(opts.params),
            business_key=self.id,
            name=self.name,
            misfire=self.misfire,
            source=RecurringSource.DECORATOR,
        )


def _wrap(fn: Callable[..., Any], with_context: bool) -> Callable[..., Any]:
    """The function the worker calls: passes the running JobContext if ``fn`` wants it."""
    from ratchet.engine.context import JobContext

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            if with_context and not args and not kwargs:
                return await fn(JobContext.current())
            return await fn(*args, **kwargs)

        return run_async

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        if with_context and not args and not kwargs:
            return fn(JobContext.current())
        return fn(*args, **kwargs)

    return run


def _decorated_ref(fn: Callable[..., Any]) -> TargetRef:
    """The stored reference of a function being decorated (not yet bound in its module)."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not inspect.isfunction(fn) or not isinstance(module, str) or not isinstance(qualname, str):
        raise InvalidJobTarget(f"@app.recurring needs a module-level function, got {fn!r}")
    if fn.__name__ == "<lambda>" or "<locals>" in qualname or "." in qualname:
        raise InvalidJobTarget(
            f"@app.recurring needs a module-level function; {qualname} is a lambda, a nested "
            "function or a method, which a worker could not import"
        )
    if module == "__main__":
        raise InvalidJobTarget(
            f"{qualname} is defined in __main__, which a worker process cannot import; put "
            "recurring functions in an importable module"
        )
    return TargetRef(module, qualname)


# --------------------------------------------------------------------------- materializer
def make_planner(
    new_id: Callable[[], uuid.UUID] = uuid7,
    trace: Callable[[RecurringRecord, datetime], str | None] | None = None,
) -> Callable[[RecurringRecord, datetime], FirePlan]:
    """Turns a due master into its occurrences under its misfire policy (runs inside the
    materializer's transaction: pure computation only).

    :param trace: the trace context of one occurrence (master, fire time); None: untraced.
    """

    def plan(master: RecurringRecord, now: datetime) -> FirePlan:
        if master.next_fire is None:  # pragma: no cover - the claim never returns one
            return FirePlan((), None, master.last_fire)
        cron = parse(master.cron)
        zone = resolve_zone(master.zone)
        decision = plan_fires(cron, zone, master.next_fire, now, master.misfire)
        fires = decision.fire_times
        jobs = [
            NewJob(
                job_id=new_id(),
                target=master.target,
                payload=master.payload,
                priority=master.priority,
                max_retries=master.max_retries,
                backoff=master.backoff,
                backoff_delay=master.backoff_delay,
                timeout=master.timeout,
                scheduled_time=fire.astimezone(UTC),
                created_at=now,
                idempotency_key=fire_idempotency_key(master.recurring_id, fire),
                tags=master.tags,
                params={
                    **master.params,
                    MASTER_PARAM: str(master.recurring_id),
                    FIRE_TIME_PARAM: fire.isoformat(),
                },
                recurring_master_id=master.recurring_id,
                trace_context=None if trace is None else trace(master, fire),
            )
            for fire in fires
        ]
        following = cron.next_after(fires[-1], zone, now=now) if fires else master.next_fire
        if following is not None and following.astimezone(UTC) <= now:
            log.warning(
                "recurring master %s (%s): fire times from %s were missed; %s created %d and "
                "dropped the rest until %s",
                master.recurring_id,
                master.name or master.business_key or master.target,
                master.next_fire.isoformat(),
                master.misfire,
                len(fires),
                now.isoformat(),
            )
        last = fires[-1].astimezone(UTC) if fires else master.last_fire
        return FirePlan(jobs, decision.next_fire, last)

    return plan


class RecurringMaterializer:
    """Creates the due occurrences of recurring masters (a worker's periodic task).

    Every node runs one; the store's claim makes them share the work without ever creating an
    occurrence twice.
    """

    name = "recurring-materializer"
    cluster_wide = True
    """Work for the whole cluster: spread over the live nodes (``ClusterShare``)."""

    def __init__(
        self, interval: timedelta = timedelta(seconds=1), batch_limit: int = DEFAULT_BATCH_LIMIT
    ) -> None:
        self.interval = interval
        self.batch_limit = batch_limit
        self.created = 0
        """Occurrences this materializer created so far."""
        self._warned = False
        self._failing = False

    def run_once(self, worker: WorkerHost) -> None:
        app = cast("RecurringMixin", worker.app)
        if app.store.capability(RecurringStore) is None:  # type: ignore[type-abstract]
            if not self._warned:
                self._warned = True
                log.warning("the store has no recurring masters: recurring jobs will not fire")
            return
        try:
            self.created += len(
                app.materialize_recurring(worker.node_id, batch_limit=self.batch_limit)
            )
        except Exception as exc:  # logged once per outage; the next run tries again
            if not self._failing:
                self._failing = True
                log.warning(
                    "recurring materializer failed (%s); retrying every %s (is the schema at "
                    "its newest revision? `ratchet db upgrade`)",
                    exc,
                    self.interval,
                )
            return
        if self._failing:
            self._failing = False
            log.info("recurring materializer works again")


class RecurringRegistrar:
    """Registers the app's decorators once per worker, under the cluster start-up lease.

    While another node holds the lease it tries again every ``interval``; once done it removes
    itself from the worker's periodic tasks.
    """

    name = "recurring-registration"

    def __init__(self, interval: timedelta = timedelta(seconds=1)) -> None:
        self.interval = interval
        self.report: SyncReport | None = None
        """What the registration did, once it ran."""
        self._failing = False

    def run_once(self, worker: WorkerHost) -> None:
        app = cast("RecurringMixin", worker.app)
        if app.store.capability(RecurringStore) is None:  # type: ignore[type-abstract]
            if app.recurring_definitions:
                log.warning("the store has no recurring masters: decorators are not registered")
            self._finish(worker)
            return
        try:
            report = app.register_recurring_jobs(owner=worker.node_id)
        except (InvalidJobTarget, InvalidJobOptions, ClassPolicyViolation) as exc:
            log.error("recurring decorators not registered: %s", exc)
            self._finish(worker)  # a programming error: trying again cannot help
            return
        except Exception as exc:
            if not self._failing:
                self._failing = True
                log.warning("recurring decorators not registered yet (%s); retrying", exc)
            return
        if report is not None:
            self.report = report
            self._finish(worker)

    def _finish(self, worker: WorkerHost) -> None:
        if self in worker.periodic:
            worker.periodic.remove(self)


# --------------------------------------------------------------------------- the API mixin
class RecurringMixin:
    """Recurring masters of an app (needs ``store``, ``clock``, ``config``, ``coordinator``)."""

    if TYPE_CHECKING:
        config: RatchetConfig
        store: Store
        clock: Clock
        coordinator: ClusterCoordinator
        plugins: Plugins
        node_name: str
        tracer: Tracer | None
        protection: Protection

        def emit(self, event: JobEvent) -> None: ...

        def new_id(self) -> uuid.UUID: ...

        def now(self) -> datetime: ...

        def check_target(self, fn: Callable[..., Any]) -> TargetRef: ...

        def enforce_policy(self, ref: TargetRef) -> None: ...

        class_policy: ClassPolicy
        enums: EnumPolicy

    # -- plumbing ----------------------------------------------------------------------------
    def _recurring_store(self) -> RecurringStore:
        store = self.store.capability(RecurringStore)  # type: ignore[type-abstract]
        if store is None:
            raise ConfigurationError(
                f"the {self.store.capabilities.dialect} store does not support recurring jobs"
            )
        return store

    @property
    def recurring_definitions(self) -> dict[str, RecurringDefinition]:
        """The ``@app.recurring`` declarations of this app, by id."""
        defs: dict[str, RecurringDefinition] | None = self.__dict__.get("_recurring_defs")
        if defs is None:
            defs = self.__dict__["_recurring_defs"] = {}
        return defs

    # -- the programmatic API -------------------------------------------------------------------
    def schedule_recurring(
        self, cron: str, zone: str | ZoneInfo, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> RecurringJobBuilder:
        """A builder for a master firing ``fn(*args, **kwargs)`` on the Quartz expression
        ``cron`` in ``zone`` (an IANA name); call ``.submit()``.

        :raises InvalidCronExpression: the expression is not valid Quartz syntax.
        :raises UnknownTimeZone: the zone is not a known IANA zone.
        :raises InvalidJobTarget / ClassPolicyViolation: ``fn`` cannot be a job.
        :raises InvalidJobArguments: ``fn`` cannot be called with these arguments.
        """
        parse(cron)
        name = zone_name(zone)
        ref = self.check_target(fn)
        check_arguments(fn, ref, args, kwargs)
        return RecurringJobBuilder(self, cron.strip(), name, ref, args, kwargs)

    def schedule_recurring_utc(
        self, cron: str, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> RecurringJobBuilder:
        """:meth:`schedule_recurring` in UTC."""
        return self.schedule_recurring(cron, "UTC", fn, *args, **kwargs)

    # -- the decorator ----------------------------------------------------------------------
    def recurring(
        self,
        cron: str,
        zone: str | ZoneInfo = "UTC",
        *,
        id: str | None = None,
        name: str | None = None,
        enabled: bool = True,
        priority: int | JobPriority = JobPriority.NORMAL,
        max_retries: int = 3,
        backoff: BackoffPolicy | str = BackoffPolicy.EXPONENTIAL,
        backoff_delay: timedelta = timedelta(seconds=1),
        timeout: timedelta | None = timedelta(hours=1),
        tags: Iterable[str] = (),
        misfire_policy: RecurringMisfirePolicy | None = None,
    ) -> Callable[[F], F]:
        """Declare a recurring job on a module-level function taking no argument or one
        :class:`~ratchet.engine.context.JobContext`.

        Everything is checked here, at import time: the expression, the zone, the priority
        (a :class:`JobPriority` or its value 0..4, as everywhere), the options and the
        signature. ``id`` (default ``module.qualname``) is the business key: when a worker
        starts it makes exactly one active master per id match this declaration, and cancels
        the masters of declarations that are gone (or ``enabled=False``).

        :raises InvalidCronExpression / UnknownTimeZone / InvalidJobOptions / InvalidJobTarget:
        """
        parse(cron)
        zone_id = zone_name(zone)
        options = JobOptions(
            priority=_decorator_priority(priority),
            max_retries=max_retries,
            backoff=backoff,  # type: ignore[arg-type]
            backoff_delay=backoff_delay,
            timeout=timeout,
            tags=tuple(normalize_tags(tags)),
        )
        policy = _check_policy(
            RecurringMisfirePolicy.default() if misfire_policy is None else misfire_policy
        )
        if name is not None and (not isinstance(name, str) or len(name) > 255):
            raise InvalidJobOptions("a recurring job's name must be a string of <= 255 characters")
        if name is not None:
            validate_option_text(name, "recurring job name")

        def decorate(fn: F) -> F:
            with_context = takes_context(fn)
            ref = _decorated_ref(fn)
            self.enforce_policy(ref)
            key = validate_business_key(id if id is not None else f"{ref.module}.{ref.qualname}")
            known = self.recurring_definitions.get(key)
            if known is not None and known.target != str(ref):
                raise InvalidJobOptions(
                    f"recurring id {key!r} is declared twice ({known.target} and {ref})"
                )
            wrapper = _wrap(fn, with_context)
            definition = RecurringDefinition(
                id=key,
                name=name or fn.__name__,
                cron=cron.strip(),
                zone=zone_id,
                target=str(ref),
                options=options,
                misfire=policy,
                enabled=bool(enabled),
                wrapper=wrapper,
                function=fn,
            )
            if enabled:
                _first_fire(definition.cron, zone_id, self.now())
            wrapper.__ratchet_recurring__ = definition  # type: ignore[attr-defined]
            self.recurring_definitions[key] = definition
            return cast(F, wrapper)

        return decorate

    def _check_importable(self, definition: RecurringDefinition) -> None:
        """At registration: the stored target must name this function (or its wrapper)."""
        resolved = resolve_attribute(TargetRef.parse(definition.target))
        fn = definition.function
        if resolved is definition.wrapper or getattr(resolved, "__wrapped__", None) is fn:
            return  # this decorator's wrapper, or another app's wrapper of the same function
        if resolved is fn and not takes_context(fn):
            return  # the bare function: callable without arguments as it is
        raise InvalidJobTarget(
            f"{definition.target} does not name the function decorated with @app.recurring "
            f"(id {definition.id!r}); decorate it where it is defined, at module level"
        )

    def _owns_target(self, target: str) -> bool:
        """Whether this app may run ``target``: only then may its workers cancel a decorator
        master of it (apps with other class policies may share the database)."""
        try:
            ref = TargetRef.parse(target)
        except InvalidJobTarget:
            return False
        return bool(self.class_policy.is_allowed(ref.module, ref.qualname))

    def register_recurring_jobs(
        self, *, owner: str | None = None, lease: timedelta = REGISTRATION_LEASE
    ) -> SyncReport | None:
        """Make the decorator masters in the database match this app's declarations, under the
        cluster start-up lease. Workers call it when they start; it is idempotent.

        :returns: what changed, or None while another node holds the lease (try again later).
        """
        store = self._recurring_store()
        holder = owner or f"{self.node_name}-{uuid.uuid4().hex[:8]}"
        now = self.now()
        if not store.try_lock(REGISTRATION_LOCK, holder, now=now, lease=lease):
            return None
        try:
            wanted = []
            for definition in self.recurring_definitions.values():
                if definition.enabled:
                    self._check_importable(definition)
                    wanted.append(definition.master(self.new_id(), now))
            report = store.sync_recurring(
                wanted, now=now, next_fire=next_fire_after, owns=self._owns_target
            )
        finally:
            store.release_lock(REGISTRATION_LOCK, holder)
        if report.created or report.updated or report.canceled:
            log.info(
                "recurring decorators: created %s, updated %s, canceled %s, unchanged %d",
                list(report.created),
                list(report.updated),
                list(report.canceled),
                len(report.unchanged),
            )
        return report

    # -- the materializer -----------------------------------------------------------------------
    def materialize_recurring(
        self, node_id: str | None = None, *, batch_limit: int = DEFAULT_BATCH_LIMIT
    ) -> list[MaterializedFire]:
        """Create the occurrences of every due master now (what each worker does every
        ``recurring_interval``); returns the occurrences this call created."""
        store = self._recurring_store()
        node = node_id or self.node_name
        now = self.now()
        plan = make_planner(self.new_id, None if self.tracer is None else self._fire_trace)
        created: list[MaterializedFire] = []
        for _ in range(MAX_ROUNDS):
            claimed, fires = store.materialize_recurring(
                node, now=now, limit=batch_limit, plan=plan
            )
            created.extend(f for f in fires if f.inserted)
            if claimed < batch_limit:
                break
        if created:
            self._after_materialize(created, node, now)
        return created

    def _fire_trace(self, master: RecurringRecord, fire: datetime) -> str | None:
        """The trace of one occurrence: a span of its own, started and ended as it is made, so
        each occurrence is a trace of its own."""
        attributes: dict[str, SpanValue] = {
            "ratchet.job.target": master.target,
            "ratchet.recurring.id": str(master.recurring_id),
            "ratchet.recurring.fire_time": fire.isoformat(),
        }
        with submission(self.tracer, "recurring", attributes) as span:
            return span.trace_context

    def _after_materialize(
        self, created: Sequence[MaterializedFire], node: str, now: datetime
    ) -> None:
        try:
            self.coordinator.notify_new_work(
                WakeupHint(JobPriority.NORMAL, node, jobs=max(1, len(created)))
            )
        except Exception:
            log.warning("wakeup could not be sent; polling will still find the jobs", exc_info=True)
        for fire in created:
            self.emit(
                JobEvent(
                    EventKind.SUBMITTED,
                    fire.job_id,
                    now,
                    node,
                    {
                        "target": fire.target,
                        "recurring_master_id": str(fire.recurring_id),
                        "fire_time": fire.fire_time.isoformat(),
                    },
                )
            )

    # -- reading ------------------------------------------------------------------------------
    def get_recurring(self, recurring_id: uuid.UUID) -> RecurringRecord | None:
        """A master by id (active or ended)."""
        return self._recurring_store().get_recurring(recurring_id)

    def find_recurring(self, business_key: str) -> RecurringRecord | None:
        """The active master holding ``business_key`` (a decorator's id), or None."""
        key = validate_option_text(business_key, "business key")
        return self._recurring_store().find_recurring(key)

    def list_recurring(
        self, *, tag: str | None = None, active_only: bool = True, limit: int = 1000
    ) -> list[RecurringRecord]:
        """Masters, oldest first (only active ones unless ``active_only=False``)."""
        if tag is not None:
            validate_option_text(tag, "tag")
        return self._recurring_store().list_recurring(tag=tag, active_only=active_only, limit=limit)

    def recurring_fires(self, recurring_id: uuid.UUID, limit: int = 1000) -> list[JobRecord]:
        """The occurrences created for a master, oldest first."""
        return self._recurring_store().recurring_fires(recurring_id, limit)

    # -- operators ----------------------------------------------------------------------------
    def _master_id(self, master: uuid.UUID | str) -> uuid.UUID | None:
        if isinstance(master, uuid.UUID):
            return master
        if isinstance(master, str):
            found = self.find_recurring(master)
            return None if found is None else found.recurring_id
        raise InvalidJobOptions(
            f"a master is named by its id (UUID) or business key, got {master!r}"
        )

    def pause_recurring(self, master: uuid.UUID | str) -> bool:
        """Stop a master (by id, or by business key) from firing; True if it is paused now.

        Occurrences already created are not touched.
        """
        recurring_id = self._master_id(master)
        if recurring_id is None:
            return False
        return self._recurring_store().pause_recurring(recurring_id, now=self.now())

    def resume_recurring(self, master: uuid.UUID | str) -> bool:
        """Let a paused master fire again, from its first fire time after now (the ones that
        passed while it was paused are not created). False unless it was paused."""
        recurring_id = self._master_id(master)
        if recurring_id is None:
            return False
        return self._recurring_store().resume_recurring(
            recurring_id, now=self.now(), next_fire=next_fire_after
        )

    def cancel_recurring(self, master: uuid.UUID | str) -> bool:
        """End a master for good (its business key is free again). Occurrences already
        created are ordinary jobs and stay; cancel them with ``cancel_job`` if needed."""
        recurring_id = self._master_id(master)
        if recurring_id is None:
            return False
        return self._recurring_store().cancel_recurring(recurring_id, now=self.now())

    def cancel_recurring_job_by_business_key(self, business_key: str) -> int:
        """Cancel the active master holding ``business_key``; returns 0 or 1."""
        return self._recurring_store().cancel_recurring_by_business_key(
            business_key, now=self.now()
        )

    def cancel_recurring_jobs_by_tag(self, tag: str) -> int:
        """Cancel every active master carrying ``tag``; returns how many."""
        count = self._recurring_store().cancel_recurring_by_tag(tag, now=self.now())
        if count:
            self.emit(
                JobEvent(
                    EventKind.BULK_CANCELLED,
                    None,
                    self.now(),
                    data={"tag": tag, "count": count, "recurring": True},
                )
            )
        return count


__all__ = [
    "RecurringDefinition",
    "RecurringHandle",
    "RecurringJobBuilder",
    "RecurringMaterializer",
    "RecurringMixin",
    "RecurringRegistrar",
    "make_planner",
    "next_fire_after",
    "takes_context",
    "zone_name",
]
