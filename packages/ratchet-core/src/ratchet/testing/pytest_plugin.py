"""pytest plugin for Ratchet's own tests and for adapter authors (filled in below)."""

from __future__ import annotations
