"""The scheduler API of the execution gates: resource limits and circuit breakers.

Mixed into :class:`~ratchet.engine.app.Ratchet`; see ``docs/resource-limits.md`` and
``docs/circuit-breakers.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ratchet.domain.breaker import BreakerProfile, BreakerState, Transition, make_spec, spec_of
from ratchet.domain.errors import ConfigurationError
from ratchet.domain.resources import (
    DEFAULT_RETRY_DELAY,
    PermitRecord,
    ResourceLimit,
    parse_resource_limits,
    validate_resource_name,
)
from ratchet.domain.type_limits import DEFAULT_LIMIT_DELAY, TypeLimit
from ratchet.events import EventKind, JobEvent
from ratchet.ports import BreakerRegistry, PermitStore, TypeLimitStore

if TYPE_CHECKING:
    from ratchet.config import RatchetConfig
    from ratchet.ports import Clock, ResilienceStrategy, Store


class LimitsApi:
    """Resource limits and breakers of an app (needs ``store``, ``resilience``, ``clock``)."""

    if TYPE_CHECKING:
        config: RatchetConfig
        store: Store
        resilience: ResilienceStrategy
        clock: Clock

        def emit(self, event: JobEvent) -> None: ...

    def wire_limits(self) -> None:
        """Attach the breakers to this app's clock and events; store configured limits."""
        if isinstance(self.resilience, BreakerRegistry):
            self.resilience.attach(self.clock, self._on_breaker_change)
        limits = parse_resource_limits(self.config.resource_limits)
        if limits:
            permits = self._permit_store()
            for limit in limits:
                permits.set_resource_limit(limit, now=self.clock.now())

    # -- resource limits -----------------------------------------------------------------------
    def _permit_store(self) -> PermitStore:
        permits = self.store.capability(PermitStore)  # type: ignore[type-abstract]
        if permits is None:
            raise ConfigurationError(
                f"the {self.store.capabilities.dialect} store does not support resource limits"
            )
        return permits

    def register_resource_limit(
        self,
        name: str,
        max_concurrent: int,
        retry_delay: timedelta = DEFAULT_RETRY_DELAY,
        *,
        description: str | None = None,
    ) -> ResourceLimit:
        """Allow at most ``max_concurrent`` jobs of resource ``name`` to execute at once, across
        every worker sharing this database (0 holds them all back). A job finding no free
        permit is rescheduled ``retry_delay`` later without consuming a retry. Registering again
        updates the limit. A resource never registered is unlimited.

        :raises InvalidJobOptions: a bad name, a negative limit or a non-positive delay.
        """
        limit = ResourceLimit(name, max_concurrent, retry_delay, description)
        self._permit_store().set_resource_limit(limit, now=self.clock.now())
        return limit

    def resource_limit(self, name: str) -> ResourceLimit | None:
        """The limit of ``name``, or None (unlimited)."""
        return self._permit_store().get_resource_limit(validate_resource_name(name))

    def resource_limits(self) -> list[ResourceLimit]:
        """Every registered limit."""
        return self._permit_store().list_resource_limits()

    def remove_resource_limit(self, name: str) -> bool:
        """Make ``name`` unlimited again; False if it had no limit."""
        return self._permit_store().delete_resource_limit(validate_resource_name(name))

    def permits(self, resource: str | None = None) -> list[PermitRecord]:
        """Permits held now (of one resource, or all): who executes against what."""
        return self._permit_store().list_permits(resource)

    # -- per execution type limits ------------------------------------------------------------
    def _type_store(self) -> TypeLimitStore:
        store = self.store.capability(TypeLimitStore)  # type: ignore[type-abstract]
        if store is None:
            raise ConfigurationError(
                f"the {self.store.capabilities.dialect} store does not support type limits"
            )
        return store

    @staticmethod
    def _type_name(target: str | Callable[..., Any]) -> str:
        if isinstance(target, str):
            return target.strip()
        from ratchet.targets import target_of

        return str(target_of(target))

    def register_type_limit(
        self,
        target: str | Callable[..., Any],
        *,
        rate_per_minute: int | None = None,
        max_concurrent: int | None = None,
        retry_delay: timedelta = DEFAULT_LIMIT_DELAY,
    ) -> TypeLimit:
        """Bound the jobs of one execution type (a job function, or its ``module:qualname``)
        across every worker sharing this database: at most ``rate_per_minute`` attempts start
        in any 60 s window, at most ``max_concurrent`` execute at once. An attempt over a bound
        is rescheduled without consuming a retry (to when the window frees a start, or after
        ``retry_delay`` for the cap). Registering again replaces the limit; running workers see
        it within 5 s.

        :raises InvalidTypeLimit: a negative or non-integer bound, no bound, a bad target.
        """
        limit = TypeLimit(self._type_name(target), rate_per_minute, max_concurrent, retry_delay)
        self._type_store().set_type_limit(limit, now=self.clock.now())
        return limit

    def type_limit(self, target: str | Callable[..., Any]) -> TypeLimit | None:
        """The limit of an execution type, or None (unlimited)."""
        return self._type_store().get_type_limit(self._type_name(target))

    def type_limits(self) -> list[TypeLimit]:
        """Every per execution type limit."""
        return self._type_store().list_type_limits()

    def remove_type_limit(self, target: str | Callable[..., Any]) -> bool:
        """Make an execution type unlimited again; False if it had no limit."""
        return self._type_store().delete_type_limit(self._type_name(target))

    # -- circuit breakers ----------------------------------------------------------------------
    def _registry(self) -> BreakerRegistry:
        if not isinstance(self.resilience, BreakerRegistry):
            raise ConfigurationError(
                f"the resilience strategy {type(self.resilience).__name__} has no named breakers"
            )
        return self.resilience

    def _on_breaker_change(self, change: Transition) -> None:
        self.emit(
            JobEvent(
                EventKind.BREAKER_STATE_CHANGED,
                None,
                change.at,
                data={"service": change.service, "old": change.old, "new": change.new},
            )
        )

    @staticmethod
    def breaker_service(target: str | Callable[..., Any]) -> str:
        """The breaker service of a job target (``@circuit_breaker(service=...)`` or
        ``module.qualname``), or ``target`` itself when it is already a name."""
        if isinstance(target, str):
            return target
        spec = spec_of(target)
        if spec is not None and spec.service:
            return spec.service
        from ratchet.targets import target_of

        return target_of(target).service_name

    def breaker_state(self, service: str | Callable[..., Any]) -> BreakerState:
        """The state of a service's breaker in this process (DISABLED without breakers)."""
        return self._registry().state(self.breaker_service(service))

    def configure_breaker(
        self,
        service: str | Callable[..., Any],
        *,
        profile: str | BreakerProfile | None = None,
        record: Any = (),
        ignore: Any = (),
    ) -> None:
        """Guard a service like ``@circuit_breaker`` would (for targets you cannot decorate).

        :raises ConfigurationError: an unknown profile or non-exception classes.
        """
        name = self.breaker_service(service)
        self._registry().configure(name, make_spec(name, profile, record, ignore))

    def _operate(self, action: str, service: str | Callable[..., Any]) -> None:
        operate = getattr(self.resilience, action, None)
        if operate is None:
            raise ConfigurationError(
                f"the resilience strategy {type(self.resilience).__name__} cannot {action}"
            )
        operate(self.breaker_service(service))

    def open_breaker(self, service: str | Callable[..., Any]) -> None:
        """Open a service's breaker now: its jobs are rescheduled until it half-opens."""
        self._operate("force_open", service)

    def reset_breaker(self, service: str | Callable[..., Any]) -> None:
        """Close a service's breaker now and forget its recent calls."""
        self._operate("reset", service)
