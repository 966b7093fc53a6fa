"""Built-in plugin: circuit breakers per service (the default), or the pass-through strategy.

The state machine is :mod:`ratchet.domain.breaker` (failure rate over a window of calls, minimum
calls, trial calls when half-open, neutral ignored exceptions, time as a parameter): pybreaker
counts consecutive failures, reads the wall clock itself and treats excluded exceptions as
successes, so it cannot express those profiles. pybreaker is used where it fits: an application
can bind a ``pybreaker.CircuitBreaker`` it already has (for instance one whose state lives in
Redis and is shared by the cluster) to a service with :meth:`CircuitBreakerResilience.use_pybreaker`.
``Ratchet(..., circuit_breakers=False)`` selects :class:`PassThroughResilience`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import pybreaker

from ratchet import hookimpl
from ratchet.clock import SystemClock
from ratchet.domain.breaker import (
    BreakerProfile,
    BreakerSpec,
    BreakerState,
    CircuitBreaker,
    CircuitOpenError,
    Permit,
    Transition,
    Verdict,
    check_profile_name,
    classify,
    resolve_profiles,
)
from ratchet.ports import Clock, ResilienceStrategy

if TYPE_CHECKING:
    from ratchet.config import RatchetConfig

T = TypeVar("T")
log = logging.getLogger("ratchet.breakers")

ChangeListener = Callable[[Transition], None]
NO_SPEC = BreakerSpec()


class PassThroughResilience:
    """Every service is always available; calls run unguarded (``circuit_breakers=False``)."""

    def is_available(self, service: str) -> bool:
        return True

    def retry_delay(self, service: str) -> timedelta:
        return timedelta(seconds=30)

    def execute(self, service: str, call: Callable[[], T]) -> T:
        return call()

    def configure(self, service: str, spec: BreakerSpec) -> None:
        return None

    def state(self, service: str) -> BreakerState:
        return BreakerState.DISABLED

    def attach(self, clock: Clock, on_change: ChangeListener) -> None:
        return None


_PYBREAKER_STATES = {
    pybreaker.STATE_CLOSED: BreakerState.CLOSED,
    pybreaker.STATE_OPEN: BreakerState.OPEN,
    pybreaker.STATE_HALF_OPEN: BreakerState.HALF_OPEN,
}


class _PybreakerBinding(pybreaker.CircuitBreakerListener):
    """A service guarded by an application's own ``pybreaker.CircuitBreaker``."""

    def __init__(
        self, service: str, breaker: pybreaker.CircuitBreaker, owner: CircuitBreakerResilience
    ) -> None:
        self.service = service
        self.breaker = breaker
        self.owner = owner
        self.opened_at = owner.clock.now() if self.state() is BreakerState.OPEN else None
        breaker.add_listener(self)

    def state(self) -> BreakerState:
        return _PYBREAKER_STATES.get(self.breaker.current_state, BreakerState.CLOSED)

    def state_change(self, cb: Any, old_state: Any, new_state: Any) -> None:
        now = self.owner.clock.now()
        new = _PYBREAKER_STATES.get(new_state.name, BreakerState.CLOSED)
        old = _PYBREAKER_STATES.get(old_state.name, BreakerState.CLOSED) if old_state else new
        self.opened_at = now if new is BreakerState.OPEN else None
        if old is not new:
            self.owner.publish([Transition(self.service, old, new, now)])

    def _wait(self) -> timedelta:
        return timedelta(seconds=self.breaker.reset_timeout)

    def is_available(self) -> bool:
        if self.state() is not BreakerState.OPEN or self.opened_at is None:
            return True
        return self.owner.clock.now() >= self.opened_at + self._wait()

    def retry_delay(self) -> timedelta:
        if self.state() is BreakerState.OPEN and self.opened_at is not None:
            remaining = self.opened_at + self._wait() - self.owner.clock.now()
            if remaining > timedelta(0):
                return remaining
        return self._wait()

    def execute(self, call: Callable[[], T]) -> T:
        raised: list[BaseException] = []
        invoked = False

        def wrapped() -> T:
            nonlocal invoked
            invoked = True
            try:
                return call()
            except BaseException as exc:
                raised.append(exc)
                raise

        try:
            return self.breaker.call(wrapped)
        except pybreaker.CircuitBreakerError as exc:
            if not invoked:
                raise CircuitOpenError(self.service, self.retry_delay()) from exc
            if raised:
                raise raised[0] from None  # the job's own error, not pybreaker's "tripped"
            raise


class CircuitBreakerResilience:
    """One breaker per service name, created on first use with its profile.

    :param profiles: overrides of the built-in profiles' numbers.
    :param default_profile: the profile of services configured without one.
    :param clock: where time comes from (the app attaches its own clock).
    """

    def __init__(
        self,
        profiles: Mapping[str, BreakerProfile | Mapping[str, Any]] | None = None,
        default_profile: str = "DEFAULT",
        clock: Clock | None = None,
    ) -> None:
        self.profiles = resolve_profiles(profiles)
        self.default_profile = check_profile_name(default_profile)
        self.clock: Clock = clock or SystemClock()
        self._listeners: list[ChangeListener] = []
        self._specs: dict[str, BreakerSpec] = {}
        self._breakers: dict[str, CircuitBreaker] = {}
        self._bound: dict[str, _PybreakerBinding] = {}
        self._lock = threading.Lock()

    # -- wiring ------------------------------------------------------------------------------
    def attach(self, clock: Clock, on_change: ChangeListener) -> None:
        """Read time from ``clock``; report every state change to ``on_change``."""
        self.clock = clock
        with self._lock:
            self._listeners.append(on_change)

    def publish(self, changes: list[Transition]) -> None:
        """Tell the listeners (outside the lock; their errors are logged)."""
        if not changes:
            return
        with self._lock:
            listeners = list(self._listeners)
        for change in changes:
            log.warning(
                "circuit breaker %s: %s -> %s", change.service, change.old.value, change.new.value
            )
            for listener in listeners:
                try:
                    listener(change)
                except Exception:
                    log.exception("breaker listener failed on %s", change.service)

    def _profile_of(self, spec: BreakerSpec) -> BreakerProfile:
        if isinstance(spec.profile, BreakerProfile):
            return spec.profile
        return self.profiles[spec.profile or self.default_profile]

    def configure(self, service: str, spec: BreakerSpec) -> None:
        """Guard ``service`` with ``spec``'s profile and exception filters (keeps its state)."""
        with self._lock:
            if self._specs.get(service) == spec:
                return
            self._specs[service] = spec
            breaker = self._breakers.get(service)
            if breaker is not None:
                breaker.profile = self._profile_of(spec)

    def use_pybreaker(self, service: str, breaker: pybreaker.CircuitBreaker) -> None:
        """Guard ``service`` with an existing ``pybreaker.CircuitBreaker`` (its own rules)."""
        binding = _PybreakerBinding(service, breaker, self)
        with self._lock:
            self._bound[service] = binding

    def _breaker(self, service: str) -> CircuitBreaker:
        """The service's breaker (caller holds the lock)."""
        breaker = self._breakers.get(service)
        if breaker is None:
            spec = self._specs.get(service, NO_SPEC)
            breaker = CircuitBreaker(service, self._profile_of(spec))
            self._breakers[service] = breaker
        return breaker

    # -- the ResilienceStrategy port ---------------------------------------------------------
    def is_available(self, service: str) -> bool:
        bound = self._bound.get(service)
        if bound is not None:
            return bound.is_available()
        known = self._breakers.get(service)
        if known is not None and known.state is BreakerState.CLOSED:
            return True  # a closed breaker lets every call start: no clock, no lock
        now = self.clock.now()
        with self._lock:
            return self._breaker(service).is_available(now)

    def retry_delay(self, service: str) -> timedelta:
        bound = self._bound.get(service)
        if bound is not None:
            return bound.retry_delay()
        now = self.clock.now()
        with self._lock:
            return self._breaker(service).retry_delay(now)

    def execute(self, service: str, call: Callable[[], T]) -> T:
        """Run ``call`` if the breaker lets it, and count its outcome.

        :raises CircuitOpenError: the breaker refused the call (it did not run).
        """
        bound = self._bound.get(service)
        if bound is not None:
            return bound.execute(call)
        known = self._breakers.get(service)
        # A CLOSED breaker's permit is read without the lock or the clock (see closed_permit).
        permit = None if known is None else known.closed_permit
        if permit is None:
            now = self.clock.now()
            with self._lock:
                breaker = self._breaker(service)
                permit, changes = breaker.try_acquire(now)
                delay = breaker.retry_delay(now) if permit is None else None
            self.publish(changes)
            if permit is None:
                raise CircuitOpenError(service, delay or timedelta(0))
        try:
            value = call()
        except Exception as exc:
            spec = self._specs.get(service, NO_SPEC)
            self._finish(service, permit, classify(exc, spec.record, spec.ignore))
            raise
        except BaseException:
            self._finish(service, permit, Verdict.IGNORED)
            raise
        # A healthy breaker's success changes nothing: no clock, no lock (the job threads would
        # otherwise all queue on this registry's one lock after every call).
        if known is None or not known.success_changes_nothing(permit):
            self._finish(service, permit, Verdict.SUCCESS)
        return value

    def _finish(self, service: str, permit: Permit, verdict: Verdict) -> None:
        now = self.clock.now()
        with self._lock:
            changes = self._breaker(service).record(permit, verdict, now)
        if changes:
            self.publish(changes)

    # -- observing and operating --------------------------------------------------------------
    def state(self, service: str) -> BreakerState:
        """The service's state (an unused service is CLOSED)."""
        bound = self._bound.get(service)
        if bound is not None:
            return bound.state()
        with self._lock:
            breaker = self._breakers.get(service)
            return BreakerState.CLOSED if breaker is None else breaker.state

    def states(self) -> dict[str, BreakerState]:
        """Each breaker's state now (the services used or configured so far)."""
        with self._lock:
            services = {*self._specs, *self._breakers, *self._bound}
        return {service: self.state(service) for service in sorted(services)}

    def breaker(self, service: str) -> CircuitBreaker:
        """The state machine of ``service`` (read it for metrics; do not mutate it)."""
        with self._lock:
            return self._breaker(service)

    def force_open(self, service: str) -> None:
        """Open the service's breaker now (an operator's decision)."""
        now = self.clock.now()
        with self._lock:
            changes = self._breaker(service).force_open(now)
        self.publish(changes)

    def reset(self, service: str) -> None:
        """Close the service's breaker now and forget its window."""
        now = self.clock.now()
        with self._lock:
            changes = self._breaker(service).reset(now)
        self.publish(changes)


@hookimpl(trylast=True)
def ratchet_resilience_strategy(config: RatchetConfig) -> ResilienceStrategy:
    if not config.circuit_breakers:
        return PassThroughResilience()
    return CircuitBreakerResilience(config.breaker_profiles, config.default_breaker_profile)
