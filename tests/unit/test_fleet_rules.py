"""The pure rules of a heterogeneous fleet: node tag affinity, per execution type limits, the
schedule-to-start deadline (T14) and takeover policies."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratchet.config import WorkerConfig
from ratchet.domain.affinity import (
    Affinity,
    ConflictingAffinity,
    InvalidTag,
    node_tag,
    node_tags,
    runnable_anywhere,
)
from ratchet.domain.errors import ConfigurationError, InvalidJobOptions
from ratchet.domain.lifecycle import JobStatus, is_allowed
from ratchet.domain.takeover import (
    TakeoverPolicy,
    missed_start,
    schedule_to_start,
    start_by,
    takeover_policy,
)
from ratchet.domain.type_limits import RATE_WINDOW, InvalidTypeLimit, TypeLimit, decide
from ratchet.domain.watcher import JobLiveness, WatcherAction, WatcherSettings, classify
from ratchet.domain.watcher import takeover_eligible as eligible

T0 = datetime(2026, 1, 1, tzinfo=UTC)
US = timedelta(microseconds=1)
S = WatcherSettings()
TAGS = st.frozensets(st.sampled_from(["gpu", "eu", "us", "arm64", "spot"]), max_size=5)


# ---------------------------------------------------------------------------------- affinity
@given(require=TAGS, exclude=TAGS, node=TAGS)
def test_a_node_may_run_a_job_iff_it_has_every_required_tag_and_no_excluded_one(
    require: frozenset[str], exclude: frozenset[str], node: frozenset[str]
) -> None:
    if require & exclude:
        with pytest.raises(ConflictingAffinity, match="both required and excluded"):
            Affinity(require, exclude)
        return
    affinity = Affinity(require, exclude)
    assert affinity.allows(node) == (all(t in node for t in require) and not (exclude & node))
    assert affinity.allows(node | require - exclude) or bool(exclude & node)
    assert Affinity().allows(node), "a job without affinity runs anywhere"
    assert affinity.empty == (not require and not exclude)


@given(require=TAGS, exclude=TAGS, nodes=st.lists(TAGS, max_size=4))
def test_runnable_anywhere_is_some_node_allowing_it(
    require: frozenset[str], exclude: frozenset[str], nodes: list[frozenset[str]]
) -> None:
    exclude = exclude - require
    affinity = Affinity(require, exclude)
    assert runnable_anywhere(affinity, nodes) == any(affinity.allows(n) for n in nodes)
    assert not runnable_anywhere(affinity, []), "no live node runs nothing"


def test_tags_are_trimmed_lower_cased_and_checked() -> None:
    assert node_tags(" GPU, eu ,,region:eu-west.1 ") == {"gpu", "eu", "region:eu-west.1"}
    assert node_tags([]) == frozenset() and node_tags("") == frozenset()
    assert node_tag("Zone_1") == "zone_1"
    for bad, why in [
        ("g pu", "malformed"),
        ("-gpu", "malformed"),
        ("gpu!", "malformed"),
        ("é", "malformed"),
        ("  ", "blank"),
        ("x" * 65, "at most 64"),
    ]:
        with pytest.raises(InvalidTag, match=why):
            node_tag(bad)
    with pytest.raises(InvalidTag, match="must be a string"):
        node_tags([3])  # type: ignore[list-item]
    with pytest.raises(InvalidTag):
        Affinity(frozenset({"bad tag"}))
    assert issubclass(InvalidTag, InvalidJobOptions) and issubclass(InvalidTag, ConfigurationError)


def test_worker_tags_are_validated_at_configuration() -> None:
    assert WorkerConfig(tags="gpu,EU").tags == {"gpu", "eu"}  # type: ignore[arg-type]
    assert WorkerConfig(tags=["arm64"]).tags == {"arm64"}  # type: ignore[arg-type]
    with pytest.raises(InvalidTag, match="'g pu' is malformed"):
        WorkerConfig(tags="gpu, g pu")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------- type limits
REQUESTS = st.lists(st.integers(min_value=0, max_value=600_000), min_size=1, max_size=60)


@given(rate=st.integers(min_value=0, max_value=6), offsets=REQUESTS)
def test_the_rate_never_admits_more_than_n_starts_in_any_minute(
    rate: int, offsets: list[int]
) -> None:
    """Requests at arbitrary times (ms), each admitted or deferred: the admitted starts never
    exceed the rate in any 60 s window, and a deferral names the first instant that admits."""
    limit = TypeLimit("app:job", rate_per_minute=rate)
    starts: list[datetime] = []
    for offset in sorted(offsets):
        now = T0 + timedelta(milliseconds=offset)
        d = decide(limit, now, recent_starts=starts, executing=0)
        if d.admitted:
            starts.append(now)
            continue
        assert d.retry_at is not None and d.retry_at > now and d.reason
        if rate > 0:
            assert decide(limit, d.retry_at, recent_starts=starts, executing=0).admitted
            before = d.retry_at - US
            if before > now:
                assert not decide(limit, before, recent_starts=starts, executing=0).admitted
    for s in starts:
        assert sum(1 for t in starts if s <= t < s + RATE_WINDOW) <= rate
    if rate == 0:
        assert starts == []


@given(
    cap=st.integers(min_value=0, max_value=5),
    executing=st.integers(min_value=0, max_value=8),
    rate=st.none() | st.integers(min_value=1, max_value=5),
)
def test_the_cap_admits_only_below_it(cap: int, executing: int, rate: int | None) -> None:
    limit = TypeLimit("app:job", rate_per_minute=rate, max_concurrent=cap)
    d = decide(limit, T0, recent_starts=[], executing=executing)
    assert d.admitted == (executing < cap)
    if not d.admitted:
        assert d.retry_at == T0 + limit.retry_delay
        assert d.reason is not None and f"{executing}/{cap}" in d.reason
    assert decide(None, T0, recent_starts=[T0] * 99, executing=99).admitted, "no limit"


def test_type_limits_refuse_misuse() -> None:
    for kwargs, why in [
        ({"rate_per_minute": -1}, "integer >= 0"),
        ({"max_concurrent": -3}, "integer >= 0"),
        ({"max_concurrent": 1.5}, "integer >= 0"),
        ({"max_concurrent": True}, "integer >= 0"),
        ({}, "bounds nothing"),
        ({"max_concurrent": 1, "retry_delay": timedelta(0)}, "positive timedelta"),
    ]:
        with pytest.raises(InvalidTypeLimit, match=why):
            TypeLimit("app:job", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeLimit, match="module:qualname"):
        TypeLimit("nocolon", max_concurrent=1)
    assert TypeLimit(" app:job ", max_concurrent=0).target == "app:job"


# ---------------------------------------------------------------------------------- T14
def live(status: JobStatus, **kw: object) -> JobLiveness:
    fields: dict[str, object] = {
        "job_id": uuid.uuid4(),
        "status": status,
        "epoch": 1,
        "picked_by": None if status is JobStatus.PENDING else "a",
        "picked_at": None if status is JobStatus.PENDING else T0,
        "last_progress_at": None,
        "timed_out_at": None,
        "takeovers": 0,
        "attempts": 0,
    }
    fields.update(kw)
    return JobLiveness(**fields)  # type: ignore[arg-type]


@given(
    deadline=st.integers(min_value=1, max_value=10**9),
    waited=st.integers(min_value=0, max_value=2 * 10**9),
)
def test_a_pending_job_misses_its_start_exactly_at_its_deadline(deadline: int, waited: int) -> None:
    due = T0
    by = start_by(due, timedelta(microseconds=deadline))
    now = due + timedelta(microseconds=waited)
    action = classify(live(JobStatus.PENDING, start_by=by), now, S, owner_alive=False)
    assert (action is WatcherAction.MISSED_START) == (waited >= deadline) == missed_start(by, now)
    # off by default: no deadline, no T14; and only PENDING jobs miss their start
    assert classify(live(JobStatus.PENDING), now, S, owner_alive=False) is WatcherAction.NONE
    running = live(JobStatus.RUNNING, start_by=by)
    assert classify(running, now, S, owner_alive=True) is WatcherAction.NONE
    assert is_allowed(JobStatus.PENDING, JobStatus.FAILED)


def test_schedule_to_start_and_policies_refuse_misuse() -> None:
    assert schedule_to_start(timedelta(seconds=1)) == timedelta(seconds=1)
    for bad in (timedelta(0), timedelta(seconds=-1), 5, timedelta(days=366)):
        with pytest.raises(InvalidJobOptions, match="schedule_to_start"):
            schedule_to_start(bad)
    assert start_by(T0, None) is None and not missed_start(None, T0)
    assert takeover_policy("restart") is TakeoverPolicy.RESTART
    assert takeover_policy(TakeoverPolicy.FAIL) is TakeoverPolicy.FAIL
    with pytest.raises(InvalidJobOptions, match="RESUME, RESTART, FAIL"):
        takeover_policy("retry")


# ---------------------------------------------------------------------------------- takeovers
@given(
    policy=st.sampled_from([None, *TakeoverPolicy]),
    waited=st.integers(min_value=0, max_value=400),
    takeovers=st.integers(min_value=0, max_value=4),
    owner_alive=st.booleans(),
)
def test_fail_is_never_taken_over_and_expires_once_eligible(
    policy: TakeoverPolicy | None, waited: int, takeovers: int, owner_alive: bool
) -> None:
    """RESUME and RESTART are eligible exactly when the default is; FAIL never is, and the
    watcher expires it as soon as the default would have let a taker have it."""
    tmo = T0 - timedelta(seconds=waited)
    job = live(JobStatus.TIMED_OUT, timed_out_at=tmo, takeovers=takeovers, takeover_policy=policy)
    default = live(JobStatus.TIMED_OUT, timed_out_at=tmo, takeovers=takeovers)
    may = eligible(job, T0, S, owner_alive=owner_alive, taker="b")
    would = eligible(default, T0, S, owner_alive=owner_alive, taker="b")
    action = classify(job, T0, S, owner_alive=owner_alive)
    if policy is TakeoverPolicy.FAIL:
        assert not may
        past_grace = timedelta(seconds=waited) >= S.timed_out_grace
        assert (action is WatcherAction.EXPIRE) == past_grace
    else:
        assert may == would
        assert action is classify(default, T0, S, owner_alive=owner_alive)
