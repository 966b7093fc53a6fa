"""Every hook is documented in docs/hooks.md and exercised here (test_hook_<name>)."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sample_jobs

from ratchet import EventKind, JobEvent, Ratchet, hookimpl, metrics
from ratchet.adapters.class_policy import PackagePrefixClassPolicy
from ratchet.config import RatchetConfig
from ratchet.domain.errors import ConfigurationError, MissingClassPolicy, UnknownStoreError
from ratchet.metrics import Measurement, MetricsSample
from ratchet.plugins import Plugins, make_plugin_manager
from ratchet.ports import CoordinatorContext

DOCS = Path(__file__).resolve().parents[2] / "docs" / "hooks.md"


def hook_names() -> list[str]:
    pm = make_plugin_manager(load_entrypoints=False)
    return sorted(name for name in dir(pm.hook) if name.startswith("ratchet_"))


def test_every_hook_has_a_docs_section() -> None:
    pm = make_plugin_manager(load_entrypoints=False)
    text = DOCS.read_text()
    for name in hook_names():
        caller = getattr(pm.hook, name)
        args = ", ".join(caller.spec.argnames)
        assert re.search(rf"^## {name}\({re.escape(args)}\)$", text, re.M), (
            f"docs/hooks.md lacks {name}({args})"
        )


def test_every_hook_has_a_test() -> None:
    tests = {n for n in dir(sys.modules[__name__]) if n.startswith("test_hook_")}
    missing = [n for n in hook_names() if f"test_hook_{n}" not in tests]
    assert not missing, f"hooks without a test: {missing}"


def test_hook_names_follow_the_convention() -> None:
    assert all(re.fullmatch(r"ratchet_[a-z]+(_[a-z]+)+", n) for n in hook_names())


def make(*plugins: object) -> Plugins:
    return Plugins(make_plugin_manager(load_entrypoints=False, extra=plugins))


def test_hook_ratchet_register_stores(sqlite_url: str) -> None:
    made: list[str] = []

    class Plugin:
        @hookimpl
        def ratchet_register_stores(self, registry: Any) -> None:
            def factory(url: str, options: Any) -> Any:
                made.append(url)
                from ratchet.adapters.sqlite import make_sqlite_store

                return make_sqlite_store(url.replace("memdb", "sqlite"), options)

            registry.add("memdb", factory)

    plugins = make(Plugin())
    assert {"sqlite", "memdb"} <= set(plugins.stores)
    url = sqlite_url.replace("sqlite", "memdb", 1)
    app = Ratchet(url, allowed_modules=["sample_jobs"], plugins=plugins, auto_migrate=True)
    assert made == [url]
    app.close()
    with pytest.raises(
        UnknownStoreError, match="no installed plugin provides a store for 'oracle'"
    ):
        plugins.store_factory("oracle://x/y")
    with pytest.raises(UnknownStoreError, match="pip install ratchet-postgres"):
        make().store_factory("postgresql+psycopg://u@h/d")  # entry points not loaded here
    with pytest.raises(UnknownStoreError, match="not a database URL"):
        plugins.store_factory("jobs.db")


def test_duplicate_registrations_are_refused() -> None:
    class Clash:
        @hookimpl
        def ratchet_register_stores(self, registry: Any) -> None:
            registry.add("sqlite", lambda url, options: None)

    with pytest.raises(ConfigurationError, match="two plugins register the store 'sqlite'") as err:
        _ = make(Clash()).stores
    # each plugin's registrations are its own: the message names both, the unnamed one by class
    assert "ratchet.adapters.sqlite" in str(err.value)
    assert re.search(r"\d+ \(\S+\.Clash\)", str(err.value))


def test_hook_ratchet_register_coordinators(sqlite_url: str) -> None:
    hints: list[Any] = []

    class Recording:
        def __init__(self, spec: str, context: CoordinatorContext) -> None:
            self.spec = spec
            self.context = context

        def notify_new_work(self, hint: Any) -> None:
            hints.append(hint)

        def add_listener(self, listener: Any) -> None:
            pass

        def close(self) -> None:
            pass

    class Plugin:
        @hookimpl
        def ratchet_register_coordinators(self, registry: Any) -> None:
            registry.add("recording", Recording)

    app = Ratchet(
        sqlite_url,
        allowed_modules=["sample_jobs"],
        plugins=make(Plugin()),
        coordinator="recording",
        node_name="n7",
    )
    assert isinstance(app.coordinator, Recording)
    assert app.coordinator.context == CoordinatorContext(store_url=sqlite_url, node_name="n7")
    app.enqueue(sample_jobs.noop).submit()
    assert len(hints) == 1, "a zero-delay submission sends one wakeup"
    app.close()


def test_hook_ratchet_register_executor_providers() -> None:
    class Plugin:
        @hookimpl
        def ratchet_register_executor_providers(self, registry: Any) -> None:
            registry.add("inline", lambda max_workers: "inline-provider")

    plugins = make(Plugin())
    assert "threads" in plugins.executor_providers
    assert plugins.executor_factory("inline")(4) == "inline-provider"


def test_hook_ratchet_class_policy(sqlite_url: str) -> None:
    class Strict:
        def is_allowed(self, module: str, qualname: str) -> bool:
            return qualname == "noop"

    configs: list[object] = []

    class Plugin:
        @hookimpl
        def ratchet_class_policy(self, config: RatchetConfig) -> Any:
            configs.append(config)
            return Strict()

    app = Ratchet(sqlite_url, plugins=make(Plugin()))
    assert configs == [app.config] and isinstance(configs[0], RatchetConfig)
    app.enqueue(sample_jobs.noop).submit()
    from ratchet import ClassPolicyViolation

    with pytest.raises(ClassPolicyViolation):
        app.enqueue(sample_jobs.record, 1)
    app.close()
    with pytest.raises(MissingClassPolicy, match="allowed_modules"):
        Ratchet(sqlite_url, plugins=make())


def test_hook_ratchet_bean_resolver(sqlite_url: str) -> None:
    class Resolver:
        def resolve(self, cls: type) -> Any:
            instance = cls()
            instance.greeting = "hi from the container"
            return instance

        def clear(self) -> None:
            pass

    class Plugin:
        @hookimpl
        def ratchet_bean_resolver(self, config: Any) -> Any:
            return Resolver()

    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], plugins=make(Plugin()))
    handle = app.enqueue(sample_jobs.Greeter.greet, "ana").submit()
    worker = app.worker()
    [job] = worker.poll_once()
    worker.record([worker.execute(job)])
    assert handle.result() == "hi from the container ana"
    app.close()


def test_hook_ratchet_resilience_strategy(sqlite_url: str) -> None:
    from datetime import timedelta

    class AlwaysOpen:
        def is_available(self, service: str) -> bool:
            return False

        def retry_delay(self, service: str) -> timedelta:
            return timedelta(seconds=42)

        def execute(self, service: str, call: Any) -> Any:
            raise AssertionError("must not run while open")

    class Plugin:
        @hookimpl
        def ratchet_resilience_strategy(self, config: Any) -> Any:
            return AlwaysOpen()

    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], plugins=make(Plugin()))
    handle = app.enqueue(sample_jobs.record, 1).submit()
    worker = app.worker()
    [job] = worker.poll_once()
    outcome = worker.execute(job)
    worker.record([outcome])
    rec = handle.record()
    assert rec.status.value == "PENDING" and rec.attempts == 0
    assert rec.scheduled_time - job.claimed_at >= timedelta(seconds=42)
    app.close()


def test_hook_ratchet_job_event(sqlite_url: str, caplog: pytest.LogCaptureFixture) -> None:
    seen: list[JobEvent] = []

    class Plugin:
        @hookimpl
        def ratchet_job_event(self, event: JobEvent) -> None:
            seen.append(event)

    class Broken:
        @hookimpl
        def ratchet_job_event(self, event: JobEvent) -> None:
            raise RuntimeError("observer bug")

    # a failing observer called before and one called after the recording one
    plugins = make(Broken(), Plugin(), Broken())
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], plugins=plugins)
    with caplog.at_level(logging.ERROR, logger="ratchet.plugins"):
        handle = app.enqueue(sample_jobs.record, 5).submit()
        worker = app.worker()
        [job] = worker.poll_once()
        worker.record([worker.execute(job)])
    kinds = [e.kind for e in seen if e.job_id == handle.id]
    assert kinds == [EventKind.SUBMITTED, EventKind.STARTED, EventKind.COMPLETED]
    assert handle.status().value == "SUCCEEDED", "a failing observer changes nothing"
    failures = [r.getMessage() for r in caplog.records if "observer plugin" in r.getMessage()]
    assert len(failures) == 2 * len(seen), "each broken observer is logged for each event"
    assert all(".Broken) failed on " in message for message in failures)
    app.close()


class RecordingTracer:
    """A tracer that records what the engine asks of it (no tracing library)."""

    def __init__(self, trace_context: Any = '{"traceparent":"submitted"}') -> None:
        self.trace_context = trace_context
        self.calls: list[tuple[Any, ...]] = []

    @contextmanager
    def submission(self, operation: str, attributes: dict[str, Any]) -> Iterator[Any]:
        calls = self.calls
        calls.append(("submission", operation, dict(attributes)))

        class Span:
            trace_context = self.trace_context

            def set_attribute(self, key: str, value: Any) -> None:
                calls.append(("submission attribute", key, value))

        yield Span()

    def attempt(self, job: Any, node_id: str) -> Any:
        calls = self.calls
        calls.append(("attempt", job.job_id, job.trace_context, node_id))

        class Span:
            @contextmanager
            def activate(self) -> Iterator[None]:
                calls.append(("activated", job.job_id))
                yield
                calls.append(("deactivated", job.job_id))

            def failed(
                self, error_type: str, message: str, traceback: str, *, timed_out: bool
            ) -> None:
                calls.append(("failed", job.job_id, message, timed_out))

            def end(self, outcome: str) -> None:
                calls.append(("end", job.job_id, outcome))

        return Span()


def test_hook_ratchet_job_tracer(sqlite_url: str) -> None:
    tracer = RecordingTracer()
    asked: list[str | None] = []

    class Plugin:
        @hookimpl
        def ratchet_job_tracer(self, config: RatchetConfig) -> Any:
            asked.append(config.tracing)
            return tracer if config.tracing == "recording" else None

    plugins = make(Plugin())
    untraced = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], plugins=plugins)
    assert untraced.tracer is None and asked == [None], "asked once; no tracer while off"
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], plugins=plugins, tracing="recording")
    assert app.tracer is tracer
    ok = app.enqueue(sample_jobs.record, 1).submit()
    bad = app.enqueue(sample_jobs.fail_always, "boom").submit()
    worker = app.worker()
    worker.record([worker.execute(job) for job in worker.poll_once()])
    node = worker.node_id
    assert (
        "submission",
        "enqueue",
        {"ratchet.job.count": 1, "ratchet.job.target": "sample_jobs:record"},
    ) in tracer.calls
    assert ("submission attribute", "ratchet.job.id", str(ok.id)) in tracer.calls
    for handle in (ok, bad):  # the attempt sees the context its submission stored
        assert ("attempt", handle.id, '{"traceparent":"submitted"}', node) in tracer.calls
    mine = [c for c in tracer.calls if c[0] != "submission attribute" and c[1:2] == (bad.id,)]
    assert [c[0] for c in mine] == ["attempt", "activated", "failed", "deactivated", "end"]
    assert ("failed", bad.id, "boom", False) in tracer.calls
    assert ("end", ok.id, "SUCCEEDED") in tracer.calls and ("end", bad.id, "DEAD") in tracer.calls
    assert not any(c[0] == "failed" and c[1] == ok.id for c in tracer.calls)
    app.close()
    untraced.close()
    with pytest.raises(ConfigurationError, match="tracing='nowhere', but no plugin supplies"):
        Ratchet(sqlite_url, allowed_modules=["sample_jobs"], plugins=plugins, tracing="nowhere")


@pytest.mark.parametrize("bad", ["x" * 1025, "nul\x00", 42])
def test_a_trace_context_no_store_can_hold_is_refused_before_anything_is_stored(
    sqlite_url: str, bad: Any
) -> None:
    tracer = RecordingTracer(trace_context=bad)

    class Plugin:
        @hookimpl
        def ratchet_job_tracer(self, config: RatchetConfig) -> Any:
            return tracer

    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], plugins=make(Plugin()), tracing="x")
    with pytest.raises(ConfigurationError, match="gave a trace context a job cannot store"):
        app.enqueue(sample_jobs.record, 1).submit()
    assert app.list_jobs() == []


def test_hook_ratchet_sanitize_error(sqlite_url: str) -> None:
    calls: list[tuple[str, str]] = []

    class Plugin:
        @hookimpl
        def ratchet_sanitize_error(self, text: str, kind: str, config: Any) -> str | None:
            calls.append((kind, text))
            return None if kind == "traceback" else "redacted by plugin"

    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], plugins=make(Plugin()))
    handle = app.enqueue(sample_jobs.fail_always, "password=hunter2").with_max_retries(0).submit()
    app.worker().run_due()
    [attempt] = app.attempts(handle.id)
    assert attempt.error == "redacted by plugin"
    assert attempt.traceback is not None and "password=***" in attempt.traceback, (
        "a None answer falls through to the built-in sanitiser"
    )
    assert [k for k, _ in calls] == ["message", "traceback"]
    assert "hunter2" in calls[0][1], "the plugin saw the raw text"
    app.close()


def test_builtin_policy_never_matches_across_a_dot() -> None:
    policy = PackagePrefixClassPolicy(["myapp"])
    assert policy.is_allowed("myapp", "f") and policy.is_allowed("myapp.jobs", "f")
    assert not policy.is_allowed("myapp_evil", "f") and not policy.is_allowed("other.myapp", "f")


def test_describe_lists_builtins() -> None:
    infos = make().describe()
    names = {i.name for i in infos}
    assert "ratchet.adapters.sqlite" in names
    assert any("ratchet_register_stores" in i.hooks for i in infos)


# -- security hooks (docs/security.md) ------------------------------------------------------------
def test_hook_ratchet_authorization_policy(sqlite_url: str) -> None:
    from ratchet.domain.authorization import OwnerOnly, PermitAll
    from ratchet.domain.errors import NotAuthorized

    policy = OwnerOnly()

    class Plugin:
        @hookimpl
        def ratchet_authorization_policy(self, config: RatchetConfig) -> Any:
            return policy

    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], plugins=make(Plugin()))
    assert app.guard.policy is policy
    with app.as_principal("alice"):
        handle = app.enqueue(sample_jobs.noop).submit()
    with app.as_principal("bob"), pytest.raises(NotAuthorized):
        app.cancel_job(handle.id)
    app.close()
    explicit = PermitAll()
    app = Ratchet(
        sqlite_url, allowed_modules=["sample_jobs"], plugins=make(Plugin()), authorization=explicit
    )
    assert app.guard.policy is explicit, "the app's argument wins"
    app.close()


def test_hook_ratchet_key_provider(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from ratchet.domain.envelope import is_envelope
    from ratchet.encryption import StaticKeyProvider, generate_key

    provider = StaticKeyProvider({"vault-1": generate_key()}, "vault-1")

    class Plugin:
        @hookimpl
        def ratchet_key_provider(self, config: RatchetConfig) -> Any:
            return provider

    monkeypatch.setenv("RATCHET_ENCRYPTION_KEYS", f"env={generate_key()}")
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], plugins=make(Plugin()))
    handle = app.enqueue(sample_jobs.record, 5).submit()
    stored = app.store.get_job(handle.id)
    assert is_envelope(stored.payload) and stored.encryption_key_id == "vault-1"
    app.close()
    monkeypatch.delenv("RATCHET_ENCRYPTION_KEYS")
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], plugins=make())
    assert app.protection.cipher is None, "no provider: stored in plain JSON"
    app.close()


# -- node identity and worker lifecycle (docs/hooks.md) ------------------------------------------
def test_hook_ratchet_node_name(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    class StatefulSet:
        @hookimpl
        def ratchet_node_name(self, config: RatchetConfig) -> str | None:
            import os

            return os.environ.get("HOSTNAME")

    monkeypatch.setenv("HOSTNAME", "jobs-2")
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], plugins=make(StatefulSet()))
    assert app.config.node_name == "jobs-2"
    worker = app.worker(heartbeat_interval=__import__("datetime").timedelta(seconds=1))
    worker.start()
    try:
        names = {n.node_name for n in app.store.list_nodes()}
        assert names == {"jobs-2"}
        assert worker.node_id.startswith("jobs-2")
    finally:
        worker.stop()
        app.close()
    configured = Ratchet(
        sqlite_url, allowed_modules=["sample_jobs"], plugins=make(StatefulSet()), node_name="n1"
    )
    assert configured.config.node_name == "n1", "a configured name wins"
    configured.close()
    monkeypatch.setenv("HOSTNAME", "")

    class Bad:
        @hookimpl
        def ratchet_node_name(self, config: RatchetConfig) -> str:
            return "x" * 61

    with pytest.raises(ConfigurationError, match="cannot name a node"):
        Ratchet(sqlite_url, allowed_modules=["sample_jobs"], plugins=make(Bad()))


class LifecycleRecorder:
    """Records the lifecycle hooks in order; raises in the ones named in ``fail``."""

    def __init__(self, calls: list[str], name: str, fail: tuple[str, ...] = ()) -> None:
        self.calls, self.name, self.fail = calls, name, fail

    def _record(self, hook: str, worker: Any) -> None:
        registered = bool(worker.store.list_nodes())
        self.calls.append(f"{self.name}:{hook}:{'registered' if registered else 'absent'}")
        if hook in self.fail:
            raise RuntimeError(f"{self.name} fails in {hook}")

    @hookimpl
    def ratchet_worker_starting(self, worker: Any) -> None:
        self._record("starting", worker)

    @hookimpl
    def ratchet_worker_started(self, worker: Any) -> None:
        self._record("started", worker)

    @hookimpl
    def ratchet_worker_stopping(self, worker: Any) -> None:
        self._record("stopping", worker)

    @hookimpl
    def ratchet_worker_stopped(self, worker: Any) -> None:
        self._record("stopped", worker)


def lifecycle_app(sqlite_url: str, *plugins: object) -> Ratchet:
    return Ratchet(sqlite_url, allowed_modules=["sample_jobs"], plugins=make(*plugins))


def test_hook_ratchet_worker_starting(sqlite_url: str) -> None:
    calls: list[str] = []
    app = lifecycle_app(sqlite_url, LifecycleRecorder(calls, "a"))
    handle = app.enqueue(sample_jobs.record, 1).submit()
    worker = app.worker()
    worker.start()
    assert worker.wait_until(lambda: handle.status().value == "SUCCEEDED", 30)
    worker.stop()
    worker.stop()  # a second stop calls no hook again
    assert calls == [
        "a:starting:absent",
        "a:started:registered",
        "a:stopping:registered",
        "a:stopped:absent",
    ]
    app.close()


def test_a_failing_starting_hook_keeps_the_worker_from_starting(sqlite_url: str) -> None:
    from ratchet.domain.errors import LifecycleHookError

    calls: list[str] = []
    # called last registered first: "b" fails, so "a" is never called
    app = lifecycle_app(
        sqlite_url, LifecycleRecorder(calls, "a"), LifecycleRecorder(calls, "b", ("starting",))
    )
    handle = app.enqueue(sample_jobs.record, 1).submit()
    worker = app.worker()
    with pytest.raises(LifecycleHookError, match="b fails in starting") as info:
        worker.start()
    assert isinstance(info.value.__cause__, RuntimeError)
    assert app.store.list_nodes() == [], "nothing registered"
    assert handle.status().value == "PENDING", "nothing claimed"
    worker.stop()
    assert calls == ["b:starting:absent"], "no stop hooks for a worker that never started"
    app.close()


def test_hook_ratchet_worker_started(sqlite_url: str, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []
    app = lifecycle_app(
        sqlite_url,
        LifecycleRecorder(calls, "a"),
        LifecycleRecorder(calls, "b", ("started", "stopping", "stopped")),
    )
    handle = app.enqueue(sample_jobs.record, 1).submit()
    worker = app.worker()
    with caplog.at_level(logging.ERROR, logger="ratchet.plugins"):
        worker.start()
        assert worker.wait_until(lambda: handle.status().value == "SUCCEEDED", 30), (
            "the worker runs on after a failing started hook"
        )
        worker.stop()
    assert [c.split(":")[1] for c in calls if c.startswith("a:")] == [
        "starting",
        "started",
        "stopping",
        "stopped",
    ], "the other plugin is still called"
    assert app.store.list_nodes() == [], "the drain finished despite failing hooks"
    failures = [
        r.getMessage() for r in caplog.records if "failed in ratchet_worker_" in r.getMessage()
    ]
    assert len(failures) == 3
    app.close()


def test_hook_ratchet_worker_stopping(sqlite_url: str) -> None:
    seen: list[tuple[bool, bool]] = []

    class Plugin:
        @hookimpl
        def ratchet_worker_stopping(self, worker: Any) -> None:
            seen.append((worker.draining, bool(worker.store.list_nodes())))

    app = lifecycle_app(sqlite_url, Plugin())
    worker = app.worker()
    worker.start()
    worker.stop()
    assert seen == [(False, True)], "called once, before the drain, still registered"
    app.close()


def test_hook_ratchet_worker_stopped(sqlite_url: str) -> None:
    seen: list[int] = []

    class Plugin:
        @hookimpl
        def ratchet_worker_stopped(self, worker: Any) -> None:
            seen.append(len(worker.store.list_nodes()))

    app = lifecycle_app(sqlite_url, Plugin())
    worker = app.worker()
    worker.start()
    worker.stop()
    assert seen == [0], "called once, after deregistration"


def test_hook_ratchet_metrics_observed(sqlite_url: str, caplog: pytest.LogCaptureFixture) -> None:
    seen: list[Measurement] = []
    calls: list[int] = []

    class Plugin:
        @hookimpl
        def ratchet_metrics_observed(self, measurements: Sequence[Measurement]) -> None:
            calls.append(len(measurements))
            seen.extend(measurements)

    class Broken:
        @hookimpl
        def ratchet_metrics_observed(self, measurements: Sequence[Measurement]) -> None:
            raise RuntimeError("exporter bug")

    app = Ratchet(
        sqlite_url, allowed_modules=["sample_jobs"], plugins=make(Broken(), Plugin(), Broken())
    )
    with caplog.at_level(logging.ERROR, logger="ratchet.plugins"):
        handle = app.enqueue(sample_jobs.record, 5).submit()
        assert app.worker().run_due() == 1
    assert handle.status().value == "SUCCEEDED", "a failing exporter changes nothing"
    started = [x for x in seen if x.metric is metrics.JOBS_STARTED]
    completed = [x for x in seen if x.metric is metrics.JOBS_COMPLETED]
    assert started == [Measurement(metrics.JOBS_STARTED, ("sample_jobs:record", "normal"), 1)]
    assert completed == [
        Measurement(metrics.JOBS_COMPLETED, ("sample_jobs:record", "succeeded"), 1)
    ]
    failures = [r.getMessage() for r in caplog.records if "observer plugin" in r.getMessage()]
    assert len(calls) == 3, "one batch per poll (two: the second finds nothing) and per write"
    assert len(failures) == 2 * len(calls), "each broken exporter is logged for each batch"
    app.close()


def test_hook_ratchet_metrics_sampled(sqlite_url: str) -> None:
    samples: list[MetricsSample] = []

    class Plugin:
        @hookimpl
        def ratchet_metrics_sampled(self, sample: MetricsSample) -> None:
            samples.append(sample)

    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"], plugins=make(Plugin()))
    app.enqueue(sample_jobs.record, 5).submit()
    worker = app.worker(concurrency=3)
    worker.sampler.run_once(worker)
    [sample] = samples
    assert sample.node_id == worker.node_id
    local = {(x.metric.name, x.labels): x.value for x in sample.local}
    assert local[("ratchet_worker_slots", ("free",))] == 3
    assert sample.cluster is not None, "the only worker holds the sampling lease"
    cluster = {(x.metric.name, x.labels): x.value for x in sample.cluster}
    assert cluster[("ratchet_queue_depth", ("PENDING", "normal"))] == 1
    app.close()
