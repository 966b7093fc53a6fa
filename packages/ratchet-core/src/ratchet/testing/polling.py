"""Waiting in tests for something another thread or process makes true.

A test that waits for a worker, a server or a child process cannot be told the moment its
condition holds; it asks again until a deadline. These helpers are that loop, written once:
the interval bounds how late the test notices, the deadline how long a broken run hangs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

DEFAULT_INTERVAL = 0.01
"""Seconds between two checks unless the caller says otherwise."""


def wait_until(
    predicate: Callable[[], object], timeout: float, *, interval: float = DEFAULT_INTERVAL
) -> bool:
    """Check ``predicate`` until it is truthy (True) or ``timeout`` seconds passed (False).

    It is checked once more at the deadline, so a condition that became true while the last
    interval passed is not reported as missed."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(interval, remaining))


def assert_eventually(
    predicate: Callable[[], object],
    timeout: float,
    what: str = "the condition",
    *,
    interval: float = DEFAULT_INTERVAL,
) -> None:
    """:func:`wait_until`, failing the test with ``AssertionError`` naming ``what`` when the
    deadline passes."""
    if not wait_until(predicate, timeout, interval=interval):
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


__all__ = ["DEFAULT_INTERVAL", "assert_eventually", "wait_until"]
