"""Execution gates end to end on SQLite, driven synchronously with a FakeClock: circuit
breakers, resource permits, the class policy re-check and bean resolution."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import gate_jobs
import pytest

from ratchet import (
    BreakerState,
    ClassPolicyViolation,
    ConfigurationError,
    EventKind,
    InvalidJobOptions,
    JobEvent,
    JobStatus,
    Ratchet,
    ResourceLimit,
    hookimpl,
)
from ratchet.adapters.class_policy import PackagePrefixClassPolicy
from ratchet.engine.builder import JobHandle
from ratchet.engine.worker import Worker
from ratchet.plugins import Plugins, make_plugin_manager
from ratchet.testing import FakeClock

RES = gate_jobs.RESOURCE


@pytest.fixture
def events() -> list[JobEvent]:
    return []


@pytest.fixture
def app(sqlite_url: str, clock: FakeClock, events: list[JobEvent]) -> Iterator[Ratchet]:
    app = Ratchet(sqlite_url, allowed_modules=["gate_jobs"], clock=clock)
    app.add_event_listener(events.append)
    yield app
    app.close()


def run_due(app: Ratchet) -> Worker:
    """Claim and run every due job once, one at a time, writing outcomes as the worker does."""
    worker = app.worker(concurrency=1, batch_size=1)
    seen: set[Any] = set()
    while jobs := worker.poll_once():
        [job] = jobs
        worker.run_claimed(jobs)
        if job.job_id in seen:
            break
        seen.add(job.job_id)
    return worker


def breaker_changes(events: list[JobEvent]) -> list[tuple[str, BreakerState, BreakerState]]:
    return [
        (e.data["service"], e.data["old"], e.data["new"])
        for e in events
        if e.kind is EventKind.BREAKER_STATE_CHANGED
    ]


def submit(app: Ratchet, fn: Callable[..., Any], *args: Any, retries: int = 0) -> JobHandle:
    return app.enqueue(fn, *args).with_max_retries(retries).submit()


# ------------------------------------------------------------------------------ circuit breakers
def test_open_breaker_reschedules_without_consuming_a_retry(
    app: Ratchet, clock: FakeClock, events: list[JobEvent]
) -> None:
    # FAST: 50 % over 20 calls, at least 3 calls, 10 s wait, 2 trial calls.
    failed = [submit(app, gate_jobs.charge, "down") for _ in range(3)]
    run_due(app)
    assert {h.status() for h in failed} == {JobStatus.FAILED}
    assert app.breaker_state(gate_jobs.charge) is BreakerState.OPEN
    assert app.breaker_state("payments") is BreakerState.OPEN
    assert breaker_changes(events) == [("payments", BreakerState.CLOSED, BreakerState.OPEN)]

    waiting = submit(app, gate_jobs.charge, "ok", retries=0)
    clock.advance(4)
    run_due(app)
    rec = waiting.record()
    assert (rec.status, rec.attempts) == (JobStatus.PENDING, 0), "no retry consumed"
    assert rec.scheduled_time == clock.now() + timedelta(seconds=6), "until it half-opens"
    [resched] = [e for e in events if e.kind is EventKind.RESCHEDULED]
    assert "circuit open for payments" in resched.data["error"]
    assert rec.last_error == resched.data["error"], "the job says why it waits"

    clock.advance(6)
    second = submit(app, gate_jobs.charge, "ok")
    run_due(app)
    assert waiting.result() == "ok" and second.result() == "ok"
    assert app.breaker_state("payments") is BreakerState.CLOSED
    assert [new for _, _, new in breaker_changes(events)] == [
        BreakerState.OPEN,
        BreakerState.HALF_OPEN,
        BreakerState.CLOSED,
    ]


def test_ignored_exceptions_never_open_the_breaker_but_causes_count(app: Ratchet) -> None:
    for _ in range(6):
        submit(app, gate_jobs.charge, "declined")
        submit(app, gate_jobs.charge, "declined-wrapping-down")  # an ignore match wins
    run_due(app)
    assert app.breaker_state("payments") is BreakerState.CLOSED
    for _ in range(3):
        submit(app, gate_jobs.charge, "wrapped")  # GatewayDown as the cause
    run_due(app)
    assert app.breaker_state("payments") is BreakerState.OPEN


def test_record_limits_what_counts(app: Ratchet) -> None:
    for _ in range(8):
        submit(app, gate_jobs.fetch, "bug")
    run_due(app)
    assert app.breaker_state(gate_jobs.fetch) is BreakerState.CLOSED
    assert app.breaker_service(gate_jobs.fetch) == "gate_jobs.fetch"
    for _ in range(5):  # EXTERNAL_API: 60 %, at least 5 calls
        submit(app, gate_jobs.fetch, "down")
    run_due(app)
    assert app.breaker_state(gate_jobs.fetch) is BreakerState.OPEN


def test_default_profile_and_operator_controls(app: Ratchet, clock: FakeClock) -> None:
    app.configure_breaker(gate_jobs.plain, profile="FAST")
    for _ in range(3):
        submit(app, gate_jobs.plain, "fail")
    run_due(app)
    assert app.breaker_state(gate_jobs.plain) is BreakerState.OPEN
    app.reset_breaker(gate_jobs.plain)
    after_reset = submit(app, gate_jobs.plain, 1)
    run_due(app)
    assert after_reset.result() == 1
    app.open_breaker("gate_jobs.plain")
    held = submit(app, gate_jobs.plain, 2)
    run_due(app)
    assert held.status() is JobStatus.PENDING
    clock.advance(10)
    run_due(app)
    assert held.result() == 2


def test_breakers_can_be_turned_off(sqlite_url: str, clock: FakeClock) -> None:
    app = Ratchet(sqlite_url, allowed_modules=["gate_jobs"], clock=clock, circuit_breakers=False)
    for _ in range(10):
        submit(app, gate_jobs.charge, "down")
    ok = submit(app, gate_jobs.charge, "ok")
    run_due(app)
    assert ok.result() == "ok"
    assert app.breaker_state("payments") is BreakerState.DISABLED
    app.close()


def test_bad_breaker_configuration_is_refused(sqlite_url: str) -> None:
    with pytest.raises(ConfigurationError, match="unknown circuit-breaker profile 'SLOW'"):
        Ratchet(sqlite_url, allowed_modules=["x"], breaker_profiles={"SLOW": {"wait": 1}})
    with pytest.raises(ConfigurationError, match="unknown circuit-breaker profile"):
        Ratchet(sqlite_url, allowed_modules=["x"], default_breaker_profile="SLOWEST")
    app = Ratchet(sqlite_url, allowed_modules=["gate_jobs"])
    with pytest.raises(ConfigurationError, match="unknown circuit-breaker profile 'NOPE'"):
        app.configure_breaker("svc", profile="NOPE")
    app.close()


# ------------------------------------------------------------------------------ resource permits
def test_no_free_permit_reschedules_after_the_retry_delay(
    app: Ratchet, clock: FakeClock, events: list[JobEvent]
) -> None:
    app.register_resource_limit(RES, 0, timedelta(seconds=7))
    job = app.enqueue(gate_jobs.plain, "paid").with_resource(RES).with_max_retries(0).submit()
    run_due(app)
    rec = job.record()
    assert (rec.status, rec.attempts, rec.resource_name) == (JobStatus.PENDING, 0, RES)
    assert rec.scheduled_time == clock.now() + timedelta(seconds=7)
    [resched] = [e for e in events if e.kind is EventKind.RESCHEDULED]
    assert f"resource {RES!r} at capacity (0/0)" in resched.data["error"]
    assert rec.last_error == resched.data["error"], "the job says why it waits"
    app.register_resource_limit(RES, 1, timedelta(seconds=7))
    clock.advance(7)
    run_due(app)
    assert job.result() == "paid"
    assert app.permits() == []


def test_permits_are_released_on_every_outcome(app: Ratchet) -> None:
    app.register_resource_limit(RES, 1)
    ok = app.enqueue(gate_jobs.plain, 1).with_resource(RES).submit()
    bad = app.enqueue(gate_jobs.fail_with, "boom").with_resource(RES).submit()
    retried = app.enqueue(gate_jobs.fail_with, "again").with_resource(RES).with_max_retries(1)
    handle = retried.submit()
    run_due(app)
    assert (ok.status(), bad.status()) == (JobStatus.SUCCEEDED, JobStatus.FAILED)
    assert handle.status() is JobStatus.FAILED and handle.record().attempts == 2
    assert app.permits() == []


def test_permit_is_released_when_the_job_is_fenced_out(app: Ratchet) -> None:
    app.register_resource_limit(RES, 1)
    job = app.enqueue(gate_jobs.plain, 1).with_resource(RES).submit()
    worker = app.worker(concurrency=1)
    [claimed] = worker.poll_once()
    gate = worker.gates[1]
    assert gate.enter(worker, claimed, app.now()) is None
    assert [p.job_id for p in app.permits(RES)] == [job.id]
    assert app.cancel_job(job.id)
    gate.leave(worker, claimed)
    assert app.permits() == []
    # A canceled job acquires nothing: its attempt is no longer this node's.
    refused = gate.enter(worker, claimed, app.now())
    assert refused is not None and refused.retry_at == refused.started_at
    assert worker.record([refused]) == [job.id] and app.permits() == []
    # And an attempt of it never starts (the ownership check comes before the gates).
    assert worker.execute(claimed) is None and app.permits() == []


def test_the_janitor_releases_permits_lost_to_an_outage(app: Ratchet, clock: FakeClock) -> None:
    from ratchet.engine.maintenance import PermitJanitor

    lost = app.enqueue(gate_jobs.plain, 1).with_resource(RES).submit()
    running = app.enqueue(gate_jobs.plain, 2).with_resource(RES).submit()
    worker = app.worker(concurrency=2)
    claimed = {c.job_id: c for c in worker.poll_once()}
    gate = worker.gates[1]
    for job in claimed.values():
        assert gate.enter(worker, job, app.now()) is None
    worker.slots.release(claimed[lost.id])  # it ended; the release never reached the store
    clock.advance(1)
    janitor = next(t for t in worker.periodic if isinstance(t, PermitJanitor))
    janitor.run_once(worker)
    assert [p.job_id for p in app.permits(RES)] == [running.id]


def test_resource_without_a_limit_is_unlimited(app: Ratchet) -> None:
    handles = [app.enqueue(gate_jobs.plain, i).with_resource("unlisted").submit() for i in range(5)]
    run_due(app)
    assert [h.result() for h in handles] == [0, 1, 2, 3, 4]
    assert app.resource_limit("unlisted") is None


def test_limits_by_configuration_and_api(sqlite_url: str, clock: FakeClock) -> None:
    app = Ratchet(
        sqlite_url,
        allowed_modules=["gate_jobs"],
        clock=clock,
        resource_limits={RES: (5, timedelta(seconds=5)), "smtp": 2, "sftp": (1, 0.25)},
    )
    assert app.resource_limits() == [
        ResourceLimit(RES, 5, timedelta(seconds=5)),
        ResourceLimit("sftp", 1, timedelta(milliseconds=250)),
        ResourceLimit("smtp", 2),
    ]
    app.register_resource_limit("smtp", 3, timedelta(seconds=1), description="mail relay")
    assert app.resource_limit("smtp") == ResourceLimit(
        "smtp", 3, timedelta(seconds=1), "mail relay"
    )
    assert app.remove_resource_limit("smtp") and not app.remove_resource_limit("smtp")
    app.close()


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({RES: -1}, "must be an integer >= 0"),
        ({RES: (2, 0)}, "positive timedelta"),
        ({RES: (2, -5)}, "positive timedelta"),
        ({RES: "many"}, "must be max_concurrent"),
        ({" ": 1}, "must not be blank"),
        ({"x" * 101: 1}, "at most 100"),
        ({"päyment": 1}, "printable ASCII"),
    ],
)
def test_bad_limits_are_refused(sqlite_url: str, limits: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidJobOptions, match=message):
        Ratchet(sqlite_url, allowed_modules=["x"], resource_limits=limits)


def test_bad_limits_and_resources_are_refused_by_the_api(app: Ratchet) -> None:
    with pytest.raises(InvalidJobOptions, match=">= 0"):
        app.register_resource_limit(RES, -3)
    with pytest.raises(InvalidJobOptions, match="positive timedelta"):
        app.register_resource_limit(RES, 3, timedelta(seconds=-1))
    builder = app.enqueue(gate_jobs.plain, 1)
    for bad, message in (("", "blank"), ("é", "printable ASCII"), ("r" * 101, "at most 100")):
        with pytest.raises(InvalidJobOptions, match=message):
            builder.with_resource(bad)
    assert builder.with_resource(None).submit().record().resource_name is None
    assert app.resource_limits() == []


# ------------------------------------------------------------------------------ class policy
@pytest.mark.parametrize(
    ("prefixes", "module", "allowed"),
    [
        (["myapp"], "myapp", True),
        (["myapp"], "myapp.jobs", True),
        (["myapp"], "myapp.jobs.billing", True),
        (["myapp"], "myapp_evil", False),
        (["myapp"], "myapp_evil.jobs", False),
        (["myapp"], "myappx", False),
        (["myapp"], "my", False),
        (["myapp."], "myapp.jobs", True),
        (["myapp.jobs"], "myapp", False),
        (["myapp.jobs"], "myapp.jobsx", False),
        ([], "myapp", False),
        (["", "  "], "anything", False),
    ],
)
def test_prefixes_never_match_across_a_dot_boundary(
    prefixes: list[str], module: str, allowed: bool
) -> None:
    assert PackagePrefixClassPolicy(prefixes).is_allowed(module, "f") is allowed


def test_a_prefix_of_the_module_name_is_not_enough(sqlite_url: str) -> None:
    app = Ratchet(sqlite_url, allowed_modules=["gate"])
    with pytest.raises(ClassPolicyViolation, match="gate_jobs:plain"):
        app.enqueue(gate_jobs.plain, 1)
    app.close()


def test_policy_is_checked_again_before_execution(sqlite_url: str, clock: FakeClock) -> None:
    allowed = Ratchet(sqlite_url, allowed_modules=["gate_jobs"], clock=clock)
    handle = allowed.enqueue(gate_jobs.plain, 1).with_max_retries(3).submit()
    allowed.close()
    evil = Ratchet(sqlite_url, allowed_modules=["gate"], clock=clock)
    run_due(evil)
    rec = evil.get_job(handle.id)
    assert (rec.status, rec.attempts) == (JobStatus.FAILED, 1)
    assert "ClassPolicyViolation" in rec.last_error and "gate_jobs:plain" in rec.last_error
    evil.close()


# ------------------------------------------------------------------------------ beans
def test_beans_are_constructed_once_and_forgotten_on_shutdown(app: Ratchet) -> None:
    gate_jobs.Counter.constructed = 0
    first = app.enqueue(gate_jobs.Counter.bump).submit()
    second = app.enqueue(gate_jobs.Counter.bump).submit()
    worker = run_due(app)
    assert (first.result(), second.result()) == (1, 2), "one cached instance"
    assert gate_jobs.Counter.constructed == 1
    worker.stop(timedelta(0))
    third = app.enqueue(gate_jobs.Counter.bump).submit()
    run_due(app)
    assert third.result() == 1 and gate_jobs.Counter.constructed == 2


def test_a_registered_bean_wins(app: Ratchet) -> None:
    mine = gate_jobs.Counter()
    mine.calls = 41
    app.register_bean(mine)
    handle = app.enqueue(gate_jobs.Counter.bump).submit()
    run_due(app)
    assert handle.result() == 42


class ContainerPlugin:
    """A plugin supplying its own bean resolver (a DI container)."""

    def __init__(self) -> None:
        self.resolved: list[type] = []
        self.cleared = 0

    @hookimpl
    def ratchet_bean_resolver(self, config: Any) -> Any:
        return self

    def resolve(self, cls: type) -> Any:
        self.resolved.append(cls)
        instance = cls()
        instance.calls = 99
        return instance

    def clear(self) -> None:
        self.cleared += 1


def test_a_plugin_can_supply_the_bean_resolver(sqlite_url: str, clock: FakeClock) -> None:
    container = ContainerPlugin()
    plugins = Plugins(make_plugin_manager(extra=[container]))
    app = Ratchet(sqlite_url, allowed_modules=["gate_jobs"], clock=clock, plugins=plugins)
    handle = app.enqueue(gate_jobs.Counter.bump).submit()
    run_due(app)
    assert handle.result() == 100 and container.resolved == [gate_jobs.Counter]
    with pytest.raises(InvalidJobOptions, match="does not accept registrations"):
        app.register_bean(gate_jobs.Counter())
    app.close()
    assert container.cleared == 1
