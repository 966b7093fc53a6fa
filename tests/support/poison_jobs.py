"""Jobs whose errors, results or side effects are hard to store or must not happen."""

from __future__ import annotations

RAN: list[str] = []
"""Names of the jobs whose bodies ran in this process."""


def ok(n: int) -> int:
    RAN.append(f"ok-{n}")
    return n


def raise_nul() -> None:
    raise ValueError("bad\x00nul")


def raise_surrogate() -> None:
    raise ValueError("bad \ud800 surrogate")


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


def raise_unprintable() -> None:
    raise UnprintableError()


def return_nul() -> str:
    return "a\x00b"


def side_effect(name: str) -> None:
    RAN.append(name)
