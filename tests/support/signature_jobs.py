"""Job functions with various signatures, for the submit-time argument check."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def two(a: int, b: int) -> int:
    return a + b


def keyword_only(*, when: str, where: str = "here") -> str:
    return f"{when} {where}"


def anything(*args: Any, **kwargs: Any) -> None:
    return None


def item(n: int) -> int:
    return n


def item_and_flag(n: int, flag: bool) -> int:
    return n


def _logged(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


@_logged
def decorated(value: int) -> int:
    """Its wrapper takes anything: the worker calls the wrapper, so anything is accepted."""
    return value


def callback_without_context() -> None:
    return None


def on_failure_without_error(ctx: Any) -> None:
    return None


class Mailer:
    """A bean: the worker supplies the instance."""

    def send(self, to: str, subject: str = "hi") -> str:
        return f"{to}: {subject}"

    @classmethod
    def build(cls, n: int) -> int:
        return n

    @staticmethod
    def check(n: int) -> int:
        return n
