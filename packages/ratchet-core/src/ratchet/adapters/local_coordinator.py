"""Built-in plugin: the in-process coordinator (wakeups reach only this process's workers)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ratchet import hookimpl
from ratchet.adapters.wakeups import Listeners
from ratchet.ports import WakeupHint

if TYPE_CHECKING:
    from ratchet.registry import CoordinatorRegistry

log = logging.getLogger("ratchet.coordinator.local")


class LocalClusterCoordinator:
    """Delivers hints synchronously to listeners in this process. Needs no infrastructure."""

    name = "local"
    cross_process = False
    """Hints reach only listeners in this process."""

    def __init__(self) -> None:
        self._listeners = Listeners(log)

    def notify_new_work(self, hint: WakeupHint) -> None:
        self._listeners.deliver(hint)

    def add_listener(self, listener: Callable[[WakeupHint], None]) -> None:
        self._listeners.add(listener)

    def close(self) -> None:
        self._listeners.close()


@hookimpl
def ratchet_register_coordinators(registry: CoordinatorRegistry) -> None:
    registry.add("local", lambda spec, context: LocalClusterCoordinator())
