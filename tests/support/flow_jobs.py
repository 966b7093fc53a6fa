"""Jobs, predicates and callbacks for the batch / chain / workflow / signal tests (importable)."""

from __future__ import annotations

import os
import sqlite3
import threading
from typing import Any

from ratchet import BatchContext, JobContext, JobResult

EVENTS: list[tuple[str, Any]] = []
_lock = threading.Lock()


def note(kind: str, value: Any = None) -> None:
    with _lock:
        EVENTS.append((kind, value))


def seen(kind: str) -> list[Any]:
    with _lock:
        return [v for k, v in EVENTS if k == kind]


def reset() -> None:
    with _lock:
        EVENTS.clear()


# -- jobs ----------------------------------------------------------------------------------------
def step(name: str) -> str:
    note("step", name)
    return name


def value(v: Any) -> Any:
    note("value", v)
    return v


def boom(message: str = "boom") -> None:
    note("boom", message)
    raise RuntimeError(message)


def item(n: int) -> int:
    """A batch child: fails for multiples of 7."""
    if n % 7 == 0:
        raise ValueError(f"item {n} is bad")
    return n * 2


def read_signal() -> Any:
    sig = JobContext.current().signal()
    note("signal", sig)
    return sig if not hasattr(sig, "outcome") else sig.outcome.value


def side_effect(db_path: str, token: str) -> None:
    """Insert (token, pid) into a side-effect table (cross-process exactly-once checks)."""
    conn = sqlite3.connect(db_path, timeout=30)
    try:
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("INSERT INTO side_effect(token, pid) VALUES (?, ?)", (token, os.getpid()))
        conn.commit()
    finally:
        conn.close()


def flaky_item(db_path: str, n: int) -> int:
    """A child of the process test: records itself, then fails when ``n % 10 == 3``."""
    side_effect(db_path, f"item-{n}")
    if n % 10 == 3:
        raise ValueError(f"item {n} fails")
    return n


def slow_step(db_path: str, token: str, seconds: float) -> str:
    import time

    time.sleep(seconds)
    side_effect(db_path, token)
    return token


# -- predicates ------------------------------------------------------------------------------------
def is_big(result: JobResult) -> bool:
    return bool(result.success and isinstance(result.value, int) and result.value > 10)


def always(result: JobResult) -> bool:
    return True


def value_is_even(v: Any) -> bool:
    return isinstance(v, int) and v % 2 == 0


def predicate_raises(result: JobResult) -> bool:
    raise KeyError("predicate broke")


def most_succeeded(batch: BatchContext) -> bool:
    return batch.success_rate > 0.5


# -- callbacks -----------------------------------------------------------------------------------
def on_ok(ctx: JobContext) -> None:
    note("on_success", ctx.job_id)


def on_bad(ctx: JobContext, error: BaseException) -> None:
    note("on_failure", (ctx.job_id, str(error)))


def callback_raises(ctx: JobContext) -> None:
    raise RuntimeError("callback broke")


def note_context_time(ctx: JobContext) -> None:
    note("context_time", ctx.scheduled_time)


def progress(batch: BatchContext) -> None:
    note("progress", (batch.completed, batch.failed))


def record_completion(db_path: str, token: str) -> None:
    side_effect(db_path, token)


def batch_item(n: int, fail: bool) -> int:
    """A child of the 10,000-item process test: fails when told to (chosen at random)."""
    if fail:
        raise ValueError(f"item {n} fails")
    return n


def batch_item_spec(spec: dict[str, Any]) -> int:
    """``batch_item`` taking its one batch argument as a dict."""
    return batch_item(int(spec["n"]), bool(spec["fail"]))
