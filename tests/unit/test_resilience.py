"""The built-in resilience strategies: breakers per service, pybreaker bindings, pass-through."""

from __future__ import annotations

from datetime import timedelta

import pybreaker
import pytest

from ratchet import BreakerState, CircuitOpenError
from ratchet.adapters.resilience import (
    CircuitBreakerResilience,
    PassThroughResilience,
    ratchet_resilience_strategy,
)
from ratchet.config import RatchetConfig
from ratchet.domain.breaker import Transition, make_spec
from ratchet.ports import BreakerRegistry
from ratchet.testing import FakeClock


class Boom(Exception):
    pass


def fail() -> None:
    raise Boom("down")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def changes() -> list[Transition]:
    return []


@pytest.fixture
def registry(clock: FakeClock, changes: list[Transition]) -> CircuitBreakerResilience:
    reg = CircuitBreakerResilience({"FAST": {"minimum_calls": 2, "half_open_calls": 1}})
    reg.attach(clock, changes.append)
    return reg


def trip(reg: CircuitBreakerResilience, service: str, n: int = 2) -> None:
    for _ in range(n):
        with pytest.raises(Boom):
            reg.execute(service, fail)


def test_the_hook_picks_breakers_unless_disabled() -> None:
    assert isinstance(ratchet_resilience_strategy(RatchetConfig()), CircuitBreakerResilience)
    off = ratchet_resilience_strategy(RatchetConfig(circuit_breakers=False))
    assert isinstance(off, PassThroughResilience) and isinstance(off, BreakerRegistry)
    assert off.state("x") is BreakerState.DISABLED
    assert off.execute("x", lambda: 42) == 42 and off.is_available("x")


def test_each_service_has_its_own_breaker(
    registry: CircuitBreakerResilience, clock: FakeClock, changes: list[Transition]
) -> None:
    registry.configure("pay", make_spec("pay", "FAST"))
    trip(registry, "pay")
    assert registry.state("pay") is BreakerState.OPEN
    assert registry.state("mail") is BreakerState.CLOSED
    assert registry.execute("mail", lambda: "sent") == "sent"
    assert [(c.service, c.old, c.new, c.at) for c in changes] == [
        ("pay", BreakerState.CLOSED, BreakerState.OPEN, clock.now())
    ]


def test_an_open_breaker_refuses_without_calling(
    registry: CircuitBreakerResilience, clock: FakeClock
) -> None:
    registry.configure("pay", make_spec("pay", "FAST"))
    trip(registry, "pay")
    clock.advance(4)
    calls: list[int] = []
    assert not registry.is_available("pay")
    assert registry.retry_delay("pay") == timedelta(seconds=6)
    with pytest.raises(CircuitOpenError) as err:
        registry.execute("pay", lambda: calls.append(1))
    assert calls == [] and err.value.service == "pay"
    assert err.value.retry_delay == timedelta(seconds=6)


def test_half_open_trial_closes_the_breaker(
    registry: CircuitBreakerResilience, clock: FakeClock, changes: list[Transition]
) -> None:
    registry.configure("pay", make_spec("pay", "FAST"))
    trip(registry, "pay")
    clock.advance(10)
    assert registry.is_available("pay")
    assert registry.execute("pay", lambda: "ok") == "ok"
    assert [c.new for c in changes] == [
        BreakerState.OPEN,
        BreakerState.HALF_OPEN,
        BreakerState.CLOSED,
    ]


def test_record_and_ignore_filters(registry: CircuitBreakerResilience) -> None:
    registry.configure("svc", make_spec("svc", "FAST", record=Boom, ignore=KeyError))
    for exc in (ValueError("not recorded"), KeyError("ignored")):

        def raise_it(e: Exception = exc) -> None:
            raise e

        for _ in range(5):
            with pytest.raises(type(exc)):
                registry.execute("svc", raise_it)
    assert registry.state("svc") is BreakerState.CLOSED
    assert registry.breaker("svc").calls_in_window() == 0
    trip(registry, "svc")
    assert registry.state("svc") is BreakerState.OPEN


def test_reconfiguring_keeps_the_state_but_changes_the_profile(
    registry: CircuitBreakerResilience,
) -> None:
    registry.configure("svc", make_spec("svc", "FAST"))
    trip(registry, "svc")
    registry.configure("svc", make_spec("svc", "CRITICAL"))
    assert registry.state("svc") is BreakerState.OPEN
    assert registry.retry_delay("svc") == timedelta(seconds=60)


def test_operators_can_open_and_reset(
    registry: CircuitBreakerResilience, changes: list[Transition]
) -> None:
    registry.force_open("svc")
    assert not registry.is_available("svc")
    registry.reset("svc")
    assert registry.is_available("svc")
    assert [c.new for c in changes] == [BreakerState.OPEN, BreakerState.CLOSED]


def test_a_failing_listener_does_not_break_the_call(
    registry: CircuitBreakerResilience, changes: list[Transition]
) -> None:
    def broken(change: Transition) -> None:
        raise RuntimeError("listener bug")

    registry.attach(registry.clock, broken)
    registry.force_open("svc")
    assert [c.new for c in changes] == [BreakerState.OPEN]


def test_base_exceptions_are_neutral(registry: CircuitBreakerResilience) -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    for _ in range(5):
        with pytest.raises(KeyboardInterrupt):
            registry.execute("svc", interrupted)
    assert registry.state("svc") is BreakerState.CLOSED


# ------------------------------------------------------------------------------ pybreaker
def test_a_pybreaker_breaker_can_guard_a_service(
    registry: CircuitBreakerResilience, changes: list[Transition]
) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=2, reset_timeout=60)
    registry.use_pybreaker("legacy", cb)
    assert registry.execute("legacy", lambda: "ok") == "ok"
    with pytest.raises(Boom):
        registry.execute("legacy", fail)
    with pytest.raises(Boom, match="down"):  # the job's error, not pybreaker's "tripped"
        registry.execute("legacy", fail)
    assert registry.state("legacy") is BreakerState.OPEN
    assert not registry.is_available("legacy")
    assert registry.retry_delay("legacy") == timedelta(seconds=60)
    called: list[int] = []
    with pytest.raises(CircuitOpenError) as err:
        registry.execute("legacy", lambda: called.append(1))
    assert called == [] and isinstance(err.value.__cause__, pybreaker.CircuitBreakerError)
    assert [(c.service, c.new) for c in changes] == [("legacy", BreakerState.OPEN)]
    cb.close()
    assert registry.state("legacy") is BreakerState.CLOSED and registry.is_available("legacy")
