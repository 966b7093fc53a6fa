"""Resource limits (pure): names, limits and their validation.

A resource is a name that jobs declare with ``with_resource(name)``. Its limit says how many jobs
holding it may execute at once across the whole cluster, and how long a job that finds no free
permit waits before it is tried again. A resource without a registered limit is unlimited.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ratchet.domain.errors import InvalidJobOptions

MAX_RESOURCE_NAME = 100
DEFAULT_RETRY_DELAY = timedelta(seconds=5)


def validate_resource_name(name: str) -> str:
    """Trim and check a resource name: 1..100 printable ASCII characters.

    :raises InvalidJobOptions: not a string, blank, too long, or other characters.
    """
    if not isinstance(name, str):
        raise InvalidJobOptions(f"resource name must be a string, got {type(name).__name__}")
    trimmed = name.strip()
    if not trimmed:
        raise InvalidJobOptions("resource name must not be blank (pass None for no resource)")
    if len(trimmed) > MAX_RESOURCE_NAME:
        raise InvalidJobOptions(
            f"resource name is {len(trimmed)} characters; at most {MAX_RESOURCE_NAME} allowed"
        )
    bad = next((c for c in trimmed if not " " <= c <= "~"), None)
    if bad is not None:
        raise InvalidJobOptions(
            f"resource name contains {bad!r}; only printable ASCII (U+0020..U+007E) is allowed"
        )
    return trimmed


@dataclass(frozen=True)
class ResourceLimit:
    """At most ``max_concurrent`` jobs of ``name`` execute at once, cluster-wide.

    ``max_concurrent`` 0 holds every job of the resource back (a pause switch). A job that finds
    no free permit is rescheduled ``retry_delay`` later without consuming a retry.
    """

    name: str
    max_concurrent: int
    retry_delay: timedelta = DEFAULT_RETRY_DELAY
    description: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", validate_resource_name(self.name))
        if (
            not isinstance(self.max_concurrent, int)
            or isinstance(self.max_concurrent, bool)
            or self.max_concurrent < 0
        ):
            raise InvalidJobOptions(
                f"max_concurrent of resource {self.name!r} must be an integer >= 0, "
                f"got {self.max_concurrent!r}"
            )
        if not isinstance(self.retry_delay, timedelta) or self.retry_delay <= timedelta(0):
            raise InvalidJobOptions(
                f"retry_delay of resource {self.name!r} must be a positive timedelta, "
                f"got {self.retry_delay!r}"
            )
        if self.retry_delay < timedelta(milliseconds=1):
            raise InvalidJobOptions(f"retry_delay of resource {self.name!r} is below 1 ms")


def parse_resource_limits(value: Mapping[str, Any] | None) -> tuple[ResourceLimit, ...]:
    """Limits from configuration: ``{name: max}``, ``{name: (max, retry_delay)}`` or
    ``{name: ResourceLimit(...)}``; a retry delay may be a timedelta or seconds.

    :raises InvalidJobOptions: a malformed entry or value.
    """
    limits: list[ResourceLimit] = []
    for name, spec in (value or {}).items():
        if isinstance(spec, ResourceLimit):
            if spec.name != validate_resource_name(name):
                raise InvalidJobOptions(f"resource_limits[{name!r}] names {spec.name!r}")
            limits.append(spec)
            continue
        if isinstance(spec, int) and not isinstance(spec, bool):
            limits.append(ResourceLimit(name, spec))
            continue
        if isinstance(spec, tuple | list) and len(spec) == 2:
            delay = spec[1]
            if isinstance(delay, int | float) and not isinstance(delay, bool):
                delay = timedelta(seconds=delay)
            limits.append(ResourceLimit(name, spec[0], delay))
            continue
        raise InvalidJobOptions(
            f"resource_limits[{name!r}] must be max_concurrent, (max_concurrent, retry_delay) "
            f"or a ResourceLimit, got {spec!r}"
        )
    return tuple(limits)


@dataclass(frozen=True)
class PermitDecision:
    """The answer to a permit request."""

    granted: bool
    in_use: int
    """Permits of the resource held after the decision (including this one if granted)."""
    limit: int | None
    """The resource's max_concurrent, or None when it has no limit (unlimited)."""
    retry_delay: timedelta | None = None
    """When refused: how long until the job should try again."""
    owned: bool = True
    """False when the job is no longer this node's attempt (nothing was acquired)."""


@dataclass(frozen=True)
class PermitRecord:
    """One held permit: one attempt (job, epoch) of one node executing against a resource."""

    resource_name: str
    job_id: uuid.UUID
    epoch: int
    node_id: str
    acquired_at: datetime
