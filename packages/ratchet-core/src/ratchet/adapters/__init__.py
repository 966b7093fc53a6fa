"""Built-in plugins, registered through the same hooks as third-party adapters."""

from __future__ import annotations
