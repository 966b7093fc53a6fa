"""Circuit breakers (pure): profiles, exception classification and the state machine.

A breaker watches the last ``window`` calls of one service. Once at least ``minimum_calls`` have
been recorded and the share of failures reaches ``failure_rate`` percent, it OPENS: calls are
refused for ``wait``. Then it is HALF_OPEN: ``half_open_calls`` trial calls may run; if all of
them succeed it CLOSES again, if any fails it OPENS again. Time is always a parameter, and nothing
here locks: the adapter serialises access.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ratchet.domain.errors import ConfigurationError, RatchetError
from ratchet.domain.text import json_object_of, storable_text

F = TypeVar("F", bound=Callable[..., Any])

#: Attribute under which :func:`circuit_breaker` stores its :class:`BreakerSpec` on a function.
SPEC_ATTRIBUTE = "__ratchet_circuit_breaker__"


class BreakerState(enum.StrEnum):
    """Where a service's breaker stands."""

    CLOSED = "CLOSED"
    """Calls run; outcomes are counted."""
    OPEN = "OPEN"
    """Calls are refused until the wait is over."""
    HALF_OPEN = "HALF_OPEN"
    """A few trial calls run; they decide between CLOSED and OPEN."""
    DISABLED = "DISABLED"
    """No breaker at all (the pass-through strategy, ``circuit_breakers=False``)."""


@dataclass(frozen=True)
class BreakerProfile:
    """The numbers of a breaker.

    :param failure_rate: percent of failed calls (0 < rate <= 100) that opens the breaker.
    :param window: how many of the most recent calls are counted.
    :param wait: how long the breaker stays OPEN before trial calls are let through.
    :param half_open_calls: trial calls in HALF_OPEN; all must succeed to close again.
    :param minimum_calls: calls recorded before the failure rate is taken seriously.
    """

    failure_rate: float
    window: int
    wait: timedelta
    half_open_calls: int
    minimum_calls: int

    def __post_init__(self) -> None:
        if not 0 < self.failure_rate <= 100:
            raise ConfigurationError(
                f"breaker failure_rate must be a percentage in (0, 100], got {self.failure_rate}"
            )
        for name in ("window", "half_open_calls", "minimum_calls"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigurationError(
                    f"breaker {name} must be a positive integer, got {value!r}"
                )
        if self.minimum_calls > self.window:
            raise ConfigurationError(
                f"breaker minimum_calls ({self.minimum_calls}) cannot exceed the window "
                f"({self.window}): the breaker could never open"
            )
        if not isinstance(self.wait, timedelta) or self.wait <= timedelta(0):
            raise ConfigurationError(
                f"breaker wait must be a positive timedelta, got {self.wait!r}"
            )


#: The profiles of the original (failure rate %, window, wait, half-open calls, minimum calls).
PROFILES: Mapping[str, BreakerProfile] = {
    "DEFAULT": BreakerProfile(50, 100, timedelta(seconds=30), 3, 5),
    "FAST": BreakerProfile(50, 20, timedelta(seconds=10), 2, 3),
    "CRITICAL": BreakerProfile(75, 200, timedelta(seconds=60), 5, 10),
    "EXTERNAL_API": BreakerProfile(60, 50, timedelta(seconds=60), 3, 5),
}


def check_profile_name(name: str) -> str:
    """Return ``name`` if it names a built-in profile.

    :raises ConfigurationError: any other name (the message lists the valid ones).
    """
    if not isinstance(name, str) or name not in PROFILES:
        raise ConfigurationError(
            f"unknown circuit-breaker profile {name!r}; choose one of {', '.join(PROFILES)} "
            "or pass a BreakerProfile(...)"
        )
    return name


def resolve_profiles(
    overrides: Mapping[str, BreakerProfile | Mapping[str, Any]] | None,
) -> dict[str, BreakerProfile]:
    """The built-in profiles with configured numbers applied.

    An override is a :class:`BreakerProfile` or a mapping of some of its fields (``wait`` may be
    a number of seconds), e.g. ``{"FAST": {"wait": 5}}``.

    :raises ConfigurationError: an unknown profile name, field or value.
    """
    profiles = dict(PROFILES)
    for name, value in (overrides or {}).items():
        base = profiles[check_profile_name(name)]
        if isinstance(value, BreakerProfile):
            profiles[name] = value
            continue
        if not isinstance(value, Mapping):
            raise ConfigurationError(
                f"profile {name}: expected a BreakerProfile or a mapping, got {value!r}"
            )
        fields: dict[str, Any] = {
            "failure_rate": base.failure_rate,
            "window": base.window,
            "wait": base.wait,
            "half_open_calls": base.half_open_calls,
            "minimum_calls": base.minimum_calls,
        }
        unknown = set(value) - set(fields)
        if unknown:
            raise ConfigurationError(
                f"profile {name}: unknown setting(s) {', '.join(sorted(unknown))}; "
                f"known: {', '.join(fields)}"
            )
        fields.update(value)
        if isinstance(fields["wait"], int | float) and not isinstance(fields["wait"], bool):
            fields["wait"] = timedelta(seconds=fields["wait"])
        profiles[name] = BreakerProfile(**fields)
    return profiles


ExceptionTypes = tuple[type[BaseException], ...]


@dataclass(frozen=True)
class BreakerSpec:
    """How a job target is guarded (what :func:`circuit_breaker` records).

    ``service`` None means the target's ``module.qualname``; ``profile`` None means the app's
    default profile.
    """

    service: str | None = None
    profile: str | BreakerProfile | None = None
    record: ExceptionTypes = ()
    ignore: ExceptionTypes = ()


def _exception_types(value: Any, what: str) -> ExceptionTypes:
    if isinstance(value, type):
        value = (value,)
    types = tuple(value or ())
    for t in types:
        if not (isinstance(t, type) and issubclass(t, BaseException)):
            raise ConfigurationError(f"{what} must list exception classes, got {t!r}")
    return types


def make_spec(
    service: str | None = None,
    profile: str | BreakerProfile | None = None,
    record: Any = (),
    ignore: Any = (),
) -> BreakerSpec:
    """A validated :class:`BreakerSpec`.

    :raises ConfigurationError: a blank service, an unknown profile, or non-exception classes.
    """
    if service is not None and (not isinstance(service, str) or not service.strip()):
        raise ConfigurationError(f"breaker service must be a non-blank string, got {service!r}")
    if profile is not None and not isinstance(profile, BreakerProfile):
        check_profile_name(profile)
    return BreakerSpec(
        service.strip() if service else None,
        profile,
        _exception_types(record, "record"),
        _exception_types(ignore, "ignore"),
    )


def circuit_breaker(
    service: str | None = None,
    *,
    profile: str | BreakerProfile | None = None,
    record: Any = (),
    ignore: Any = (),
) -> Callable[[F], F]:
    """Declare how a job target is guarded by a circuit breaker.

    :param service: the breaker's name (default: the target's ``module.qualname``). Targets
        sharing a service share a breaker.
    :param profile: ``"DEFAULT"``, ``"FAST"``, ``"CRITICAL"``, ``"EXTERNAL_API"`` or a
        :class:`BreakerProfile` (default: the app's default profile).
    :param record: exception classes that count as failures (default: every exception).
    :param ignore: exception classes that count as neither success nor failure; a match wins
        over ``record``. Both are matched along the cause / context chain.

    Returns the function itself (with the spec attached), so it stays importable by name.

    :raises ConfigurationError: at decoration time, for an unknown profile or a bad argument.
    """
    spec = make_spec(service, profile, record, ignore)

    def decorate(fn: F) -> F:
        target = getattr(fn, "__func__", fn)
        setattr(target, SPEC_ATTRIBUTE, spec)
        return fn

    return decorate


def spec_of(fn: Any) -> BreakerSpec | None:
    """The spec :func:`circuit_breaker` attached to ``fn`` (or its underlying function)."""
    spec = getattr(fn, SPEC_ATTRIBUTE, None)
    return spec if isinstance(spec, BreakerSpec) else None


class Verdict(enum.Enum):
    """How a finished call counts."""

    SUCCESS = "success"
    FAILURE = "failure"
    IGNORED = "ignored"
    """Neither success nor failure (an ignored or unrecorded exception)."""


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` then its causes / contexts, as a traceback would show them (cycle-safe)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        if current.__cause__ is not None:
            current = current.__cause__
        elif not current.__suppress_context__:
            current = current.__context__
        else:
            current = None


def classify(exc: BaseException, record: ExceptionTypes, ignore: ExceptionTypes) -> Verdict:
    """FAILURE, or IGNORED when an ``ignore`` class matches anywhere in the chain (that wins)
    or when ``record`` is given and matches nowhere."""
    chain = list(exception_chain(exc))
    if ignore and any(isinstance(e, ignore) for e in chain):
        return Verdict.IGNORED
    if record and not any(isinstance(e, record) for e in chain):
        return Verdict.IGNORED
    return Verdict.FAILURE


class CircuitOpenError(RatchetError):
    """A call was refused because the service's breaker is open (the job is rescheduled)."""

    def __init__(self, service: str, retry_delay: timedelta) -> None:
        super().__init__(
            f"circuit breaker for {service!r} is open; try again in "
            f"{retry_delay.total_seconds():g} s"
        )
        self.service = service
        self.retry_delay = retry_delay


@dataclass(frozen=True)
class Transition:
    """A change of state, to publish as an event."""

    service: str
    old: BreakerState
    new: BreakerState
    at: datetime


@dataclass(frozen=True)
class Permit:
    """The right to make one call; its outcome is counted only in the generation it began in."""

    generation: int
    trial: bool


@dataclass
class CircuitBreaker:
    """The state machine of one service's breaker. Not thread-safe: callers hold a lock."""

    service: str
    profile: BreakerProfile
    state: BreakerState = BreakerState.CLOSED
    opened_at: datetime | None = None
    generation: int = 0
    """Bumped on every state change; outcomes of calls from an older generation are dropped."""
    _outcomes: deque[bool] = field(default_factory=deque, repr=False)
    _failures: int = 0
    _trials_running: int = 0
    _trials_passed: int = 0
    closed_permit: Permit | None = field(init=False, repr=False, compare=False)
    """The permit every call gets while CLOSED (None in any other state): one attribute, so a
    caller may read it without the lock. A permit read just before a state change belongs to
    the older generation, and its call's outcome is dropped like any other from before it."""

    def __post_init__(self) -> None:
        self.closed_permit = self._permit_of(self.state)

    # -- reading -----------------------------------------------------------------------------
    def failure_rate(self) -> float | None:
        """Percent of failures in the window, or None below the minimum number of calls."""
        if len(self._outcomes) < self.profile.minimum_calls:
            return None
        return 100.0 * self._failures / len(self._outcomes)

    def calls_in_window(self) -> int:
        return len(self._outcomes)

    def success_changes_nothing(self, permit: Permit) -> bool:
        """Whether recording a success under ``permit`` would leave the breaker as it is: it is
        CLOSED in the permit's generation and its full window holds no failure, so the success
        only replaces the oldest success. May be asked without the lock: a failure recorded
        meanwhile leaves the same window as if this success had been counted just before it."""
        return (
            permit is self.closed_permit
            and self._failures == 0
            and len(self._outcomes) == self.profile.window
        )

    def _wait_over(self, now: datetime) -> bool:
        return self.opened_at is None or now >= self.opened_at + self.profile.wait

    def is_available(self, now: datetime) -> bool:
        """Whether a call could start now (does not change the state)."""
        if self.state is BreakerState.OPEN:
            return self._wait_over(now)
        if self.state is BreakerState.HALF_OPEN:
            return self._trials_running + self._trials_passed < self.profile.half_open_calls
        return True

    def retry_delay(self, now: datetime) -> timedelta:
        """How long a refused call should wait: until the breaker half-opens, or one full wait
        while the trial calls of a HALF_OPEN breaker are still running."""
        if self.state is BreakerState.OPEN and self.opened_at is not None:
            remaining = self.opened_at + self.profile.wait - now
            if remaining > timedelta(0):
                return remaining
        return self.profile.wait

    # -- changing ----------------------------------------------------------------------------
    def _permit_of(self, state: BreakerState) -> Permit | None:
        return Permit(self.generation, trial=False) if state is BreakerState.CLOSED else None

    def _move(self, new: BreakerState, now: datetime) -> Transition:
        old, self.state = self.state, new
        self.generation += 1
        self.closed_permit = self._permit_of(new)
        self._outcomes.clear()
        self._failures = 0
        self._trials_running = 0
        self._trials_passed = 0
        self.opened_at = now if new is BreakerState.OPEN else None
        return Transition(self.service, old, new, now)

    def try_acquire(self, now: datetime) -> tuple[Permit | None, list[Transition]]:
        """A permit for one call (None: refused), plus any state change this caused."""
        changes: list[Transition] = []
        if self.state is BreakerState.OPEN:
            if not self._wait_over(now):
                return None, changes
            changes.append(self._move(BreakerState.HALF_OPEN, now))
        if self.state is BreakerState.HALF_OPEN:
            if self._trials_running + self._trials_passed >= self.profile.half_open_calls:
                return None, changes
            self._trials_running += 1
            return Permit(self.generation, trial=True), changes
        return self.closed_permit, changes

    def record(self, permit: Permit, verdict: Verdict, now: datetime) -> list[Transition]:
        """Count a finished call; returns the state change it caused, if any."""
        if permit.generation != self.generation:
            return []  # the breaker moved on while this call ran
        if self.state is BreakerState.HALF_OPEN:
            self._trials_running -= 1
            if verdict is Verdict.FAILURE:
                return [self._move(BreakerState.OPEN, now)]
            if verdict is Verdict.SUCCESS:
                self._trials_passed += 1
                if self._trials_passed >= self.profile.half_open_calls:
                    return [self._move(BreakerState.CLOSED, now)]
            return []  # IGNORED: the trial permit is given back
        if self.state is not BreakerState.CLOSED or verdict is Verdict.IGNORED:
            return []
        failed = verdict is Verdict.FAILURE
        if len(self._outcomes) == self.profile.window:
            self._failures -= self._outcomes.popleft()
        self._outcomes.append(failed)
        self._failures += failed
        rate = self.failure_rate()
        if rate is not None and rate >= self.profile.failure_rate:
            return [self._move(BreakerState.OPEN, now)]
        return []

    def force_open(self, now: datetime) -> list[Transition]:
        """Open now (an operator's decision); the wait starts now."""
        if self.state is BreakerState.OPEN:
            self.opened_at = now
            return []
        return [self._move(BreakerState.OPEN, now)]

    def reset(self, now: datetime) -> list[Transition]:
        """Close now and forget the window."""
        if self.state is BreakerState.CLOSED:
            self._outcomes.clear()
            self._failures = 0
            return []
        return [self._move(BreakerState.CLOSED, now)]


#: Most breakers a node publishes with its heartbeat (the open ones first, then by name).
MAX_PUBLISHED_BREAKERS = 50
#: Longest service name a node publishes (longer ones are cut).
MAX_PUBLISHED_NAME = 200


def published_breakers(states: Mapping[str, BreakerState]) -> dict[str, str]:
    """What a node publishes of its breakers: those not CLOSED, service name to state, at most
    :data:`MAX_PUBLISHED_BREAKERS` (OPEN before HALF_OPEN), names cut to
    :data:`MAX_PUBLISHED_NAME` characters and made storable."""
    shown = sorted(
        ((name, state) for name, state in states.items() if state is not BreakerState.CLOSED),
        key=lambda item: (item[1] is not BreakerState.OPEN, item[0]),
    )
    return {
        storable_text(name)[:MAX_PUBLISHED_NAME]: state.value
        for name, state in shown[:MAX_PUBLISHED_BREAKERS]
    }


def read_published_breakers(text: str | None) -> dict[str, str]:
    """The breakers a node published (empty for none, or for text that is not what
    :func:`published_breakers` writes)."""
    known = {state.value for state in BreakerState}
    return {k: v for k, v in json_object_of(text).items() if isinstance(v, str) and v in known}
