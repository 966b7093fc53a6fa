"""Job functions for the benchmarks."""

from __future__ import annotations


def noop(i: int) -> None:
    return None
