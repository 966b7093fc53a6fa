"""Built-in plugin: the package-prefix class policy (deny-all until configured)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ratchet import hookimpl


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
def ratchet_class_policy(config: Any) -> Any:
    modules = tuple(getattr(config, "allowed_modules", ()) or ())
    if modules:
        return PackagePrefixClassPolicy(modules)
    if getattr(config, "allow_empty_class_policy", False):
        return DenyAllClassPolicy()
    return None
