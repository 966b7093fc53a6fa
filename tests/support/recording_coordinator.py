"""A wakeup coordinator that records the hints it is asked to publish, registered by a test
plugin through the ``ratchet_register_coordinators`` hook as a real coordinator plugin would be
(``coordinator="recording"``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ratchet import hookimpl
from ratchet.ports import WakeupHint


class RecordingCoordinator:
    """Records every hint it is asked to publish."""

    def __init__(self) -> None:
        self.sent: list[WakeupHint] = []
        self.closed = False

    def notify_new_work(self, hint: WakeupHint) -> None:
        self.sent.append(hint)

    def add_listener(self, listener: Callable[[WakeupHint], None]) -> None:
        return None

    def close(self) -> None:
        self.closed = True


class RecordingPlugin:
    """Registers one :class:`RecordingCoordinator` as the coordinator named ``recording``."""

    def __init__(self) -> None:
        self.coordinator = RecordingCoordinator()

    @hookimpl
    def ratchet_register_coordinators(self, registry: Any) -> None:
        registry.add("recording", lambda spec, context=None: self.coordinator)
