"""Recurring masters through the app API on SQLite: builder, operators, the decorator,
misfires after downtime, a three-node cluster, and bad input. Time is a FakeClock throughout."""

from __future__ import annotations

import logging
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import recurring_jobs
import sample_jobs

from ratchet import (
    BackoffPolicy,
    ClassPolicyViolation,
    DuplicateBusinessKeyError,
    InvalidCronExpression,
    InvalidJobOptions,
    InvalidJobTarget,
    JobContext,
    JobOptions,
    JobPriority,
    JobStatus,
    Ratchet,
    RecurringMisfirePolicy,
    RecurringStatus,
    StoreUnavailable,
    UnknownTimeZone,
)
from ratchet.domain.recurring import FIRE_TIME_PARAM, MASTER_PARAM, RecurringSource
from ratchet.engine.context import bound
from ratchet.engine.recurring import (
    REGISTRATION_LOCK,
    RecurringMaterializer,
    RecurringRegistrar,
    takes_context,
)
from ratchet.engine.worker import Worker
from ratchet.ports import RecurringStore
from ratchet.testing import FakeClock

T0 = datetime(2026, 3, 2, 12, 0, 0, tzinfo=UTC)
EVERY_SECOND = "* * * * * ?"
EVERY_MINUTE = "0 * * * * ?"
MODULES = ["recurring_jobs"]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture(autouse=True)
def _clear_calls() -> Iterator[None]:
    recurring_jobs.CALLS.clear()
    yield
    recurring_jobs.CALLS.clear()


@pytest.fixture
def make_app(sqlite_url: str, clock: FakeClock) -> Iterator[Callable[..., Ratchet]]:
    """Apps on one SQLite file sharing the FakeClock (several apps: several nodes)."""
    apps: list[Ratchet] = []

    def make(**kwargs: Any) -> Ratchet:
        kwargs.setdefault("allowed_modules", MODULES)
        app = Ratchet(sqlite_url, clock=clock, **kwargs)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()


@pytest.fixture
def app(make_app: Callable[..., Ratchet]) -> Ratchet:
    return make_app()


def materializer(worker: Worker) -> RecurringMaterializer:
    return next(t for t in worker.periodic if isinstance(t, RecurringMaterializer))


def run_due_jobs(worker: Worker) -> list[Any]:
    """Claim and run every due job in this thread, writing outcomes as the worker would."""
    ran = []
    while jobs := worker.poll_once():
        worker.run_claimed(jobs)
        ran.extend(jobs)
    return ran


def fire_times(app: Ratchet, recurring_id: uuid.UUID) -> list[datetime]:
    return sorted(
        datetime.fromisoformat(j.params[FIRE_TIME_PARAM]) for j in app.recurring_fires(recurring_id)
    )


# ---------------------------------------------------------------------------- the API
def test_schedule_recurring_stores_a_master_that_fires_ordinary_jobs(
    app: Ratchet, clock: FakeClock
) -> None:
    handle = (
        app.schedule_recurring("0 */15 * * * ?", "America/New_York", recurring_jobs.report, "eu")
        .with_options(
            JobOptions(
                priority=JobPriority.HIGH,
                max_retries=3,
                backoff=BackoffPolicy.FIXED,
                backoff_delay=timedelta(seconds=2),
                timeout=timedelta(minutes=10),
                tags=("reports",),
            )
        )
        .with_tags(["finance"], "Nightly")
        .with_business_key("quarter-hour-report")
        .with_misfire_policy(RecurringMisfirePolicy.fire_once())
        .with_name("Quarter-hour report")
        .submit()
    )
    rec = handle.record()
    assert rec is not None
    assert (rec.cron, rec.zone, rec.target, rec.payload) == (
        "0 */15 * * * ?",
        "America/New_York",
        "recurring_jobs:report",
        '{"args":["eu"],"kwargs":{}}',
    )
    assert (rec.priority, rec.max_retries, rec.backoff, rec.timeout) == (
        JobPriority.HIGH,
        3,
        BackoffPolicy.FIXED,
        timedelta(minutes=10),
    )
    assert rec.tags == ("reports", "finance", "nightly")
    assert (rec.business_key, rec.name, rec.source) == (
        "quarter-hour-report",
        "Quarter-hour report",
        RecurringSource.API,
    )
    assert rec.misfire == RecurringMisfirePolicy.fire_once()
    assert rec.next_fire == T0 + timedelta(minutes=15)
    assert app.find_recurring("quarter-hour-report") == rec

    worker = app.worker()
    clock.advance(timedelta(minutes=15))
    materializer(worker).run_once(worker)
    [ran] = run_due_jobs(worker)
    assert recurring_jobs.CALLS == [("report", "eu")]
    job = app.get_job(ran.job_id)
    assert job is not None and job.status is JobStatus.SUCCEEDED and job.result == '"eu"'
    assert job.recurring_master_id == handle.id
    assert job.params[MASTER_PARAM] == str(handle.id)
    assert job.params[FIRE_TIME_PARAM] == "2026-03-02T07:15:00-05:00", "in the master's zone"
    assert [j.job_id for j in handle.fires()] == [ran.job_id]


def test_business_keys_pause_resume_and_cancel(app: Ratchet, clock: FakeClock) -> None:
    a = app.schedule_recurring(EVERY_MINUTE, "UTC", recurring_jobs.heartbeat)
    a = a.with_business_key("beat").with_tags("ops").submit()
    with pytest.raises(DuplicateBusinessKeyError):
        app.schedule_recurring(EVERY_SECOND, "UTC", recurring_jobs.heartbeat).with_business_key(
            "beat"
        ).submit()
    b = app.schedule_recurring_utc(EVERY_MINUTE, recurring_jobs.report, "us").with_tags("ops")
    b = b.submit()
    c = app.schedule_recurring(EVERY_MINUTE, ZoneInfo("Asia/Kolkata"), recurring_jobs.heartbeat)
    c = c.submit()
    assert c.record().zone == "Asia/Kolkata"  # type: ignore[union-attr]

    assert app.pause_recurring("beat") and a.record().paused  # type: ignore[union-attr]
    assert not app.pause_recurring("no-such-key")
    assert not app.resume_recurring(b.id), "b was not paused"
    clock.advance(timedelta(minutes=3, seconds=10))
    created = app.materialize_recurring("node-1")
    assert {f.recurring_id for f in created} == {b.id, c.id}, "a paused master does not fire"
    assert a.resume()
    assert a.record().next_fire == T0 + timedelta(minutes=4)  # type: ignore[union-attr]

    assert app.cancel_recurring_jobs_by_tag("OPS") == 2
    assert app.cancel_recurring_job_by_business_key("beat") == 0, "already canceled by tag"
    assert app.list_recurring() == [c.record()]
    assert c.cancel() and not c.cancel()
    assert a.record().status is RecurringStatus.CANCELED  # type: ignore[union-attr]
    # The key is free again once its master ended.
    again = app.schedule_recurring(EVERY_SECOND, "UTC", recurring_jobs.heartbeat)
    assert again.with_business_key("beat").submit().id != a.id
    assert app.cancel_recurring_job_by_business_key("beat") == 1
    clock.advance(timedelta(minutes=5))
    assert app.materialize_recurring() == []
    assert len(app.recurring_fires(b.id)) == 3, "occurrences already created stay"


# ---------------------------------------------------------------------------- misfires
POLICIES = {
    "skip": RecurringMisfirePolicy.skip(),
    "fire_once": RecurringMisfirePolicy.fire_once(),
    "catch_up(11)": RecurringMisfirePolicy.catch_up(),
}
#: (missed occurrences, policy) -> minutes (after T0) of the occurrences created.
EXPECTED = {
    **{(0, p): [] for p in POLICIES},
    **{(1, p): [1] for p in POLICIES},  # a single overdue occurrence is never a backlog
    (2, "skip"): [],
    (2, "fire_once"): [1],
    (2, "catch_up(11)"): [1, 2],
    (1000, "skip"): [],
    (1000, "fire_once"): [1],
    (1000, "catch_up(11)"): list(range(1, 12)),
}


@pytest.mark.parametrize("policy", list(POLICIES))
@pytest.mark.parametrize("missed", [0, 1, 2, 1000])
def test_downtime_under_each_misfire_policy(
    app: Ratchet, clock: FakeClock, missed: int, policy: str
) -> None:
    """No materializer ran while ``missed`` per-minute fire times passed; then one run."""
    handle = (
        app.schedule_recurring(EVERY_MINUTE, "UTC", recurring_jobs.heartbeat)
        .with_misfire_policy(POLICIES[policy])
        .submit()
    )
    worker = app.worker()
    task = materializer(worker)
    clock.advance(timedelta(minutes=missed, seconds=30))
    task.run_once(worker)
    minutes = [int((t - T0) / timedelta(minutes=1)) for t in fire_times(app, handle.id)]
    assert minutes == EXPECTED[(missed, policy)]
    rec = handle.record()
    assert rec is not None and rec.next_fire == T0 + timedelta(minutes=missed + 1)
    # Back to normal: the next fire time is created on time, once.
    clock.advance(timedelta(minutes=1))
    task.run_once(worker)
    task.run_once(worker)
    after = [int((t - T0) / timedelta(minutes=1)) for t in fire_times(app, handle.id)]
    assert after == [*EXPECTED[(missed, policy)], missed + 1]


# ---------------------------------------------------------------------------- the cluster
def test_three_worker_nodes_create_and_run_each_fire_once(
    make_app: Callable[..., Ratchet], clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three nodes (apps, workers, materializers) on one database, a FakeClock advanced second
    by second for 60 s over a per-second decorator master."""
    apps = [make_app() for _ in range(3)]
    wrappers = [a.recurring(EVERY_SECOND, id="tick")(recurring_jobs.with_context) for a in apps]
    monkeypatch.setattr(recurring_jobs, "with_context", wrappers[0])  # as if decorated in place
    workers = [Worker(a, apps[0].worker().config, node_id=f"node-{i}") for i, a in enumerate(apps)]
    registrars = [next(t for t in w.periodic if isinstance(t, RecurringRegistrar)) for w in workers]
    for registrar, worker in zip(registrars, workers, strict=True):
        registrar.run_once(worker)
        assert registrar not in worker.periodic, "registration runs once per worker"
    assert [r.report.created if r.report else None for r in registrars] == [("tick",), (), ()]
    barrier = threading.Barrier(3)

    def node(worker: Worker) -> int:
        barrier.wait(timeout=30)
        materializer(worker).run_once(worker)
        return len(run_due_jobs(worker))

    ran: Counter[str] = Counter()
    with ThreadPoolExecutor(max_workers=3) as pool:
        for _ in range(60):
            clock.advance(1)
            for worker, count in zip(workers, pool.map(node, workers), strict=True):
                ran[worker.node_id] += count
    calls = [fire for name, (_, fire) in recurring_jobs.CALLS if name == "with_context"]
    assert len(calls) == 60 and len(set(calls)) == 60, Counter(calls).most_common(3)
    expected = [(T0 + timedelta(seconds=s)).isoformat() for s in range(1, 61)]
    assert sorted(calls) == expected
    master = apps[0].find_recurring("tick")
    assert master is not None and len(apps[0].recurring_fires(master.recurring_id)) == 60
    assert sum(ran.values()) == 60


# ---------------------------------------------------------------------------- the decorator
def test_decorator_defaults_follow_the_original(app: Ratchet) -> None:
    wrapper = app.recurring("0 0 2 * * ?")(recurring_jobs.heartbeat)
    definition = wrapper.__ratchet_recurring__  # type: ignore[attr-defined]
    assert definition.id == "recurring_jobs.heartbeat"
    assert (definition.name, definition.zone, definition.enabled) == ("heartbeat", "UTC", True)
    opts = definition.options
    assert (opts.priority, opts.max_retries, opts.backoff, opts.backoff_delay, opts.timeout) == (
        JobPriority.NORMAL,
        3,
        BackoffPolicy.EXPONENTIAL,
        timedelta(seconds=1),
        timedelta(hours=1),
    )
    assert definition.misfire == RecurringMisfirePolicy.catch_up(11)
    assert app.recurring_definitions == {"recurring_jobs.heartbeat": definition}
    assert wrapper() is None and recurring_jobs.CALLS == [("heartbeat", None)]


@pytest.mark.parametrize(
    ("given", "priority"),
    [
        (0, JobPriority.LOWEST),
        (1, JobPriority.LOW),
        (2, JobPriority.NORMAL),
        (3, JobPriority.HIGH),
        (4, JobPriority.CRITICAL),
        (JobPriority.HIGH, JobPriority.HIGH),
    ],
)
def test_decorator_priority_is_the_job_priority_scale(
    app: Ratchet, given: Any, priority: JobPriority
) -> None:
    wrapper = app.recurring(EVERY_MINUTE, priority=given)(recurring_jobs.heartbeat)
    assert wrapper.__ratchet_recurring__.options.priority is priority  # type: ignore[attr-defined]
    assert app.recurring(EVERY_MINUTE, id="default")(recurring_jobs.heartbeat)  # NORMAL
    assert app.recurring_definitions["default"].options.priority is JobPriority.NORMAL, (
        "the default is a plain job's"
    )


def test_a_decorator_priority_is_stored_and_read_back_as_it_is(
    app: Ratchet,
) -> None:
    app.recurring(EVERY_MINUTE, id="high", priority=JobPriority.HIGH)(recurring_jobs.heartbeat)
    assert app.register_recurring_jobs() is not None
    master = app.find_recurring("high")
    assert master is not None and master.priority is JobPriority.HIGH


def test_registration_is_idempotent_across_apps_and_follows_changes(
    make_app: Callable[..., Ratchet], clock: FakeClock
) -> None:
    first, second = make_app(), make_app()
    for a in (first, second):
        a.recurring(EVERY_MINUTE, id="beat", tags=["ops"])(recurring_jobs.heartbeat)
        a.recurring("0 0 * * * ?", zone="Europe/London", priority=JobPriority.HIGH)(
            recurring_jobs.cleanup
        )
    api = first.schedule_recurring(EVERY_MINUTE, "UTC", recurring_jobs.report, "x").submit()
    report = first.register_recurring_jobs()
    assert report is not None
    assert set(report.created) == {"beat", "recurring_jobs.cleanup"}
    beat = first.find_recurring("beat")
    assert beat is not None and beat.source is RecurringSource.DECORATOR
    report = second.register_recurring_jobs()
    assert report is not None and report.created == () and len(report.unchanged) == 2
    assert second.find_recurring("beat") == beat, "unchanged: not even updated_at moved"
    assert len(first.list_recurring()) == 3

    # A changed decorator updates its master: new options keep the schedule's next fire...
    clock.advance(timedelta(seconds=20))
    third = make_app()
    third.recurring(EVERY_MINUTE, id="beat", tags=["ops", "new"], max_retries=7)(
        recurring_jobs.heartbeat
    )
    third.recurring("0 0 * * * ?", zone="Europe/London", priority=JobPriority.HIGH)(
        recurring_jobs.cleanup
    )
    report = third.register_recurring_jobs()
    assert report is not None and report.updated == ("beat",)
    changed = third.find_recurring("beat")
    assert changed is not None and changed.recurring_id == beat.recurring_id
    assert (changed.max_retries, changed.tags, changed.next_fire) == (
        7,
        ("ops", "new"),
        beat.next_fire,
    )
    assert [r.recurring_id for r in third.list_recurring(tag="new")] == [beat.recurring_id]
    # ... a new expression restarts from now; a removed decorator's master is canceled.
    clock.advance(timedelta(minutes=5))
    fourth = make_app()
    fourth.recurring("*/10 * * * * ?", id="beat")(recurring_jobs.heartbeat)
    report = fourth.register_recurring_jobs()
    assert report is not None
    assert (report.updated, report.canceled) == (("beat",), ("recurring_jobs.cleanup",))
    moved = fourth.find_recurring("beat")
    assert moved is not None and moved.cron == "*/10 * * * * ?"
    assert moved.next_fire == clock.now() + timedelta(seconds=10)
    assert fourth.find_recurring("recurring_jobs.cleanup") is None
    # enabled=False counts as removed; masters made through the API are never touched.
    fifth = make_app()
    fifth.recurring(EVERY_MINUTE, id="beat", enabled=False)(recurring_jobs.heartbeat)
    report = fifth.register_recurring_jobs()
    assert report is not None and report.canceled == ("beat",)
    assert [r.recurring_id for r in fifth.list_recurring()] == [api.id]


def test_an_app_cancels_only_decorator_masters_its_class_policy_allows(
    make_app: Callable[..., Ratchet],
) -> None:
    """Apps with different class policies may share a database: each one's workers leave the
    other's decorator masters alone, and cancel only those of targets they could run."""
    reports = make_app()
    reports.recurring(EVERY_MINUTE, id="beat")(recurring_jobs.heartbeat)
    assert reports.register_recurring_jobs() is not None
    billing = make_app(allowed_modules=["sample_jobs"])
    billing.recurring(EVERY_MINUTE, id="bill")(sample_jobs.noop)
    report = billing.register_recurring_jobs()
    assert report is not None and (report.created, report.canceled) == (("bill",), ())
    assert {m.business_key for m in billing.list_recurring()} == {"beat", "bill"}
    report = make_app().register_recurring_jobs()  # reports' decorators all removed
    assert report is not None and report.canceled == ("beat",)
    assert [m.business_key for m in billing.list_recurring()] == ["bill"]


def test_a_master_in_a_dst_zone_fires_each_wall_time_once(app: Ratchet, clock: FakeClock) -> None:
    """New York, 3 November 2024 (fall back) and 10 March 2024 (spring forward), materialized
    every minute through both transitions: the rules of the cron evaluator hold for masters."""
    ny = ZoneInfo("America/New_York")
    clock.set(datetime(2024, 11, 3, 0, 50, tzinfo=ny))
    half_hourly = app.schedule_recurring("0 */30 * * * ?", ny, recurring_jobs.heartbeat).submit()
    clock.set(datetime(2024, 3, 9, 0, 0, tzinfo=ny))
    nightly = app.schedule_recurring("0 30 2 * * ?", ny, recurring_jobs.heartbeat).submit()
    clock.set(datetime(2024, 11, 3, 0, 50, tzinfo=ny))
    worker = app.worker()
    for _ in range(140):  # until 03:10 EST
        clock.advance(timedelta(minutes=1))
        materializer(worker).run_once(worker)
    assert [t.isoformat() for t in fire_times(app, half_hourly.id)] == [
        "2024-11-03T01:00:00-04:00",
        "2024-11-03T01:30:00-04:00",
        "2024-11-03T02:00:00-05:00",  # 01:00 and 01:30 EST do not fire again
        "2024-11-03T02:30:00-05:00",
        "2024-11-03T03:00:00-05:00",
    ]
    # The nightly master was first claimed in November: catch_up(11) created its 11 oldest fires.
    nightly_fires = [t.date().isoformat() for t in fire_times(app, nightly.id)]
    assert len(nightly_fires) == 12
    assert nightly_fires[:3] == ["2024-03-09", "2024-03-11", "2024-03-12"], "no 02:30 on 10 March"


def test_registration_waits_for_the_start_up_lease(
    make_app: Callable[..., Ratchet], clock: FakeClock
) -> None:
    app = make_app()
    app.recurring(EVERY_MINUTE, id="beat")(recurring_jobs.heartbeat)
    store = app.store.capability(RecurringStore)
    assert store is not None
    assert store.try_lock(
        REGISTRATION_LOCK, "other-node", now=clock.now(), lease=timedelta(seconds=60)
    )
    worker = app.worker()
    registrar = next(t for t in worker.periodic if isinstance(t, RecurringRegistrar))
    registrar.run_once(worker)
    assert registrar in worker.periodic and app.find_recurring("beat") is None
    assert app.register_recurring_jobs() is None
    clock.advance(timedelta(seconds=61))  # the holder died: its lease expires
    registrar.run_once(worker)
    assert registrar not in worker.periodic
    assert app.find_recurring("beat") is not None
    assert store.try_lock(REGISTRATION_LOCK, "n", now=clock.now(), lease=timedelta(seconds=5))
    assert not store.try_lock(REGISTRATION_LOCK, "m", now=clock.now(), lease=timedelta(seconds=5))
    assert store.release_lock(REGISTRATION_LOCK, "n") and not store.release_lock(
        REGISTRATION_LOCK, "n"
    )


def test_a_decorated_function_gets_its_job_context(
    app: Ratchet, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrapper = app.recurring("*/30 * * * * ?", id="ctx")(recurring_jobs.with_context)
    monkeypatch.setattr(recurring_jobs, "with_context", wrapper)
    async_wrapper = app.recurring("*/30 * * * * ?", id="actx")(recurring_jobs.async_with_context)
    monkeypatch.setattr(recurring_jobs, "async_with_context", async_wrapper)
    assert app.register_recurring_jobs() is not None
    worker = app.worker()
    clock.advance(30)
    materializer(worker).run_once(worker)
    ran = run_due_jobs(worker)
    assert len(ran) == 2
    results = {app.get_job(j.job_id).result for j in ran}  # type: ignore[union-attr]
    assert results == {'"2026-03-02T12:00:30+00:00"'}
    [(_, (job_id, fire))] = recurring_jobs.CALLS
    assert fire == "2026-03-02T12:00:30+00:00" and job_id in {j.job_id for j in ran}
    # Called directly, the wrapper passes what it is given (or the current context).
    ctx = JobContext(uuid.uuid4(), 1, 1, "n", T0, params={FIRE_TIME_PARAM: "x"})
    assert wrapper(ctx) == "x"
    with bound(ctx):
        assert wrapper() == "x"


def test_a_context_function_left_undecorated_in_its_module_is_refused_at_registration(
    app: Ratchet,
) -> None:
    app.recurring(EVERY_MINUTE, id="ctx")(recurring_jobs.with_context)  # module keeps the bare fn
    with pytest.raises(InvalidJobTarget, match="does not name the function"):
        app.register_recurring_jobs()


# ---------------------------------------------------------------------------- bad input
BAD_EXPRESSIONS = [
    ("*/5 * * * *", "expression"),  # Unix cron: five fields
    ("0 0 12 * * ? 2026 1", "expression"),  # eight fields
    ("", "expression"),
    ("60 * * * * ?", "second"),
    ("0 60 * * * ?", "minute"),
    ("0 0 24 * * ?", "hour"),
    ("0 0 0 32 * ?", "day-of-month"),
    ("0 0 0 0 * ?", "day-of-month"),
    ("0 0 0 1 13 ?", "month"),
    ("0 0 0 1 FOO ?", "month"),
    ("0 0 0 ? * 8", "day-of-week"),
    ("0 0 0 ? * MOX", "day-of-week"),
    ("0 0 0 1 1 ? 1969", "year"),
    ("0 0 0 1 1 ? 3000", "year"),  # Quartz never fires after 2999
    ("*/0 * * * * ?", "second"),
    ("0 */60 * * * ?", "minute"),
    ("0 0 12 * * *", None),  # neither day field is '?'
    ("0 0 12 ? * ?", None),  # both are
    ("0 0 12 1 * MON", None),
    ("0 0 0 L-31 * ?", "day-of-month"),
    ("0 0 0 32W * ?", "day-of-month"),
    ("0 0 0 ? * 6#6", "day-of-week"),
    ("0 0 0 ? * 8L", "day-of-week"),
    ("0 0 0 L,1 * ?", "day-of-month"),
    ("0 0 0 1-x * ?", "day-of-month"),
    ("a b c d e f", "second"),
]


@pytest.mark.parametrize(("expression", "field"), BAD_EXPRESSIONS)
def test_invalid_expressions_are_refused_at_submit_and_at_decoration(
    app: Ratchet, expression: str, field: str | None
) -> None:
    with pytest.raises(InvalidCronExpression) as info:
        app.schedule_recurring(expression, "UTC", recurring_jobs.heartbeat).submit()
    if field is not None:
        assert info.value.field == field, str(info.value)
    assert expression.strip() in str(info.value) or not expression
    with pytest.raises(InvalidCronExpression):
        app.recurring(expression)(recurring_jobs.heartbeat)
    assert app.list_recurring() == [] and app.recurring_definitions == {}


def test_a_cron_expression_must_be_a_string(app: Ratchet) -> None:
    with pytest.raises(InvalidCronExpression):
        app.schedule_recurring(None, "UTC", recurring_jobs.heartbeat)  # type: ignore[arg-type]


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "", "  ", "America/New York", "../etc"])
def test_unknown_zones_are_refused_at_submit_and_at_decoration(app: Ratchet, zone: str) -> None:
    with pytest.raises(UnknownTimeZone):
        app.schedule_recurring(EVERY_MINUTE, zone, recurring_jobs.heartbeat).submit()
    with pytest.raises(UnknownTimeZone):
        app.recurring(EVERY_MINUTE, zone=zone)(recurring_jobs.heartbeat)


@pytest.mark.parametrize("priority", [5, 11, -1, 100, True, 2.0, "2", "HIGH", None])
def test_decorator_priority_out_of_range_is_refused(app: Ratchet, priority: Any) -> None:
    with pytest.raises(InvalidJobOptions, match=r"priority must be 0\.\.4 \(LOWEST 0"):
        app.recurring(EVERY_MINUTE, priority=priority)


@pytest.mark.parametrize("priority", [5, 8, 10])
def test_the_old_one_to_ten_scale_is_explained(app: Ratchet, priority: int) -> None:
    with pytest.raises(
        InvalidJobOptions, match=r"no longer takes a 1-10 scale: use JobPriority\.HIGH"
    ):
        app.recurring(EVERY_MINUTE, priority=priority)


def _two(a: int, b: int) -> None: ...


def _typed(x: int) -> None: ...


def _var(*args: Any) -> None: ...


def _kw(**kwargs: Any) -> None: ...


def _kwonly(*, ctx: JobContext) -> None: ...


def _ctx_and_more(ctx: JobContext, extra: int = 1) -> None: ...


@pytest.mark.parametrize("fn", [_two, _typed, _var, _kw, _kwonly, _ctx_and_more])
def test_decorated_functions_with_a_wrong_signature_are_refused(
    app: Ratchet, fn: Callable[..., Any]
) -> None:
    with pytest.raises(InvalidJobTarget, match="no argument or a single JobContext"):
        app.recurring(EVERY_MINUTE)(fn)
    assert app.recurring_definitions == {}


def test_the_accepted_signatures() -> None:
    assert takes_context(recurring_jobs.heartbeat) is False
    assert takes_context(recurring_jobs.with_context) is True
    assert takes_context(recurring_jobs.async_with_context) is True

    def untyped(ctx):  # type: ignore[no-untyped-def]
        return ctx

    assert takes_context(untyped) is True


def test_targets_a_worker_could_not_import_are_refused(app: Ratchet) -> None:
    def nested() -> None: ...

    with pytest.raises(InvalidJobTarget, match="module-level"):
        app.recurring(EVERY_MINUTE)(nested)
    with pytest.raises(InvalidJobTarget, match="module-level"):
        app.recurring(EVERY_MINUTE)(lambda: None)
    with pytest.raises(InvalidJobTarget):
        app.schedule_recurring(EVERY_MINUTE, "UTC", nested)


def test_other_bad_options(app: Ratchet, make_app: Callable[..., Ratchet]) -> None:
    with pytest.raises(ClassPolicyViolation):
        make_app(allowed_modules=["elsewhere"]).recurring(EVERY_MINUTE)(recurring_jobs.heartbeat)
    with pytest.raises(InvalidJobOptions, match="no fire time after"):
        app.schedule_recurring("0 0 12 25 DEC ? 2020", "UTC", recurring_jobs.heartbeat).submit()
    with pytest.raises(InvalidJobOptions, match="no fire time after"):
        app.recurring("0 0 0 30 2 ?")(recurring_jobs.heartbeat)  # 30 February never comes
    with pytest.raises(InvalidJobOptions, match="misfire policy"):
        app.recurring(EVERY_MINUTE, misfire_policy="SKIP")(recurring_jobs.heartbeat)  # type: ignore[arg-type]
    with pytest.raises(InvalidJobOptions):
        app.recurring(EVERY_MINUTE, max_retries=-1)
    with pytest.raises(InvalidJobOptions):
        app.recurring(EVERY_MINUTE, timeout=timedelta(0))
    with pytest.raises(InvalidJobOptions):
        app.recurring(EVERY_MINUTE, backoff="SOMETIMES")
    app.recurring(EVERY_MINUTE, id="dup")(recurring_jobs.heartbeat)
    with pytest.raises(InvalidJobOptions, match="declared twice"):
        app.recurring(EVERY_MINUTE, id="dup")(recurring_jobs.cleanup)
    builder = app.schedule_recurring(EVERY_MINUTE, "UTC", recurring_jobs.heartbeat)
    with pytest.raises(InvalidJobOptions):
        builder.with_business_key("x" * 256)
    with pytest.raises(InvalidJobOptions):
        builder.with_business_key("caf\u00e9")
    with pytest.raises(InvalidJobOptions):
        builder.with_misfire_policy("FIRE_ONCE")  # type: ignore[arg-type]
    with pytest.raises(InvalidJobOptions):
        builder.with_options({"priority": 3})  # type: ignore[arg-type]
    with pytest.raises(InvalidJobOptions):
        builder.with_tags("x" * 65)
    with pytest.raises(InvalidJobOptions, match="catch-up limit"):
        RecurringMisfirePolicy.catch_up(0)
    builder.submit()


def test_a_registrar_gives_up_on_a_programming_error_and_retries_an_outage(
    app: Ratchet, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    app.recurring(EVERY_MINUTE, id="ctx")(recurring_jobs.with_context)  # not bound in its module
    worker = app.worker()
    registrar = next(t for t in worker.periodic if isinstance(t, RecurringRegistrar))
    registrar.run_once(worker)
    assert registrar not in worker.periodic and registrar.report is None
    assert "recurring decorators not registered" in caplog.text

    other = app.worker()
    registrar = next(t for t in other.periodic if isinstance(t, RecurringRegistrar))
    task = materializer(other)

    def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("database unavailable: connection refused")

    monkeypatch.setattr(app, "register_recurring_jobs", down)
    monkeypatch.setattr(app, "materialize_recurring", down)
    caplog.clear()
    for _ in range(3):
        registrar.run_once(other)
        task.run_once(other)
    assert registrar in other.periodic, "an outage is retried"
    assert caplog.text.count("retrying") == 2, "logged once per outage, per task"
    monkeypatch.undo()
    app.recurring_definitions.clear()
    caplog.set_level(logging.INFO, logger="ratchet.recurring")
    task.run_once(other)
    assert "works again" in caplog.text
    registrar.run_once(other)
    assert registrar not in other.periodic
