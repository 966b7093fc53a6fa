"""Jobs for the liveness tests: checkpointing steps that can be made to hang mid-run."""

from __future__ import annotations

import threading
from typing import Any

from ratchet import JobContext
from ratchet.domain.errors import FencedOut

#: Runs wait here (by name) when told to; tests set the event to let them go.
GATES: dict[str, threading.Event] = {}
#: What each run saw: (name, epoch, first step, outcome or error).
RUNS: list[tuple[str, int, int, str]] = []
#: Runs currently blocked at their gate, by name.
WAITING: dict[str, int] = {}
_lock = threading.Lock()


def gate(name: str) -> threading.Event:
    with _lock:
        return GATES.setdefault(name, threading.Event())


def reset() -> None:
    with _lock:
        GATES.clear()
        RUNS.clear()
        WAITING.clear()


def _hang(name: str) -> None:
    with _lock:
        WAITING[name] = WAITING.get(name, 0) + 1
    gate(name).wait(timeout=30)
    with _lock:
        WAITING[name] -= 1


def steps(name: str, total: int, hang_after: int = -1) -> dict[str, Any]:
    """Checkpoint steps 1..total, resuming from the last checkpoint; the first run (epoch 1)
    hangs after checkpointing step ``hang_after`` until its gate opens."""
    ctx = JobContext.current()
    last = ctx.last_checkpoint()
    start = last.step if last is not None else 0
    done: list[int] = list(last.data["done"]) if last is not None else []
    try:
        for step in range(start + 1, total + 1):
            done.append(step)
            ctx.checkpoint(step, {"done": done})
            if step == hang_after and ctx.epoch == 1:
                _hang(name)
    except FencedOut:
        with _lock:
            RUNS.append((name, ctx.epoch, start, "FencedOut"))
        raise
    with _lock:
        RUNS.append((name, ctx.epoch, start, "ok"))
    return {"epoch": ctx.epoch, "resumed_from": start, "done": done}


def cooperative(name: str, total: int) -> dict[str, Any]:
    """Checkpoints steps and stops at a safe point when asked (a drain, a cancel)."""
    ctx = JobContext.current()
    last = ctx.last_checkpoint()
    start = last.step if last is not None else 0
    for step in range(start + 1, total + 1):
        if ctx.epoch == 1 and step == 3:  # the first run waits here for a request
            with _lock:
                WAITING[name] = WAITING.get(name, 0) + 1
            while not ctx.is_cancellation_requested() and not gate(name).wait(0.01):
                pass
        ctx.throw_if_cancellation_requested()
        ctx.checkpoint(step, {"at": step})
    with _lock:
        RUNS.append((name, ctx.epoch, start, "ok"))
    return {"epoch": ctx.epoch, "resumed_from": start}


def stubborn(name: str) -> int:
    """Ignores every request; the first run hangs until its gate opens."""
    ctx = JobContext.current()
    if ctx.epoch == 1:
        _hang(name)
    with _lock:
        RUNS.append((name, ctx.epoch, 0, "ok"))
    return ctx.epoch


def hang(name: str) -> int:
    """Hangs (every run) until its gate opens; reports no progress."""
    _hang(name)
    return JobContext.current().epoch


def quick(n: int) -> int:
    return n
