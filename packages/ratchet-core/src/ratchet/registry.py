"""A name -> factory registry that refuses silent duplicates."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

from ratchet.domain.errors import ConfigurationError

F = TypeVar("F")


class Registry(Mapping[str, F], Generic[F]):
    """Names mapped to factories, filled by registry hooks."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, F] = {}
        self._owners: dict[str, str] = {}

    def add(self, name: str, factory: F, *, owner: str = "?") -> None:
        """Register ``factory`` under ``name``.

        :raises ConfigurationError: two plugins claim the same name.
        """
        key = name.lower()
        if key in self._items:
            raise ConfigurationError(
                f"two plugins register the {self.kind} {name!r}: {self._owners[key]} and {owner}"
            )
        self._items[key] = factory
        self._owners[key] = owner

    def owner(self, name: str) -> str:
        return self._owners[name.lower()]

    def __getitem__(self, name: str) -> F:
        return self._items[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)
