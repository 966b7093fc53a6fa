"""Ratchet for Python: a persistent, database-backed job scheduler."""

from __future__ import annotations

import pluggy

hookimpl = pluggy.HookimplMarker("ratchet")

__version__ = "0.1.0"
