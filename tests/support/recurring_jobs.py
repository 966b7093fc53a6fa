"""Recurring job functions for in-process tests (an importable module, as real jobs must be)."""

from __future__ import annotations

import threading
from typing import Any

from ratchet import JobContext
from ratchet.domain.recurring import FIRE_TIME_PARAM

CALLS: list[tuple[str, Any]] = []
_lock = threading.Lock()


def heartbeat() -> None:
    """No argument: what most recurring jobs look like."""
    with _lock:
        CALLS.append(("heartbeat", None))


def cleanup() -> None:
    """Another argument-less job."""
    with _lock:
        CALLS.append(("cleanup", None))


def report(region: str) -> str:
    """Takes arguments: only the programmatic API (``schedule_recurring``) can pass them."""
    with _lock:
        CALLS.append(("report", region))
    return region


def with_context(ctx: JobContext) -> str | None:
    """Takes the running JobContext (a decorator passes it)."""
    fire = ctx.param(FIRE_TIME_PARAM)
    with _lock:
        CALLS.append(("with_context", (ctx.job_id, fire)))
    return fire


async def async_with_context(ctx: JobContext) -> str | None:
    """An ``async def`` recurring job taking the JobContext."""
    return ctx.param(FIRE_TIME_PARAM)
