"""What the engine's parts need from the app and the worker that hold them, as Protocols.

The parts (the attempt runner, completer, producer, watchdog, liveness, gates, periodic tasks,
builders and flows) are typed against these faces, not against :class:`~ratchet.Ratchet` or
:class:`~ratchet.engine.worker.Worker`, so the engine's modules import each other in one
direction only: ``app`` and ``worker`` at the top, the composition root
(:mod:`ratchet.engine.assembly`) under them, the parts under that and this module under the
parts. A part that needs something new of its worker or app declares it here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from datetime import timedelta

    from ratchet.config import RatchetConfig, WorkerConfig
    from ratchet.domain.model import AttemptKey, AttemptRecord, ClaimedJob, JobRecord, Outcome
    from ratchet.domain.resources import ResourceLimit
    from ratchet.domain.retry import RetryPolicy
    from ratchet.domain.watcher import WatcherReport
    from ratchet.domain.workflow import FlowEffect, FlowResolver
    from ratchet.engine.context import ProgressReporter
    from ratchet.engine.hint_response import HintResponder
    from ratchet.engine.outages import OutageLog
    from ratchet.engine.running import Attempt
    from ratchet.engine.security import Guard, Protection
    from ratchet.engine.slots import SlotTable
    from ratchet.engine.start_check import StartCheck
    from ratchet.engine.stats import LivenessStats, WorkerStats
    from ratchet.events import JobEvent
    from ratchet.plugins import Plugins
    from ratchet.ports import (
        BeanResolver,
        ClassPolicy,
        ClusterCoordinator,
        ExecutorProvider,
        ResilienceStrategy,
        Store,
        Tracer,
        TransactionalStore,
    )
    from ratchet.serialization import EnumPolicy
    from ratchet.targets import TargetRef


class AppHost(Protocol):
    """The services of an application (:class:`~ratchet.Ratchet`) its parts use."""

    config: RatchetConfig
    store: Store
    coordinator: ClusterCoordinator
    plugins: Plugins
    class_policy: ClassPolicy
    enums: EnumPolicy
    beans: BeanResolver
    resilience: ResilienceStrategy
    retry_policy: RetryPolicy | None
    resolver: FlowResolver
    node_name: str
    tracer: Tracer | None
    guard: Guard
    protection: Protection

    def now(self) -> datetime: ...

    def new_id(self) -> uuid.UUID: ...

    def observed(self) -> bool: ...

    def emit(self, event: JobEvent) -> None: ...

    def check_target(self, fn: Callable[..., Any]) -> TargetRef: ...

    def enforce_policy(self, ref: TargetRef) -> None: ...

    def get_job(self, job_id: uuid.UUID) -> JobRecord | None: ...

    def cancel_job(self, job_id: uuid.UUID, *, interrupt: bool = False) -> bool: ...

    def retry_job(self, job_id: uuid.UUID) -> bool: ...

    def attempts(self, job_id: uuid.UUID) -> list[AttemptRecord]: ...

    def deliver_signal(self, target: uuid.UUID | str, payload: Any = None) -> int: ...

    def register_resource_limit(
        self,
        name: str,
        max_concurrent: int,
        retry_delay: timedelta = ...,
        *,
        description: str | None = None,
    ) -> ResourceLimit: ...

    def _submit(self, builders: Sequence[Any], connection: Any = None) -> list[Any]: ...

    def _caller_transactions(self, connection: Any) -> TransactionalStore | None: ...

    def _after_submit(
        self, inserted: Sequence[Any], woken: Sequence[Any], now: datetime
    ) -> None: ...


class Gate(Protocol):
    """Decides whether an attempt may start now (circuit breaker, resource permit, ...)."""

    name: str

    def enter(self, worker: WorkerHost, job: ClaimedJob, now: datetime) -> Outcome | None:
        """None lets the attempt proceed; an outcome (usually RESCHEDULE) ends it here."""

    def leave(self, worker: WorkerHost, job: ClaimedJob) -> None:
        """Called once after the attempt, whatever its outcome, if :meth:`enter` let it pass."""


class PeriodicTask(Protocol):
    """Maintenance run on the worker's maintenance thread every ``interval``."""

    name: str
    interval: timedelta

    def run_once(self, worker: WorkerHost) -> None:
        """Do one round; exceptions are logged and the task runs again next interval."""


class RunnerFace(Protocol):
    """The attempt runner (:mod:`ratchet.engine.attempts`), as the other parts see it."""

    services: dict[str, str]

    def is_resolved(self, ref: TargetRef) -> bool: ...

    def resolve(self, ref: TargetRef) -> Callable[..., Any]: ...

    def executor_for(self, job: ClaimedJob) -> ExecutorProvider: ...

    def provides(self, provider: Any, protocol: type) -> bool: ...

    def run(self, job: ClaimedJob) -> None: ...


class CompleterFace(Protocol):
    """The completer (:mod:`ratchet.engine.completer`), as the other parts see it."""

    timeouts: dict[AttemptKey, dict[str, Any]]

    def put(self, outcome: Outcome) -> None: ...

    def report(
        self, outcomes: list[Outcome], fenced: set[uuid.UUID], effects: Sequence[FlowEffect] = ()
    ) -> None: ...


class ProducerFace(Protocol):
    """The producer (:mod:`ratchet.engine.producer`), as the other parts see it."""

    def wake(self) -> None: ...

    def wake_at(self, when: datetime) -> None: ...


class WatchdogFace(Protocol):
    """The watchdog (:mod:`ratchet.engine.watchdog`), as the other parts see it."""

    def begin(self, job: ClaimedJob, started: datetime) -> Attempt: ...

    def forget(self, attempt: Attempt) -> None: ...

    def check_zombie_at(self, when: datetime, attempt: Attempt) -> None: ...


class LivenessFace(Protocol):
    """The node's liveness (:mod:`ratchet.engine.liveness`), as the other parts see it."""

    @property
    def stats(self) -> LivenessStats: ...

    def acquire(self, want: int) -> list[ClaimedJob]: ...

    def refill(self) -> None: ...

    def channel(self, job: ClaimedJob) -> ProgressReporter: ...

    def finish(
        self,
        job: ClaimedJob,
        attempt: Attempt,
        outcome: Outcome | None,
        channel: ProgressReporter | None = None,
    ) -> Outcome | None: ...

    def watch_once(self) -> WatcherReport: ...


class MeterFace(Protocol):
    """The worker's meter (:mod:`ratchet.engine.metrics`), as the parts that measure see it."""

    @property
    def enabled(self) -> bool: ...

    def polled(self, claimed: Sequence[ClaimedJob], seconds: float) -> None: ...

    def written(
        self,
        outcomes: Sequence[Outcome],
        fenced: set[uuid.UUID],
        timed_out: set[AttemptKey],
        seconds: float,
    ) -> None: ...


class WorkerHost(Protocol):
    """A worker (:class:`~ratchet.engine.worker.Worker`), as its parts see it (read-only but
    for ``node_id``, which changes when the node continues as a new incarnation)."""

    node_id: str

    @property
    def app(self) -> AppHost: ...

    @property
    def config(self) -> WorkerConfig: ...

    @property
    def store(self) -> Store: ...

    @property
    def stats(self) -> WorkerStats: ...

    @property
    def outages(self) -> OutageLog: ...

    @property
    def slots(self) -> SlotTable: ...

    @property
    def start_check(self) -> StartCheck: ...

    @property
    def gates(self) -> list[Gate]: ...

    @property
    def periodic(self) -> list[PeriodicTask]: ...

    @property
    def runner(self) -> RunnerFace: ...

    @property
    def completer(self) -> CompleterFace: ...

    @property
    def producer(self) -> ProducerFace: ...

    @property
    def watchdog(self) -> WatchdogFace: ...

    @property
    def liveness(self) -> LivenessFace: ...

    @property
    def meter(self) -> MeterFace: ...

    @property
    def hints(self) -> HintResponder: ...

    @property
    def draining(self) -> bool: ...

    def wakeup(self) -> None: ...

    def report_claimed(self, jobs: int) -> None: ...

    def free_slots(self) -> int: ...

    def target_ref(self, target: str) -> TargetRef: ...

    def request_cancellation(
        self, job_id: uuid.UUID, reason: str, epoch: int | None = None
    ) -> bool: ...

    def deliver_cancellation_requests(self) -> int: ...


__all__ = [
    "AppHost",
    "CompleterFace",
    "Gate",
    "LivenessFace",
    "MeterFace",
    "PeriodicTask",
    "ProducerFace",
    "RunnerFace",
    "WatchdogFace",
    "WorkerHost",
]
