"""Built-in plugin: the in-process coordinator (wakeups reach only this process's workers)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ratchet import hookimpl
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
        self._listeners: list[Callable[[WakeupHint], None]] = []
        self._lock = threading.Lock()
        self._closed = False

    def notify_new_work(self, hint: WakeupHint) -> None:
        with self._lock:
            listeners = [] if self._closed else list(self._listeners)
        for listener in listeners:
            try:
                listener(hint)
            except Exception:
                log.exception("wakeup listener failed")

    def add_listener(self, listener: Callable[[WakeupHint], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._listeners.clear()


@hookimpl
def ratchet_register_coordinators(registry: CoordinatorRegistry) -> None:
    registry.add("local", lambda spec, context: LocalClusterCoordinator())
