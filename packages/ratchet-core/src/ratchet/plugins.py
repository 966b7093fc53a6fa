"""The plugin manager factory and the typed facade the engine uses (no global manager)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import pluggy

from ratchet import hookspecs
from ratchet.domain.errors import (
    ConfigurationError,
    MissingClassPolicy,
    UnknownPluginError,
    UnknownStoreError,
)
from ratchet.events import JobEvent
from ratchet.ports import (
    BeanResolver,
    ClassPolicy,
    CoordinatorFactory,
    ExecutorFactory,
    JobAuthorizationPolicy,
    KeyProvider,
    ResilienceStrategy,
    StoreFactory,
    Tracer,
)
from ratchet.registry import CoordinatorRegistry, ExecutorRegistry, Registry, StoreRegistry

if TYPE_CHECKING:
    from ratchet.config import RatchetConfig

log = logging.getLogger("ratchet.plugins")

ENTRY_POINT_GROUP = "ratchet"
DISABLE_ENV = "RATCHET_DISABLE_PLUGINS"

#: Built-in plugins, registered first so that installed plugins (called LIFO) override them.
DEFAULT_PLUGINS = (
    "ratchet.adapters.sqlite",
    "ratchet.adapters.local_coordinator",
    "ratchet.adapters.threads",
    "ratchet.adapters.asyncio_loop",
    "ratchet.adapters.processes",
    "ratchet.adapters.class_policy",
    "ratchet.adapters.beans",
    "ratchet.adapters.resilience",
    "ratchet.exporters.otel",
    "ratchet.adapters.security",
    "ratchet.adapters.sanitizer",
)

#: Hooks called one plugin at a time: the registry hooks, so that each registration is recorded
#: under the plugin that made it, and the observer hook, so that an observer that raises keeps
#: the event from no other observer. A wrapper implementation cannot wrap such calls, so these
#: hooks refuse it (``ConfigurationError``) instead of never running it.
PER_PLUGIN_HOOKS = (
    "ratchet_register_stores",
    "ratchet_register_coordinators",
    "ratchet_register_executor_providers",
    "ratchet_job_event",
    "ratchet_worker_started",
    "ratchet_worker_stopping",
    "ratchet_worker_stopped",
    "ratchet_metrics_observed",
    "ratchet_metrics_sampled",
)


#: What each observer hook delivers, for log messages.
_WHAT = {
    "ratchet_job_event": "events",
    "ratchet_metrics_observed": "measurements",
    "ratchet_metrics_sampled": "samples",
}


def make_plugin_manager(
    *, load_entrypoints: bool = True, extra: Iterable[object] = ()
) -> pluggy.PluginManager:
    """A fresh manager: hookspecs, built-ins, the ``ratchet`` entry points, then ``extra``.

    Plugins named in ``RATCHET_DISABLE_PLUGINS`` (comma-separated) are blocked.
    """
    import importlib

    pm = pluggy.PluginManager("ratchet")
    pm.add_hookspecs(hookspecs)
    for name in filter(None, (n.strip() for n in os.environ.get(DISABLE_ENV, "").split(","))):
        pm.set_blocked(name)
    for module_name in DEFAULT_PLUGINS:
        pm.register(importlib.import_module(module_name), name=module_name)
    if load_entrypoints:
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    for plugin in extra:
        pm.register(plugin)
    pm.check_pending()
    return pm


@dataclass(frozen=True)
class PluginInfo:
    """One registered plugin, for ``ratchet plugins``."""

    name: str
    hooks: tuple[str, ...]
    distribution: str | None


R = TypeVar("R", bound=Registry[Any])


class Plugins:
    """Typed access to what the plugins supply.

    Pluggy makes every hook call, so ``pm.add_hookcall_monitoring`` and ``pm.trace`` see them
    all. Provider hooks are one ``pm.hook`` call each (wrappers welcome). The hooks in
    :data:`PER_PLUGIN_HOOKS` are called through ``pm.subset_hook_caller`` once per plugin that
    implements them, in pluggy's order (``tryfirst`` first, then the last registered first).

    :raises ConfigurationError: a plugin implements one of :data:`PER_PLUGIN_HOOKS` as a wrapper,
        or implements one and cannot be hashed (``subset_hook_caller`` keeps plugins in a set).
    """

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        for name in PER_PLUGIN_HOOKS:
            impls = getattr(pm.hook, name).get_hookimpls()
            _refuse_wrappers(name, impls)
            _refuse_unhashable(name, impls)
        self._observers: dict[str, tuple[list[pluggy.HookImpl], list[_PluginCall]]] = {}

    def _per_plugin(self, hook_name: str, impls: Sequence[pluggy.HookImpl]) -> list[_PluginCall]:
        """A caller of ``hook_name`` for each plugin with a plain implementation in ``impls``
        (the hook's implementations now), in pluggy's call order.

        :raises ConfigurationError: a plugin of ``impls`` cannot be hashed.
        """
        _refuse_unhashable(hook_name, impls)
        firsts: list[pluggy.HookImpl] = []  # each plugin's first plain implementation
        for impl in reversed(impls):
            if not _is_wrapper(impl) and all(impl.plugin is not f.plugin for f in firsts):
                firsts.append(impl)
        calls = []
        for impl in firsts:
            others = [other.plugin for other in impls if other.plugin is not impl.plugin]
            calls.append(_PluginCall(_label(impl), self.pm.subset_hook_caller(hook_name, others)))
        return calls

    def _registry(self, hook_name: str, registry: R) -> R:
        impls = getattr(self.pm.hook, hook_name).get_hookimpls()
        _refuse_wrappers(hook_name, impls)
        for owner, call in self._per_plugin(hook_name, impls):
            call(registry=registry.owned_by(owner))
        return registry

    @cached_property
    def stores(self) -> StoreRegistry:
        return self._registry("ratchet_register_stores", StoreRegistry())

    @cached_property
    def coordinators(self) -> CoordinatorRegistry:
        return self._registry("ratchet_register_coordinators", CoordinatorRegistry())

    @cached_property
    def executor_providers(self) -> ExecutorRegistry:
        return self._registry("ratchet_register_executor_providers", ExecutorRegistry())

    def store_factory(self, url: str) -> StoreFactory:
        """The store factory for a SQLAlchemy URL.

        :raises UnknownStoreError: no plugin serves the scheme.
        """
        scheme = url.split(":", 1)[0].split("+", 1)[0].lower()
        if "://" not in url or not scheme:
            raise UnknownStoreError(
                f"{url!r} is not a database URL; expected e.g. sqlite:///jobs.db or "
                "postgresql+psycopg://user@host/db"
            )
        try:
            return self.stores[scheme]
        except KeyError:
            known = ", ".join(self.stores) or "none"
            hint = {"postgresql": "ratchet-postgres", "mysql": "ratchet-mysql"}.get(scheme)
            extra = f" Install it with: pip install {hint}" if hint else ""
            raise UnknownStoreError(
                f"no installed plugin provides a store for {scheme!r} URLs (installed: {known}).{extra}"
            ) from None

    def coordinator_factory(self, spec: str) -> CoordinatorFactory:
        """The coordinator factory for a name (``local``) or URL (``redis://...``)."""
        key = spec.split("://", 1)[0] if "://" in spec else spec
        try:
            return self.coordinators[key]
        except KeyError:
            known = ", ".join(self.coordinators) or "none"
            raise UnknownPluginError(
                f"no installed plugin provides a coordinator {key!r} (installed: {known})"
            ) from None

    def executor_factory(self, name: str) -> ExecutorFactory:
        try:
            return self.executor_providers[name]
        except KeyError:
            known = ", ".join(self.executor_providers) or "none"
            raise UnknownPluginError(
                f"no installed plugin provides an executor {name!r} (installed: {known})"
            ) from None

    def class_policy(self, config: RatchetConfig) -> ClassPolicy:
        """The winning class policy.

        :raises MissingClassPolicy: no plugin answered (the built-in answers only when configured).
        """
        policy: ClassPolicy | None = self.pm.hook.ratchet_class_policy(config=config)
        if policy is None:
            raise MissingClassPolicy(
                "no class policy is configured, so every job would be refused. Pass "
                "allowed_modules=['myapp'] to Ratchet(...) (module prefixes whose functions may "
                "run as jobs), install a class-policy plugin, or pass "
                "allow_empty_class_policy=True to start anyway and refuse every job."
            )
        return policy

    def bean_resolver(self, config: RatchetConfig) -> BeanResolver:
        """The winning bean resolver.

        :raises ConfigurationError: no plugin answered (the built-in one was disabled).
        """
        resolver: BeanResolver | None = self.pm.hook.ratchet_bean_resolver(config=config)
        if resolver is None:
            raise ConfigurationError("no plugin supplies a bean resolver (ratchet_bean_resolver)")
        return resolver

    def resilience_strategy(self, config: RatchetConfig) -> ResilienceStrategy:
        """The winning resilience strategy.

        :raises ConfigurationError: no plugin answered (the built-in one was disabled).
        """
        strategy: ResilienceStrategy | None = self.pm.hook.ratchet_resilience_strategy(
            config=config
        )
        if strategy is None:
            raise ConfigurationError(
                "no plugin supplies a resilience strategy (ratchet_resilience_strategy)"
            )
        return strategy

    def tracer(self, config: RatchetConfig) -> Tracer | None:
        """The winning tracer: the one ``config.tracing`` names (None: tracing is off).

        :raises ConfigurationError: tracing is asked for and no plugin supplies that tracer.
        """
        tracer: Tracer | None = self.pm.hook.ratchet_job_tracer(config=config)
        if tracer is None and config.tracing is not None:
            raise ConfigurationError(
                f"tracing={config.tracing!r}, but no plugin supplies that tracer "
                "(ratchet_job_tracer); use tracing='otel' for OpenTelemetry, or None"
            )
        return tracer

    def authorization_policy(self, config: RatchetConfig) -> JobAuthorizationPolicy:
        """The winning authorization policy.

        :raises ConfigurationError: no plugin answered (the built-in one was disabled).
        """
        policy: JobAuthorizationPolicy | None = self.pm.hook.ratchet_authorization_policy(
            config=config
        )
        if policy is not None:
            return policy
        raise ConfigurationError(
            "no plugin supplies an authorization policy (ratchet_authorization_policy)"
        )

    def key_provider(self, config: RatchetConfig) -> KeyProvider | None:
        """The winning key provider (None: payloads are stored unencrypted)."""
        provider: KeyProvider | None = self.pm.hook.ratchet_key_provider(config=config)
        return provider

    def node_name(self, config: RatchetConfig) -> str | None:
        """The node name a plugin gives (None: none does)."""
        name: str | None = self.pm.hook.ratchet_node_name(config=config)
        return name

    def worker_starting(self, worker: Any) -> None:
        """Call every ``ratchet_worker_starting`` implementation; the first error propagates."""
        self.pm.hook.ratchet_worker_starting(worker=worker)

    def notify_worker(self, hook_name: str, worker: Any) -> None:
        """Call a worker lifecycle hook (started, stopping, stopped) one plugin at a time; a
        plugin's error is logged and the other plugins are still called."""
        impls = getattr(self.pm.hook, hook_name).get_hookimpls()
        try:
            calls = self._per_plugin(hook_name, impls)
        except ConfigurationError as exc:
            log.error("%s; %s is not called", exc, hook_name)
            return
        for owner, call in calls:
            try:
                call(worker=worker)
            except Exception:
                log.exception("plugin %s failed in %s", owner, hook_name)

    def has_observers(self, hook_name: str = "ratchet_job_event") -> bool:
        """Whether any plugin implements the observer hook ``hook_name`` now (so building what
        it would be told is worth it)."""
        return bool(getattr(self.pm.hook, hook_name).get_hookimpls())

    def sanitize_error(self, text: str, kind: str, config: RatchetConfig) -> str:
        """``text`` (an error ``"message"`` or a ``"traceback"``) as the winning sanitiser
        returns it; unchanged if no plugin answers (the built-in one was disabled)."""
        cleaned: str | None = self.pm.hook.ratchet_sanitize_error(
            text=text, kind=kind, config=config
        )
        return text if cleaned is None else cleaned

    def emit(self, event: JobEvent) -> None:
        """Deliver an event to every observer plugin, one plugin at a time; an observer's error
        is logged, not raised, and the other observers still get the event."""
        self.notify("ratchet_job_event", event=event)

    def notify(self, hook_name: str, **kwargs: Any) -> None:
        """Call the observer hook ``hook_name`` (one of :data:`PER_PLUGIN_HOOKS`) with
        ``kwargs`` on every plugin, one at a time; a plugin's error is logged, not raised."""
        for owner, call in self._observer_calls(hook_name):
            try:
                call(**kwargs)
            except Exception:
                log.exception("observer plugin %s failed on %s", owner, hook_name)

    def _observer_calls(self, hook_name: str) -> list[_PluginCall]:
        """The per-plugin callers of an observer hook, rebuilt only when its implementations
        changed (a plugin registered or unregistered since the last call)."""
        impls = getattr(self.pm.hook, hook_name).get_hookimpls()
        known, calls = self._observers.get(hook_name, ([], []))
        if impls != known or hook_name not in self._observers:  # HookImpl compares by identity
            # A plugin refused here was registered after this facade was made; notify never
            # raises.
            try:
                _refuse_wrappers(hook_name, impls)
            except ConfigurationError as exc:
                log.error("%s; it gets no %s", exc, _WHAT.get(hook_name, "calls"))
            try:
                calls = self._per_plugin(hook_name, impls)
            except ConfigurationError as exc:
                log.error(
                    "%s; no observer gets %s until it is unregistered",
                    exc,
                    _WHAT.get(hook_name, "calls"),
                )
                calls = []
            self._observers[hook_name] = (impls, calls)
        return calls

    def describe(self) -> list[PluginInfo]:
        """Every registered plugin with the hooks it implements."""
        dists = {id(plugin): dist.project_name for plugin, dist in self.pm.list_plugin_distinfo()}
        infos = []
        for name, plugin in self.pm.list_name_plugin():
            if plugin is None:
                continue
            hooks = tuple(sorted(h.name for h in self.pm.get_hookcallers(plugin) or ()))
            infos.append(PluginInfo(str(name), hooks, dists.get(id(plugin))))
        return infos


class _PluginCall(NamedTuple):
    """A hook caller restricted to one plugin, and that plugin's name for messages."""

    owner: str
    call: pluggy.HookCaller


def _is_wrapper(impl: pluggy.HookImpl) -> bool:
    return bool(impl.wrapper or impl.hookwrapper)


def _refuse_wrappers(hook_name: str, impls: Iterable[pluggy.HookImpl]) -> None:
    """:raises ConfigurationError: one of ``impls`` is a wrapper (see :data:`PER_PLUGIN_HOOKS`)."""
    for impl in impls:
        if _is_wrapper(impl):
            style = "wrapper=True" if impl.wrapper else "hookwrapper=True"
            raise ConfigurationError(
                f"plugin {_label(impl)} implements {hook_name} with @hookimpl({style}), but "
                f"Ratchet calls {hook_name} one plugin at a time, so a wrapper could not wrap "
                "the other plugins' implementations: implement it without wrapper/hookwrapper"
            )


def _refuse_unhashable(hook_name: str, impls: Iterable[pluggy.HookImpl]) -> None:
    """:raises ConfigurationError: the plugin of one of ``impls`` cannot be hashed."""
    for impl in impls:
        try:
            hash(impl.plugin)
        except TypeError:
            raise ConfigurationError(
                f"plugin {_label(impl)} implements {hook_name} but cannot be hashed, and Ratchet "
                f"calls {hook_name} one plugin at a time through pluggy's subset_hook_caller, "
                "which keeps plugins in a set: register a module or a class, or an instance whose "
                "class keeps object.__hash__ (for a dataclass, eq=False)"
            ) from None


def _label(impl: pluggy.HookImpl) -> str:
    """The plugin's name for messages; with what the plugin is when pluggy named it after its
    ``id()`` (a plugin registered without a name)."""
    name, plugin = impl.plugin_name, impl.plugin
    if name != str(id(plugin)):
        return name
    if isinstance(plugin, ModuleType):
        return f"{name} (module {plugin.__name__})"
    cls = plugin if isinstance(plugin, type) else type(plugin)
    return f"{name} ({cls.__module__}.{cls.__qualname__})"
