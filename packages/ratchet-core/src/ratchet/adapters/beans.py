"""Built-in plugin: the default bean resolver (registered instances, else one per class)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, TypeVar

from ratchet import hookimpl

if TYPE_CHECKING:
    from ratchet.config import RatchetConfig
    from ratchet.ports import BeanResolver

T = TypeVar("T")


class DefaultBeanResolver:
    """Returns a registered instance of the class, else constructs it once with no arguments."""

    def __init__(self) -> None:
        self._registered: dict[type, Any] = {}
        self._cache: dict[type, Any] = {}
        self._lock = threading.Lock()

    def register(self, instance: object) -> None:
        """Use ``instance`` whenever its class is asked for."""
        with self._lock:
            self._registered[type(instance)] = instance

    def resolve(self, cls: type[T]) -> T:
        with self._lock:
            if cls in self._registered:
                return self._registered[cls]  # type: ignore[no-any-return]
            if cls not in self._cache:
                self._cache[cls] = cls()
            return self._cache[cls]  # type: ignore[no-any-return]

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()


@hookimpl(trylast=True)
def ratchet_bean_resolver(config: RatchetConfig) -> BeanResolver:
    return DefaultBeanResolver()
