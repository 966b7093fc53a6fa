"""The registries that registry hooks fill: names mapped to factories, refusing silent duplicates.

A registry hook receives one of the typed registries below and calls ``registry.add(name,
factory)``; the engine then looks factories up by name (case-insensitively).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import ClassVar, Generic, Self, TypeVar

from ratchet.domain.errors import ConfigurationError
from ratchet.ports import CoordinatorFactory, ExecutorFactory, StoreFactory

F = TypeVar("F")


class Registry(Mapping[str, F], Generic[F]):
    """Names mapped to factories of one kind, filled by a registry hook.

    Each plugin's hook implementation is given its own view (:meth:`owned_by`) sharing the
    entries, so an entry remembers which plugin added it and a clash names both plugins.
    """

    kind: ClassVar[str] = "factory"
    """What the factories make, for messages (``store``, ``coordinator``...)."""

    def __init__(self) -> None:
        self._items: dict[str, F] = {}
        self._owners: dict[str, str] = {}
        self._adder = "?"

    def owned_by(self, owner: str) -> Self:
        """A view of this registry whose :meth:`add` records ``owner`` as the entry's plugin."""
        view = copy.copy(self)  # shallow: the view shares the entries
        view._adder = owner
        return view

    def add(self, name: str, factory: F) -> None:
        """Register ``factory`` under ``name``.

        :raises ConfigurationError: ``name`` is not a non-empty string, ``factory`` is not
            callable, or another plugin already registered ``name``.
        """
        if not isinstance(name, str) or not name:
            raise ConfigurationError(
                f"plugin {self._adder} registers a {self.kind} under {name!r}: the name must be "
                "a non-empty string"
            )
        if not callable(factory):
            raise ConfigurationError(
                f"plugin {self._adder} registers the {self.kind} {name!r} with {factory!r}, "
                f"which is not callable: register a {self.kind} factory (a function or a class)"
            )
        key = name.lower()
        if key in self._items:
            raise ConfigurationError(
                f"two plugins register the {self.kind} {name!r}: {self._owners[key]} and "
                f"{self._adder}"
            )
        self._items[key] = factory
        self._owners[key] = self._adder

    def owner(self, name: str) -> str:
        """The plugin that registered ``name``."""
        return self._owners[name.lower()]

    def __getitem__(self, name: str) -> F:
        return self._items[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)


class StoreRegistry(Registry[StoreFactory]):
    """Store factories by URL scheme: the SQLAlchemy drivername before ``+`` (``sqlite``,
    ``postgresql``, ``mysql``)."""

    kind = "store"


class CoordinatorRegistry(Registry[CoordinatorFactory]):
    """Coordinator factories by name (``local``) or URL scheme (``redis``)."""

    kind = "coordinator"


class ExecutorRegistry(Registry[ExecutorFactory]):
    """Executor provider factories by name (``threads``, ``asyncio``, ``processes``)."""

    kind = "executor provider"
