"""The composition root: the one place where an application and its workers are put together.

:func:`assemble_app` builds what a :class:`~ratchet.Ratchet` holds (plugins' policies, the
store, the wakeup coordinator, the breakers' wiring, configured resource limits) and
:func:`assemble_worker` builds a worker's parts in dependency order (slot table, start check,
gates, the attempt runner, completer and producer, the watchdog, the node's liveness) and the
periodic tasks its maintenance thread runs. A capability that adds a gate or a periodic task adds
it here, nowhere else.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from ratchet.domain.errors import ConfigurationError
from ratchet.domain.masking import MaskingPolicy
from ratchet.domain.model import attempt_key
from ratchet.encryption import PayloadCipher
from ratchet.engine.attempts import AttemptRunner
from ratchet.engine.completer import Completer
from ratchet.engine.gates import CircuitBreakerGate, PermitGate, TypeLimitGate
from ratchet.engine.host import AppHost, Gate, PeriodicTask, WorkerHost
from ratchet.engine.liveness import Liveness, WatcherTask, watcher_store
from ratchet.engine.maintenance import PermitJanitor
from ratchet.engine.metrics import Meter, MetricsSampler
from ratchet.engine.outages import OutageLog
from ratchet.engine.producer import Producer
from ratchet.engine.recurring import RecurringMaterializer, RecurringRegistrar
from ratchet.engine.retention import retention_tasks
from ratchet.engine.security import Guard, Protection
from ratchet.engine.slots import SlotTable
from ratchet.engine.start_check import Key, OwnedJobs, StartCheck
from ratchet.engine.summary import WorkSummary
from ratchet.engine.watchdog import CancellationRequestPoller, Watchdog, cancellation_store
from ratchet.engine.workflows import SignalTimeoutScanner, flow_resolver, workflow_store
from ratchet.ports import (
    CoordinatorContext,
    JobAuthorizationPolicy,
    KeyProvider,
    Store,
    WatcherStore,
)
from ratchet.serialization import EnumPolicy

if TYPE_CHECKING:
    from ratchet.config import WorkerConfig
    from ratchet.engine.host import WorkerHost

#: The signal-timeout scan runs at least this often (a signal wait's deadline is a user promise).
SIGNAL_SCAN_INTERVAL = timedelta(seconds=5)


# ---------------------------------------------------------------------------------- application
class NewApp(AppHost, Protocol):
    """An application being assembled."""

    def wire_limits(self) -> None:
        """Attach the breakers to the app's clock and events; store configured limits."""


def assemble_app(
    app: NewApp,
    url: str,
    *,
    coordinator: str,
    store_options: dict[str, Any] | None,
    auto_migrate: bool | None,
    authorization: JobAuthorizationPolicy | None = None,
    key_provider: KeyProvider | None = None,
    masking: MaskingPolicy | None = None,
) -> None:
    """Give ``app`` (whose ``config``, ``plugins`` and ``clock`` are set) its policies, store and
    coordinator; migrate the schema when asked (SQLite by default); store configured limits.

    A ``node_name`` a plugin gives (``ratchet_node_name``) is set first when none is configured;
    the authorization policy, key provider and masking given win over the plugins' answers.
    """
    plugins = app.plugins
    if app.config.node_name is None:
        named = plugins.node_name(app.config)
        if named is not None:
            app.config = dataclasses.replace(app.config, node_name=named)
    config = app.config
    app.guard = Guard(authorization or plugins.authorization_policy(config))
    provider = key_provider or plugins.key_provider(config)
    cipher = None if provider is None else PayloadCipher(provider)
    app.protection = Protection(cipher, masking or MaskingPolicy())
    app.class_policy = plugins.class_policy(config)
    app.enums = EnumPolicy(app.class_policy, config.allowed_modules)
    app.beans = plugins.bean_resolver(config)
    app.resilience = plugins.resilience_strategy(config)
    app.tracer = plugins.tracer(config)
    app.store = open_store(app, url, store_options)
    app.node_name = config.node_name or "client"
    context = CoordinatorContext(store_url=app.store.url, node_name=app.node_name)
    app.coordinator = plugins.coordinator_factory(coordinator)(coordinator, context)
    if auto_migrate is None:
        auto_migrate = app.store.capabilities.dialect == "sqlite"
    if auto_migrate:
        app.store.migrate()
    app.wire_limits()
    app.resolver = flow_resolver(app)


def open_store(app: AppHost, url: str, store_options: dict[str, Any] | None) -> Store:
    """The store the plugin registered for ``url``'s scheme, opened."""
    return app.plugins.store_factory(url)(url, store_options)


# ---------------------------------------------------------------------------------- worker
class WorkerUnderAssembly(WorkerHost, Protocol):
    """A worker whose parts are being built (they are set here, once)."""

    outages: OutageLog
    slots: SlotTable
    start_check: StartCheck
    gates: list[Gate]
    periodic: list[PeriodicTask]
    runner: AttemptRunner
    completer: Completer
    producer: Producer
    watchdog: Watchdog
    liveness: Liveness
    meter: Meter
    sampler: MetricsSampler


def assemble_worker(worker: WorkerUnderAssembly) -> None:
    """Build the parts of ``worker`` (its ``app``, ``config``, ``store``, ``node_id`` and
    ``stats`` are set), in the order they need each other.

    :raises ConfigurationError: the store cannot run a worker (no watcher capability), or the
        recurring settings are out of range.
    """
    config = worker.config
    worker.outages = OutageLog(worker.stats)
    worker.slots = SlotTable(
        config.concurrency,
        write_ahead=config.concurrency,
        claim_size=config.batch_size,
        ahead_budget=config.claim_ahead.total_seconds(),
    )
    worker.start_check = StartCheck(owned_jobs(worker))
    worker.gates = worker_gates()
    worker.meter = Meter(worker.app.plugins)
    worker.runner = AttemptRunner(worker)
    worker.completer = Completer(worker, config.completion_batch)
    worker.producer = Producer(worker)
    worker.watchdog = Watchdog(
        worker.app,
        config.timeout_settings(),
        on_deadline=worker.runner.on_deadline,
        on_zombie_check=worker.runner.on_zombie_check,
    )
    worker.liveness = Liveness(worker, require_watcher_store(worker.store))
    worker.periodic = periodic_tasks(
        worker.store,
        config,
        cross_process=bool(getattr(worker.app.coordinator, "cross_process", False)),
    )
    worker.sampler = MetricsSampler(config.metrics_interval)
    worker.periodic.append(worker.sampler)
    worker.periodic.extend(retention_tasks(worker.app))  # scheduled, one node at a time


def owned_jobs(worker: WorkerHost) -> OwnedJobs:
    """The start check's store read: which of these claims (keys in the form of
    :attr:`~ratchet.domain.model.ClaimedJob.key`) ``worker``'s node still owns."""

    def read(keys: Sequence[Key]) -> set[Key]:
        asked = [(uuid.UUID(int=job_int), epoch) for job_int, epoch in keys]
        owned = worker.store.owned_jobs(worker.node_id, asked)
        return {attempt_key(job_id, epoch) for job_id, epoch in owned}

    return read


def worker_gates() -> list[Gate]:
    """The checks every attempt passes, in order, before its job's code runs."""
    return [CircuitBreakerGate(), PermitGate(), TypeLimitGate()]


def require_watcher_store(store: Store) -> WatcherStore:
    """The store's watcher capability.

    :raises ConfigurationError: the store has none (a worker needs it to claim jobs and to
        recover the work of dead nodes).
    """
    found = watcher_store(store)
    if found is None:
        raise ConfigurationError(
            f"{type(store).__name__} has no watcher capability (register_incarnation, "
            "beat, watch, acquire_work, ...); a worker needs it to claim jobs and recover the "
            "work of dead nodes"
        )
    return found


def periodic_tasks(
    store: Store, config: WorkerConfig, *, cross_process: bool = False
) -> list[PeriodicTask]:
    """What a worker's maintenance thread runs, each at its own interval (``cross_process``:
    the app's coordinator carries hints to other processes, cancellation requests included).

    :raises ConfigurationError: the recurring settings are out of range.
    """
    tasks: list[PeriodicTask] = [PermitJanitor(config.orphan_scan_interval)]
    if config.summary_interval > timedelta(0):
        tasks.append(WorkSummary(config.summary_interval))
    if cancellation_store(store) is not None:
        tasks.append(
            CancellationRequestPoller.every(config.cancel_request_interval, announced=cross_process)
        )
    if workflow_store(store) is not None:
        tasks.append(SignalTimeoutScanner(min(config.orphan_scan_interval, SIGNAL_SCAN_INTERVAL)))
    if config.watcher_enabled:
        tasks.append(WatcherTask(config.watcher_interval))
    if config.recurring_interval <= timedelta(0) or config.recurring_batch_limit < 1:
        raise ConfigurationError(
            "recurring_interval must be positive and recurring_batch_limit at least 1"
        )
    tasks.append(RecurringRegistrar(config.recurring_interval))
    tasks.append(RecurringMaterializer(config.recurring_interval, config.recurring_batch_limit))
    return tasks
