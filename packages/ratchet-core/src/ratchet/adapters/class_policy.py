"""Built-in plugin: the package-prefix class policy (deny-all until configured)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ratchet import hookimpl

if TYPE_CHECKING:
    from ratchet.config import RatchetConfig
    from ratchet.ports import ClassPolicy


class PackagePrefixClassPolicy:
    """Allows targets in the listed modules and their submodules, nothing else.

    A prefix never matches across a dot boundary: ``myapp`` allows ``myapp`` and ``myapp.jobs``,
    not ``myapp_evil``.
    """

    def __init__(self, prefixes: Iterable[str]) -> None:
        self.prefixes = tuple(p.strip().rstrip(".") for p in prefixes if p and p.strip())
        self._modules: dict[str, bool] = {}  # the answer per module (the prefixes never change)

    def is_allowed(self, module: str, qualname: str) -> bool:
        allowed = self._modules.get(module)
        if allowed is None:
            allowed = any(module == p or module.startswith(p + ".") for p in self.prefixes)
            if len(self._modules) < 10_000:
                self._modules[module] = allowed
        return allowed


class DenyAllClassPolicy:
    """Refuses every target (used when the app opted out of configuring a policy)."""

    def is_allowed(self, module: str, qualname: str) -> bool:
        return False


@hookimpl(trylast=True)
def ratchet_class_policy(config: RatchetConfig) -> ClassPolicy | None:
    if config.allowed_modules:
        return PackagePrefixClassPolicy(config.allowed_modules)
    if config.allow_empty_class_policy:
        return DenyAllClassPolicy()
    return None
