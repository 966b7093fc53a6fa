"""The service layer: scheduler API, worker and job task, written only against ports."""

from __future__ import annotations
