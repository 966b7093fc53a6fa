"""Built-in plugin: the pass-through resilience strategy (no circuit breaking).

Circuit breakers on pybreaker replace this with their own provider hook.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from ratchet import hookimpl

T = TypeVar("T")


class PassThroughResilience:
    """Every service is always available; calls run unguarded."""

    def is_available(self, service: str) -> bool:
        return True

    def retry_delay(self, service: str) -> timedelta:
        return timedelta(seconds=30)

    def execute(self, service: str, call: Callable[[], T]) -> T:
        return call()


@hookimpl(trylast=True)
def ratchet_resilience_strategy(config: Any) -> Any:
    return PassThroughResilience()
