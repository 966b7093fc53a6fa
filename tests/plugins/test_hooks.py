"""Every hook is documented in docs/hooks.md and exercised here (test_hook_<name>)."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import sample_jobs

from ratchet import EventKind, JobEvent, Ratchet, hookimpl
from ratchet.adapters.class_policy import PackagePrefixClassPolicy
from ratchet.config import RatchetConfig
from ratchet.domain.errors import ConfigurationError, MissingClassPolicy, UnknownStoreError
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
