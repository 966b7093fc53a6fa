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
    from ratchet.config import RatchetConfig
    from ratchet.events import JobEvent
    from ratchet.ports import BeanResolver, ClassPolicy, ResilienceStrategy
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


@hookspec
def ratchet_job_event(event: JobEvent) -> None:
    """Observe a job lifecycle event (started, completed, failed, retrying, ...).

    :param event: a :class:`~ratchet.events.JobEvent`; its ``kind`` says what happened.

    Called after the transaction that caused the event committed, on the thread that wrote it,
    one plugin at a time: an exception raised here is logged and never changes the job, nor keeps
    the event from the other observers.
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
