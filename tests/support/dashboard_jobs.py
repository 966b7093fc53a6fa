"""Jobs for the dashboard's HTTP and browser tests."""

from __future__ import annotations

import os
import threading

from ratchet import JobContext

SECRET = "hunter2-Dashboard-77"


def ok(n: int = 0) -> int:
    return n


def charge(order: int, password: str = "", note: str = "") -> int:
    """Takes a sensitive argument (masked on every page)."""
    return order


def ship(order: int) -> None:
    """Fails for good, with a secret in its message (redacted before it is stored)."""
    raise ConnectionError(f"carrier API down for order {order} (token={SECRET})")


def logs_then_fails(order: int) -> None:
    JobContext.current().logger().info(f"packing order {order}")
    raise ValueError(f"order {order} has no address")


def fails_until(marker: str) -> str:
    """Fails while ``marker`` does not exist: replayed after the file appears, it succeeds."""
    if not os.path.exists(marker):
        raise RuntimeError(f"the shipping label for {os.path.basename(marker)} is missing")
    return "shipped"


def tick() -> None:
    """A recurring job's target."""


#: ``hold`` waits on these (by name) until a test sets them, at most 30 s.
GATES: dict[str, threading.Event] = {}
#: Names of the ``hold`` runs that have started.
STARTED: list[str] = []


def hold(name: str) -> str:
    STARTED.append(name)
    GATES.setdefault(name, threading.Event()).wait(timeout=30)
    return name
