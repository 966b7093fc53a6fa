"""Pluggy makes every hook call: its monitoring and tracing see them, and wrappers either run
(provider hooks) or are refused (hooks called one plugin at a time)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
import sample_jobs
from procs import wait_for

from ratchet import EventKind, JobEvent, Ratchet, hookimpl
from ratchet.config import RatchetConfig
from ratchet.domain.errors import ConfigurationError
from ratchet.plugins import PER_PLUGIN_HOOKS, Plugins, make_plugin_manager
from ratchet.ports import ClassPolicy
from ratchet.registry import StoreRegistry

REGISTRY_HOOKS = {
    "ratchet_register_stores": "stores",
    "ratchet_register_coordinators": "coordinators",
    "ratchet_register_executor_providers": "executor_providers",
}
PROVIDER_HOOKS = (
    "ratchet_class_policy",
    "ratchet_bean_resolver",
    "ratchet_resilience_strategy",
    "ratchet_job_tracer",
    "ratchet_authorization_policy",
    "ratchet_key_provider",
    "ratchet_node_name",
)
#: The worker lifecycle: ``starting`` is one call through pm.hook (its first error stops the
#: start), the others are called one plugin at a time.
LIFECYCLE_HOOKS = (
    "ratchet_worker_starting",
    "ratchet_worker_started",
    "ratchet_worker_stopping",
    "ratchet_worker_stopped",
)
OBSERVER_HOOKS = ("ratchet_job_event", "ratchet_metrics_observed", "ratchet_metrics_sampled")
#: Called for each piece of text to transform (first non-None answer wins).
TEXT_HOOKS = ("ratchet_sanitize_error",)


def hook_names() -> set[str]:
    pm = make_plugin_manager(load_entrypoints=False)
    return {name for name in dir(pm.hook) if name.startswith("ratchet_")}


def test_the_hook_kinds_cover_every_hook() -> None:
    assert {
        *REGISTRY_HOOKS,
        *PROVIDER_HOOKS,
        *LIFECYCLE_HOOKS,
        *OBSERVER_HOOKS,
        *TEXT_HOOKS,
    } == hook_names()
    assert set(PER_PLUGIN_HOOKS) == {*REGISTRY_HOOKS, *OBSERVER_HOOKS, *LIFECYCLE_HOOKS[1:]}


def event(kind: EventKind = EventKind.STARTED) -> JobEvent:
    return JobEvent(kind, uuid.uuid4(), datetime.now(UTC))


class Observer:
    def __init__(self) -> None:
        self.events: list[JobEvent] = []

    @hookimpl
    def ratchet_job_event(self, event: JobEvent) -> None:
        self.events.append(event)


class MetricsObserver:
    def __init__(self) -> None:
        self.samples: list[object] = []

    @hookimpl
    def ratchet_metrics_observed(self, measurements: Any) -> None:
        pass

    @hookimpl
    def ratchet_metrics_sampled(self, sample: Any) -> None:
        self.samples.append(sample)


class Call:
    """One hook call as pluggy's monitoring saw it."""

    def __init__(self, name: str, impls: list[Any], kwargs: dict[str, Any]) -> None:
        self.name = name
        self.plugins = {impl.plugin_name for impl in impls}
        self.kwargs = dict(kwargs)


class Lifecycle:
    """Implements the per-plugin lifecycle hooks (a hook nobody implements is not called)."""

    @hookimpl
    def ratchet_worker_started(self, worker: Any) -> None:
        pass

    @hookimpl
    def ratchet_worker_stopping(self, worker: Any) -> None:
        pass

    @hookimpl
    def ratchet_worker_stopped(self, worker: Any) -> None:
        pass


def test_hookcall_monitoring_sees_every_hook_call(sqlite_url: str) -> None:
    observer, metrics = Observer(), MetricsObserver()
    pm = make_plugin_manager(load_entrypoints=False, extra=[observer, metrics, Lifecycle()])
    calls: list[Call] = []
    results: list[tuple[str, object]] = []

    def before(name: str, impls: list[Any], kwargs: dict[str, Any]) -> None:
        calls.append(Call(name, impls, kwargs))

    def after(outcome: Any, name: str, impls: list[Any], kwargs: dict[str, Any]) -> None:
        results.append((name, outcome.get_result()))

    pm.add_hookcall_monitoring(before, after)
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], plugins=Plugins(pm))
    worker = app.worker(concurrency=2)
    worker.start()
    try:
        handle = app.enqueue(sample_jobs.record, 3).submit()
        failing = app.enqueue(sample_jobs.fail_always, "x").with_max_retries(0).submit()
        assert wait_for(lambda: handle.status().value == "SUCCEEDED", timeout=30)
        assert wait_for(lambda: failing.status().value == "FAILED", timeout=30)
        assert wait_for(lambda: bool(metrics.samples), timeout=30), "sampled once at start"
    finally:
        worker.stop()
        app.close()

    assert {c.name for c in calls} == hook_names(), "every hook went through pluggy"
    for name in REGISTRY_HOOKS:  # one call per implementing plugin, each seeing only its own
        made = [c for c in calls if c.name == name]
        implementers = {i.plugin_name for i in getattr(pm.hook, name).get_hookimpls()}
        assert all(len(c.plugins) == 1 for c in made)
        assert sorted(p for c in made for p in c.plugins) == sorted(implementers)
    for name in PROVIDER_HOOKS:  # one call through pm.hook, with the app's typed config
        [made] = [c for c in calls if c.name == name]
        assert made.kwargs == {"config": app.config}
    assert ("ratchet_class_policy", app.class_policy) in results
    sanitized = [c.kwargs for c in calls if c.name == "ratchet_sanitize_error"]
    assert [k["kind"] for k in sanitized] == ["message", "traceback"], "once each per failure"
    assert all(k["config"] is app.config for k in sanitized)
    traced = [c.kwargs["event"] for c in calls if c.name == "ratchet_job_event"]
    # (threads may interleave between the monitor and the observer: compare as multisets)
    assert sorted(map(id, traced)) == sorted(map(id, observer.events)), (
        "each delivered event was one monitored hook call"
    )
    kinds = [e.kind for e in traced if e.job_id == handle.id]
    assert kinds == [EventKind.SUBMITTED, EventKind.STARTED, EventKind.COMPLETED]


def test_pluggy_tracing_writes_the_calls() -> None:
    lines: list[str] = []
    pm = make_plugin_manager(load_entrypoints=False, extra=[Observer()])
    pm.trace.root.setwriter(lines.append)
    pm.enable_tracing()
    plugins = Plugins(pm)
    _ = plugins.stores
    plugins.emit(event())
    text = "".join(lines)
    assert "ratchet_register_stores" in text and "ratchet_job_event" in text


def test_observer_calls_follow_registration_changes() -> None:
    pm = make_plugin_manager(load_entrypoints=False)
    plugins = Plugins(pm)
    plugins.emit(event())  # nobody listens yet
    first, second = Observer(), Observer()
    pm.register(first)
    plugins.emit(event(EventKind.SUBMITTED))
    pm.register(second)
    plugins.emit(event(EventKind.STARTED))
    pm.unregister(first)
    plugins.emit(event(EventKind.COMPLETED))
    assert [e.kind for e in first.events] == [EventKind.SUBMITTED, EventKind.STARTED]
    assert [e.kind for e in second.events] == [EventKind.STARTED, EventKind.COMPLETED]


def test_observers_are_called_in_pluggys_order() -> None:
    order: list[str] = []

    def observer(label: str, **opts: bool) -> object:
        def ratchet_job_event(self: object, event: JobEvent) -> None:
            order.append(label)

        return type(label, (), {"ratchet_job_event": hookimpl(**opts)(ratchet_job_event)})()

    pm = make_plugin_manager(
        load_entrypoints=False,
        extra=[observer("first"), observer("early", tryfirst=True), observer("last")],
    )
    Plugins(pm).emit(event())
    assert order == ["early", "last", "first"]


def test_an_implementation_under_another_name_is_called_once_per_call() -> None:
    class Aliased:
        def __init__(self) -> None:
            self.events: list[JobEvent] = []

        @hookimpl(specname="ratchet_job_event")
        def on_event(self, event: JobEvent) -> None:
            self.events.append(event)

        @hookimpl(specname="ratchet_register_stores")
        def add_stores(self, registry: StoreRegistry) -> None:
            registry.add("aliased", lambda url, options: None)

    aliased, observer = Aliased(), Observer()
    plugins = Plugins(make_plugin_manager(load_entrypoints=False, extra=[aliased, observer]))
    assert "aliased" in plugins.stores, "registered once (twice would be a duplicate)"
    plugins.emit(event())
    assert len(aliased.events) == len(observer.events) == 1


@dataclass
class DataObserver:  # eq=True: instances cannot be hashed
    events: list[JobEvent] = field(default_factory=list)

    @hookimpl
    def ratchet_job_event(self, event: JobEvent) -> None:
        self.events.append(event)


def test_an_observer_that_cannot_be_hashed_is_refused() -> None:
    pm = make_plugin_manager(load_entrypoints=False, extra=[DataObserver()])
    with pytest.raises(ConfigurationError, match=r"\.DataObserver\) implements ratchet_job_event"):
        Plugins(pm)

    @dataclass(eq=False)  # hashed by identity
    class Hashable:
        events: list[JobEvent] = field(default_factory=list)

        @hookimpl
        def ratchet_job_event(self, event: JobEvent) -> None:
            self.events.append(event)

    observer = Hashable()
    Plugins(make_plugin_manager(load_entrypoints=False, extra=[observer, Observer()])).emit(event())
    assert len(observer.events) == 1


def test_an_unhashable_observer_registered_later_breaks_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pm = make_plugin_manager(load_entrypoints=False)
    plugins = Plugins(pm)
    plain, late = Observer(), DataObserver()
    pm.register(plain)
    pm.register(late)
    with caplog.at_level(logging.ERROR, logger="ratchet.plugins"):
        plugins.emit(event())  # neither raises nor delivers
        plugins.emit(event())
    [refusal] = [r.getMessage() for r in caplog.records]
    assert "cannot be hashed" in refusal and refusal.endswith("until it is unregistered")
    assert plain.events == late.events == []
    pm.unregister(late)
    plugins.emit(event())
    assert len(plain.events) == 1


# -- wrappers ------------------------------------------------------------------------------


def wrapper_plugin(hook: str, style: str) -> object:
    """A plugin whose only implementation of ``hook`` is a wrapper of the given style."""
    impl: Callable[..., Generator[None, Any, Any]]
    if hook == "ratchet_job_event":  # pluggy passes the arguments the implementation names

        def impl(self: object, event: JobEvent) -> Generator[None, Any, Any]:
            return (yield)

    elif hook.startswith("ratchet_worker_"):

        def impl(self: object, worker: Any) -> Generator[None, Any, Any]:
            return (yield)

    elif hook == "ratchet_metrics_observed":

        def impl(self: object, measurements: Any) -> Generator[None, Any, Any]:
            return (yield)

    elif hook == "ratchet_metrics_sampled":

        def impl(self: object, sample: Any) -> Generator[None, Any, Any]:
            return (yield)

    else:

        def impl(self: object, registry: Any) -> Generator[None, Any, Any]:
            return (yield)

    return type("Wrapping", (), {hook: hookimpl(**{style: True})(impl)})()


@pytest.mark.parametrize("style", ["wrapper", "hookwrapper"])
@pytest.mark.parametrize("hook", PER_PLUGIN_HOOKS)
def test_a_wrapper_of_a_per_plugin_hook_is_refused(hook: str, style: str) -> None:
    pm = make_plugin_manager(load_entrypoints=False, extra=[wrapper_plugin(hook, style)])
    with pytest.raises(ConfigurationError) as err:
        Plugins(pm)
    message = str(err.value)
    assert f"implements {hook} with @hookimpl({style}=True)" in message
    assert ".Wrapping)" in message, "the message names the plugin"


def test_a_wrapper_observer_registered_later_gets_nothing_and_breaks_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pm = make_plugin_manager(load_entrypoints=False)
    plugins = Plugins(pm)
    plain = Observer()
    pm.register(plain)
    pm.register(wrapper_plugin("ratchet_job_event", "wrapper"))
    with caplog.at_level(logging.ERROR, logger="ratchet.plugins"):
        plugins.emit(event())
        plugins.emit(event())
    assert len(plain.events) == 2, "the plain observer still gets every event"
    [refusal] = [r.getMessage() for r in caplog.records]
    assert "implements ratchet_job_event with @hookimpl(wrapper=True)" in refusal
    assert refusal.endswith("it gets no events")


def test_a_registry_wrapper_registered_later_is_refused_when_the_registry_is_built() -> None:
    pm = make_plugin_manager(load_entrypoints=False)
    plugins = Plugins(pm)
    pm.register(wrapper_plugin("ratchet_register_stores", "hookwrapper"))
    with pytest.raises(ConfigurationError, match="ratchet_register_stores with @hookimpl"):
        _ = plugins.stores


def test_a_wrapper_of_a_provider_hook_runs(sqlite_url: str) -> None:
    seen: list[tuple[RatchetConfig, ClassPolicy | None]] = []

    class Audit:
        @hookimpl(wrapper=True)
        def ratchet_class_policy(
            self, config: RatchetConfig
        ) -> Generator[None, ClassPolicy | None, ClassPolicy | None]:
            policy = yield
            seen.append((config, policy))
            return policy

    app = Ratchet(
        sqlite_url,
        allowed_modules=["sample_jobs"],
        plugins=Plugins(make_plugin_manager(load_entrypoints=False, extra=[Audit()])),
    )
    try:
        assert seen == [(app.config, app.class_policy)]
    finally:
        app.close()
