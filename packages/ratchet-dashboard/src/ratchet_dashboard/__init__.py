"""A web dashboard for Ratchet for Python: an ASGI application (Starlette, server-rendered
pages) that shows the queue, jobs, dead letters, recurring jobs and the cluster, and lets an
operator act on them. Build it with :func:`create_dashboard`; ``ratchet dashboard`` serves it.
"""

from __future__ import annotations

from typing import Any

try:  # the wheel's own copy of ratchet-core's install check (see pyproject.toml)
    from ratchet_dashboard._distribution import check_adapter
except ModuleNotFoundError:  # a source checkout, where `ratchet` is the workspace's own
    from ratchet._distribution import check_adapter

__version__ = "0.2.0"

# Before anything is imported from ``ratchet``: that may be another project's package.
check_adapter("ratchet-dashboard", __version__)

__all__ = ["DashboardConfigError", "DashboardSettings", "create_dashboard"]


def __getattr__(name: str) -> Any:
    if name == "create_dashboard":
        from ratchet_dashboard.app import create_dashboard

        return create_dashboard
    if name in ("DashboardSettings", "DashboardConfigError"):
        from ratchet_dashboard import settings

        return getattr(settings, name)
    raise AttributeError(f"module 'ratchet_dashboard' has no attribute {name!r}")
