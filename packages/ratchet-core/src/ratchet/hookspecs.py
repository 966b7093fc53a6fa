"""Every pluggy hook of Ratchet. Plugins implement them with ``@ratchet.hookimpl``.

Three kinds (see ``docs/hooks.md``): registry hooks add named backends, provider hooks return
the single active service (first non-None answer wins), observer hooks are told what happened.
Pluggy calls every hook (so ``pm.add_hookcall_monitoring`` and ``pm.trace`` see each call);
registry and observer hooks are called one plugin at a time and refuse wrapper implementations
(see :class:`ratchet.plugins.Plugins`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ratchet.config import RatchetConfig
    from ratchet.engine.worker import Worker
    from ratchet.events import JobEvent
    from ratchet.metrics import Measurement, MetricsSample
    from ratchet.ports import (
        BeanResolver,
        ClassPolicy,
        JobAuthorizationPolicy,
        KeyProvider,
        ResilienceStrategy,
        Tracer,
    )
    from ratchet.registry import CoordinatorRegistry, ExecutorRegistry, StoreRegistry

hookspec = pluggy.HookspecMarker("ratchet")


@hookspec
def ratchet_register_stores(registry: StoreRegistry) -> None:
    """Register store factories by URL scheme.

    :param registry: call ``registry.add(scheme, factory)``; ``factory(url, options)`` (a
        :class:`~ratchet.ports.StoreFactory`) returns a :class:`~ratchet.ports.Store`. The scheme is the SQLAlchemy drivername before ``+``
        (``sqlite``, ``postgresql``, ``mysql``).

    Called once per plugin manager, when the registry is first needed.
    """


@hookspec
def ratchet_register_coordinators(registry: CoordinatorRegistry) -> None:
    """Register cluster coordinator factories by name or URL scheme.

    :param registry: call ``registry.add(name, factory)``; ``factory(spec, context)`` (a
        :class:`~ratchet.ports.CoordinatorFactory`, ``context`` a
        :class:`~ratchet.ports.CoordinatorContext`) returns a
        :class:`~ratchet.ports.ClusterCoordinator`.

    Called once per plugin manager.
    """


@hookspec
def ratchet_register_executor_providers(registry: ExecutorRegistry) -> None:
    """Register executor providers by name (``threads``, ``asyncio``, ``processes``...).

    :param registry: call ``registry.add(name, factory)``; ``factory(max_workers)`` (an
        :class:`~ratchet.ports.ExecutorFactory`) returns an
        :class:`~ratchet.ports.ExecutorProvider`.

    Called once per plugin manager.
    """


@hookspec(firstresult=True)
def ratchet_class_policy(config: RatchetConfig) -> ClassPolicy | None:
    """Return the class policy that decides which job targets are allowed.

    Stops at first non-None result.

    :param config: the :class:`~ratchet.config.RatchetConfig` of the app.
    :returns: a :class:`~ratchet.ports.ClassPolicy`, or None to let another plugin answer.

    Called once when the app is created.
    """


@hookspec(firstresult=True)
def ratchet_bean_resolver(config: RatchetConfig) -> BeanResolver | None:
    """Return the resolver that supplies instances for method jobs.

    Stops at first non-None result.

    :param config: the :class:`~ratchet.config.RatchetConfig` of the app.
    :returns: a :class:`~ratchet.ports.BeanResolver`, or None.

    Called once when the app is created.
    """


@hookspec(firstresult=True)
def ratchet_resilience_strategy(config: RatchetConfig) -> ResilienceStrategy | None:
    """Return the strategy (circuit breakers) that guards job execution.

    Stops at first non-None result.

    :param config: the :class:`~ratchet.config.RatchetConfig` of the app.
    :returns: a :class:`~ratchet.ports.ResilienceStrategy`, or None.

    Called once when the app is created.
    """


@hookspec(firstresult=True)
def ratchet_job_tracer(config: RatchetConfig) -> Tracer | None:
    """Return the tracer that makes spans for submissions and attempts.

    Stops at first non-None result.

    :param config: the :class:`~ratchet.config.RatchetConfig` of the app.
    :returns: a :class:`~ratchet.ports.Tracer` when ``config.tracing`` names this plugin's, else
        None (no tracing: the default, which costs nothing). The built-in
        ``ratchet.exporters.otel`` answers when ``config.tracing`` is ``"otel"``.

    Called once when the app is created (and by ``Ratchet.enable_tracing``).
    """


@hookspec
def ratchet_job_event(event: JobEvent) -> None:
    """Observe a job lifecycle event (started, completed, failed, retrying, ...).

    :param event: a :class:`~ratchet.events.JobEvent`; its ``kind`` says what happened.

    Called after the transaction that caused the event committed, on the thread that wrote it,
    one plugin at a time: an exception raised here is logged and never changes the job, nor keeps
    the event from the other observers.
    """


# -- security (docs/security.md) ------------------------------------------------------------------
@hookspec(firstresult=True)
def ratchet_authorization_policy(config: RatchetConfig) -> JobAuthorizationPolicy | None:
    """Return the policy that decides which principal may create, execute, cancel, pause,
    resume, retry, signal and read which jobs, and narrows listings per principal.

    Stops at first non-None result.

    :param config: the :class:`~ratchet.config.RatchetConfig` of the app.
    :returns: a :class:`~ratchet.ports.JobAuthorizationPolicy`, or None (the built-in answers
        :class:`~ratchet.domain.authorization.PermitAll` last).

    Called once when the app is created (an ``authorization=`` argument of the app wins).
    """


@hookspec(firstresult=True)
def ratchet_key_provider(config: RatchetConfig) -> KeyProvider | None:
    """Return the provider of the AES-256 keys that seal job arguments and results at rest.

    Stops at first non-None result.

    :param config: the :class:`~ratchet.config.RatchetConfig` of the app.
    :returns: a :class:`~ratchet.ports.KeyProvider`, or None: the built-in one answers from
        ``RATCHET_ENCRYPTION_KEYS`` when it is set; no answer at all means no encryption.

    Called once when the app is created (a ``key_provider=`` argument of the app wins).
    """


# -- node identity and worker lifecycle (docs/hooks.md) -----------------------------------------
@hookspec(firstresult=True)
def ratchet_node_name(config: RatchetConfig) -> str | None:
    """Return this process's stable node name (e.g. a Kubernetes StatefulSet pod's
    ``HOSTNAME``), under which its incarnations are registered and recognised after a restart.

    Stops at first non-None result.

    :param config: the :class:`~ratchet.config.RatchetConfig` of the app.
    :returns: 1 to 60 characters, or None for the default (the host name).

    Called once when the app is created, only when no ``node_name`` was configured.
    """


@hookspec
def ratchet_worker_starting(worker: Worker) -> None:
    """A worker is about to start: nothing is registered or claimed yet (run migrations, warm
    caches, check dependencies here).

    :param worker: the :class:`~ratchet.engine.worker.Worker`.

    If an implementation raises, the worker does not start: ``start()`` raises
    :class:`~ratchet.domain.errors.LifecycleHookError` (the cause attached), the node is not
    registered, and no stop hooks run. Implementations later in the call order are not called.
    """


@hookspec
def ratchet_worker_started(worker: Worker) -> None:
    """A worker registered its node and started polling.

    :param worker: the :class:`~ratchet.engine.worker.Worker`.

    Called one plugin at a time; an exception is logged and the worker keeps running.
    """


@hookspec
def ratchet_worker_stopping(worker: Worker) -> None:
    """A worker is about to drain (it still holds its running jobs).

    :param worker: the :class:`~ratchet.engine.worker.Worker`.

    Called one plugin at a time; an exception is logged and the drain goes on.
    """


@hookspec
def ratchet_metrics_observed(measurements: Sequence[Measurement]) -> None:
    """Observe counter increments and histogram observations of a worker's parts.

    :param measurements: :class:`~ratchet.metrics.Measurement` values, one batch per poll or
        per outcome write; each names its :class:`~ratchet.metrics.Metric` (from
        :data:`ratchet.metrics.CATALOGUE`), its label values and the amount or observation.

    Called on the poller and writer threads, one plugin at a time; an exception raised here is
    logged. Nothing is measured while no plugin implements this hook.
    """


@hookspec
def ratchet_worker_stopped(worker: Worker) -> None:
    """A worker drained, handed its jobs back and deregistered its node.

    :param worker: the :class:`~ratchet.engine.worker.Worker`.

    Called one plugin at a time; an exception is logged.
    """


@hookspec
def ratchet_metrics_sampled(sample: MetricsSample) -> None:
    """Observe a worker's sampled gauges and running totals.

    :param sample: a :class:`~ratchet.metrics.MetricsSample`: this worker's own values, and the
        cluster-wide gauges when this worker holds the sampling lease (else ``cluster`` is None).

    Called every ``WorkerConfig.metrics_interval`` on the maintenance thread, one plugin at a
    time; an exception raised here is logged. A worker none of whose plugins implements this hook
    samples nothing and never takes the lease.
    """


@hookspec(firstresult=True)
def ratchet_sanitize_error(text: str, kind: str, config: RatchetConfig) -> str | None:
    """Return ``text`` with its secrets removed, before it is stored, emitted or logged.

    Stops at first non-None result.

    :param text: an error description (``module.Class: message``) or a traceback.
    :param kind: ``"message"`` or ``"traceback"``.
    :param config: the :class:`~ratchet.config.RatchetConfig` of the app (the built-in
        implementation reads its ``sanitize_*`` settings).
    :returns: the text to keep, or None to let the next plugin answer. The built-in
        implementation (``trylast``) redacts credentials in URLs, secret ``key=value`` pairs and
        e-mail addresses, keeps the exception class and bounds the length
        (:func:`ratchet.domain.sanitize.sanitize_text`); a plugin may call that function and
        redact more.

    Called by the worker for every failed attempt's error and traceback, once each.
    """
