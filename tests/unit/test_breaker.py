"""The circuit-breaker state machine (pure, driven by a FakeClock) and its profiles."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratchet import BreakerProfile, BreakerState, ConfigurationError, circuit_breaker
from ratchet.domain.breaker import (
    PROFILES,
    CircuitBreaker,
    Verdict,
    classify,
    exception_chain,
    make_spec,
    resolve_profiles,
    spec_of,
)
from ratchet.testing import FakeClock

S, F, IGN = Verdict.SUCCESS, Verdict.FAILURE, Verdict.IGNORED
CLOSED, OPEN, HALF = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN


def call(b: CircuitBreaker, clock: FakeClock, verdict: Verdict) -> list[BreakerState]:
    """One call through the breaker; returns the states it moved to."""
    permit, moves = b.try_acquire(clock.now())
    assert permit is not None, f"refused in {b.state}"
    moves += b.record(permit, verdict, clock.now())
    return [m.new for m in moves]


def profile(**kw: object) -> BreakerProfile:
    base = {"failure_rate": 50, "window": 10, "wait": timedelta(seconds=30)}
    base.update({"half_open_calls": 2, "minimum_calls": 4})
    base.update(kw)
    return BreakerProfile(**base)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ profiles
def test_the_builtin_profiles_have_the_original_numbers() -> None:
    def numbers(p: BreakerProfile) -> tuple[float, int, float, int, int]:
        return (
            p.failure_rate,
            p.window,
            p.wait.total_seconds(),
            p.half_open_calls,
            p.minimum_calls,
        )

    assert {name: numbers(p) for name, p in PROFILES.items()} == {
        "DEFAULT": (50, 100, 30, 3, 5),
        "FAST": (50, 20, 10, 2, 3),
        "CRITICAL": (75, 200, 60, 5, 10),
        "EXTERNAL_API": (60, 50, 60, 3, 5),
    }


def test_profiles_are_configurable() -> None:
    profiles = resolve_profiles({"FAST": {"wait": 5, "minimum_calls": 2}, "DEFAULT": profile()})
    assert profiles["FAST"].wait == timedelta(seconds=5)
    assert (profiles["FAST"].minimum_calls, profiles["FAST"].window) == (2, 20)
    assert profiles["DEFAULT"] == profile()
    assert profiles["CRITICAL"] == PROFILES["CRITICAL"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"SLOW": {"wait": 1}}, "unknown circuit-breaker profile 'SLOW'"),
        ({"FAST": {"waiting": 1}}, "unknown setting"),
        ({"FAST": {"failure_rate": 0}}, "failure_rate"),
        ({"FAST": {"failure_rate": 101}}, "failure_rate"),
        ({"FAST": {"window": 0}}, "window"),
        ({"FAST": {"half_open_calls": -1}}, "half_open_calls"),
        ({"FAST": {"minimum_calls": 21}}, "cannot exceed the window"),
        ({"FAST": {"wait": 0}}, "wait"),
        ({"FAST": 3}, "expected a BreakerProfile"),
    ],
)
def test_bad_profiles_are_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        resolve_profiles(overrides)  # type: ignore[arg-type]


def test_unknown_profile_is_refused_at_decoration_time() -> None:
    with pytest.raises(ConfigurationError, match="unknown circuit-breaker profile 'FASTER'"):
        circuit_breaker(profile="FASTER")
    with pytest.raises(ConfigurationError, match="exception classes"):
        circuit_breaker(record=["ConnectionError"])
    with pytest.raises(ConfigurationError, match="non-blank"):
        circuit_breaker(service="  ")


def test_decorator_keeps_the_function_and_attaches_its_spec() -> None:
    def job() -> None: ...

    decorated = circuit_breaker(service="svc", profile="CRITICAL", record=OSError)(job)
    assert decorated is job
    assert spec_of(job) == make_spec("svc", "CRITICAL", (OSError,), ())
    assert spec_of(print) is None


# ------------------------------------------------------------------------------ closed -> open
def test_opens_at_the_failure_rate_once_minimum_calls_are_reached() -> None:
    clock = FakeClock()
    b = CircuitBreaker("svc", profile(minimum_calls=4, failure_rate=50))
    assert call(b, clock, F) == [] and call(b, clock, F) == [] and call(b, clock, F) == []
    assert b.failure_rate() is None, "below the minimum number of calls"
    assert call(b, clock, S) == [OPEN], "3 failures of 4 calls = 75 % >= 50 %"
    assert not b.is_available(clock.now())


def test_stays_closed_below_the_rate() -> None:
    clock = FakeClock()
    b = CircuitBreaker("svc", profile(failure_rate=50, minimum_calls=4))
    for verdict in (S, F, S, S, F, S, S, F, S, S):  # 30 %
        assert call(b, clock, verdict) == []
    assert b.state is CLOSED and b.failure_rate() == pytest.approx(30.0)


def test_the_window_forgets_old_calls() -> None:
    clock = FakeClock()
    b = CircuitBreaker("svc", profile(window=4, minimum_calls=4, failure_rate=75))
    for verdict in (F, F, S, S, S, S):  # the two failures slide out of the window
        assert call(b, clock, verdict) == []
    assert b.failure_rate() == 0.0
    assert call(b, clock, F) == [] and call(b, clock, F) == []  # 50 %
    assert call(b, clock, F) == [OPEN]  # 75 %


def test_ignored_calls_count_as_neither_success_nor_failure() -> None:
    clock = FakeClock()
    b = CircuitBreaker("svc", profile(minimum_calls=2, failure_rate=100))
    for _ in range(10):
        assert call(b, clock, IGN) == []
    assert b.calls_in_window() == 0
    assert call(b, clock, F) == []
    assert call(b, clock, F) == [OPEN]


# ------------------------------------------------------------------------------ open -> half-open
def opened(clock: FakeClock, **kw: object) -> CircuitBreaker:
    b = CircuitBreaker("svc", profile(minimum_calls=1, failure_rate=50, **kw))
    assert call(b, clock, F) == [OPEN]
    return b


def test_open_refuses_until_the_wait_is_over_and_reports_the_remaining_wait() -> None:
    clock = FakeClock()
    b = opened(clock)
    clock.advance(12)
    assert b.try_acquire(clock.now()) == (None, [])
    assert b.retry_delay(clock.now()) == timedelta(seconds=18)
    clock.advance(timedelta(seconds=17, microseconds=999_999))
    assert not b.is_available(clock.now())
    clock.advance(timedelta(microseconds=1))
    assert b.is_available(clock.now())
    permit, moves = b.try_acquire(clock.now())
    assert permit is not None and permit.trial
    assert [(m.old, m.new, m.at) for m in moves] == [(OPEN, HALF, clock.now())]


def test_half_open_closes_after_all_trial_calls_succeed() -> None:
    clock = FakeClock()
    b = opened(clock, half_open_calls=3)
    clock.advance(30)
    assert call(b, clock, S) == [HALF]
    assert call(b, clock, S) == []
    assert call(b, clock, S) == [CLOSED]
    assert b.calls_in_window() == 0, "a closed breaker starts with a fresh window"


def test_half_open_reopens_on_any_failed_trial() -> None:
    clock = FakeClock()
    b = opened(clock, half_open_calls=3)
    clock.advance(30)
    assert call(b, clock, S) == [HALF]
    assert call(b, clock, F) == [OPEN]
    assert b.opened_at == clock.now(), "the wait starts again"
    assert b.retry_delay(clock.now()) == timedelta(seconds=30)


def test_half_open_admits_only_the_trial_calls_and_ignored_ones_give_back_their_permit() -> None:
    clock = FakeClock()
    b = opened(clock, half_open_calls=2)
    clock.advance(30)
    first, _ = b.try_acquire(clock.now())
    second, _ = b.try_acquire(clock.now())
    assert first is not None and second is not None
    assert b.try_acquire(clock.now())[0] is None and not b.is_available(clock.now())
    assert b.retry_delay(clock.now()) == timedelta(seconds=30)
    assert b.record(first, IGN, clock.now()) == []
    third, _ = b.try_acquire(clock.now())
    assert third is not None, "the ignored trial gave its permit back"
    assert b.record(second, S, clock.now()) == []
    assert [m.new for m in b.record(third, S, clock.now())] == [CLOSED]


def test_outcomes_of_calls_from_an_earlier_state_are_dropped() -> None:
    clock = FakeClock()
    b = CircuitBreaker("svc", profile(minimum_calls=1, failure_rate=50))
    slow, _ = b.try_acquire(clock.now())
    assert call(b, clock, F) == [OPEN]
    clock.advance(30)
    assert call(b, clock, S) == [HALF]
    assert slow is not None and b.record(slow, F, clock.now()) == []
    assert b.state is HALF


def test_force_open_and_reset() -> None:
    clock = FakeClock()
    b = CircuitBreaker("svc", profile())
    assert [m.new for m in b.force_open(clock.now())] == [OPEN]
    clock.advance(5)
    assert b.force_open(clock.now()) == [] and b.opened_at == clock.now()
    assert [m.new for m in b.reset(clock.now())] == [CLOSED]
    assert b.reset(clock.now()) == []


@given(st.lists(st.sampled_from([S, F, IGN]), max_size=200))
def test_closed_opens_exactly_when_the_rate_over_the_window_says(verdicts: list[Verdict]) -> None:
    """Model check: the breaker opens at the first call where the last ``window`` counted
    calls hold at least ``minimum_calls`` calls and ``failure_rate`` % failures."""
    clock = FakeClock()
    p = profile(window=7, minimum_calls=3, failure_rate=60)
    b = CircuitBreaker("svc", p)
    counted: list[bool] = []
    for verdict in verdicts:
        moves = call(b, clock, verdict)
        if verdict is not IGN:
            counted.append(verdict is F)
        window = counted[-p.window :]
        should_open = len(window) >= p.minimum_calls and 100 * sum(window) >= 60 * len(window)
        assert moves == ([OPEN] if should_open else [])
        if should_open:
            return


@given(st.lists(st.sampled_from([S, F, IGN]), max_size=120))
def test_a_success_said_to_change_nothing_changes_nothing(verdicts: list[Verdict]) -> None:
    """Whenever ``success_changes_nothing`` says so, recording a success leaves the state, the
    generation, the window and its failure count as they were (the registry then skips it)."""
    clock = FakeClock()
    b = CircuitBreaker("svc", profile(window=6, minimum_calls=3, failure_rate=60))
    skipped = 0
    for verdict in verdicts:
        permit, _ = b.try_acquire(clock.now())
        if permit is None:
            clock.advance(timedelta(seconds=31))  # let an open breaker half-open
            continue
        if b.success_changes_nothing(permit):
            before = (b.state, b.generation, list(b._outcomes), b._failures)
            assert b.record(permit, S, clock.now()) == []
            assert (b.state, b.generation, list(b._outcomes), b._failures) == before
            skipped += 1
        b.record(permit, verdict, clock.now())
    if verdicts[:7] == [S] * 7:
        assert skipped >= 1  # a full window of successes: the seventh success is a no-op


def test_a_success_is_not_a_no_op_until_the_window_is_full_or_after_a_failure() -> None:
    clock = FakeClock()
    b = CircuitBreaker("svc", profile(window=4, minimum_calls=4, failure_rate=50))
    for _ in range(3):
        call(b, clock, S)
    assert not b.success_changes_nothing(b.closed_permit)  # type: ignore[arg-type]
    call(b, clock, S)
    assert b.success_changes_nothing(b.closed_permit)  # type: ignore[arg-type]
    call(b, clock, F)
    assert not b.success_changes_nothing(b.closed_permit)  # type: ignore[arg-type]
    stale = b.closed_permit
    b.force_open(clock.now())
    assert stale is not None and not b.success_changes_nothing(stale)


# ------------------------------------------------------------------------------ classification
class Outage(Exception):
    pass


class Business(Exception):
    pass


def chained(outer: BaseException, inner: BaseException, *, cause: bool = True) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as exc:
            if cause:
                raise outer from exc
            raise outer  # noqa: B904 - implicit context on purpose
    except BaseException as exc:
        return exc


def test_classification_follows_the_cause_and_context_chain() -> None:
    assert classify(Outage(), (), ()) is F
    assert classify(Outage(), (), (Outage,)) is IGN
    assert classify(ValueError(), (Outage,), ()) is IGN, "not recorded: neither"
    assert classify(chained(RuntimeError("x"), Outage()), (Outage,), ()) is F
    assert classify(chained(RuntimeError("x"), Outage(), cause=False), (Outage,), ()) is F
    assert classify(chained(Outage(), Business()), (Outage,), (Business,)) is IGN, "ignore wins"


def test_suppressed_context_is_not_followed() -> None:
    try:
        try:
            raise Outage()
        except Outage:
            raise ValueError("clean") from None
    except ValueError as exc:
        assert [type(e) for e in exception_chain(exc)] == [ValueError]
        assert classify(exc, (Outage,), ()) is IGN


def test_exception_chain_survives_cycles() -> None:
    a, b = ValueError("a"), KeyError("b")
    a.__cause__, b.__cause__ = b, a
    assert [type(e) for e in exception_chain(a)] == [ValueError, KeyError]


def test_a_node_publishes_its_breakers_that_are_not_closed() -> None:
    from ratchet.domain.breaker import (
        MAX_PUBLISHED_BREAKERS,
        published_breakers,
        read_published_breakers,
    )

    states = {f"svc-{i:03}": BreakerState.HALF_OPEN for i in range(60)}
    states |= {
        "b-open": BreakerState.OPEN,
        "a-closed": BreakerState.CLOSED,
        "z\x00": BreakerState.OPEN,
    }
    shown = published_breakers(states)
    assert len(shown) == MAX_PUBLISHED_BREAKERS
    assert list(shown)[:2] == ["b-open", "z\\x00"], "open ones first, names made storable"
    assert "a-closed" not in shown
    assert read_published_breakers(json.dumps(shown)) == shown
    assert published_breakers({"x" * 500: BreakerState.OPEN}) == {"x" * 200: "OPEN"}
    for junk in (None, "", "not json", "[1]", '{"a": "BROKEN", "b": 3}'):
        assert read_published_breakers(junk) == {}
