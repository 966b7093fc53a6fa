"""Ratchet for Python in Django: a ``django.tasks`` backend, jobs written in Django's own
transactions, the ``ratchet_worker`` management command.

``enqueue`` and ``submit`` are imported lazily: they need configured Django settings.
"""

from __future__ import annotations

from typing import Any

try:  # the wheel's own copy of ratchet-core's install check (see pyproject.toml)
    from ratchet_django._distribution import check_adapter
except ModuleNotFoundError:  # a source checkout, where `ratchet` is the workspace's own
    from ratchet._distribution import check_adapter

__version__ = "0.2.0"

# Before anything is imported from ``ratchet``: that may be another project's package.
check_adapter("ratchet-django", __version__)

__all__ = ["enqueue", "get_app", "submit"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from ratchet_django import jobs

        return getattr(jobs, name)
    raise AttributeError(f"module 'ratchet_django' has no attribute {name!r}")
