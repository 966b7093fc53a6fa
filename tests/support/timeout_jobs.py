"""Job functions for the timeout, cancellation and executor tests (importable by child processes).

Jobs report what they did by appending lines to a file (``log``), so the tests can read it
whichever executor ran them: a thread, the asyncio loop, or a child process.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

from ratchet import CancellationRequestedException, JobContext

KEPT: dict[str, BaseException] = {}
"""Exceptions kept across attempts (the re-raise rule)."""


def note(log: str, text: str) -> None:
    with open(log, "a") as fh:
        fh.write(text + "\n")


def lines(log: str) -> list[str]:
    try:
        with open(log) as fh:
            return fh.read().splitlines()
    except FileNotFoundError:
        return []


def _where() -> str:
    return f"pid={os.getpid()} thread={threading.current_thread().name}"


# ------------------------------------------------------------------ safe points and overruns
def units_with_safe_points(log: str, units: int, unit_seconds: float) -> int:
    """Works in units and checks for a stop request between them."""
    ctx = JobContext.current()
    note(log, f"start {_where()} deadline={ctx.deadline()}")
    try:
        for i in range(units):
            ctx.throw_if_cancellation_requested()
            note(log, f"unit {i} begin")
            time.sleep(unit_seconds)
            note(log, f"unit {i} end")
    except CancellationRequestedException:
        note(log, "stopped at a safe point")
        raise
    note(log, "done")
    return units


def overrun(log: str, seconds: float) -> str:
    """Runs Python code (short sleeps) for ``seconds`` without ever checking for a stop."""
    note(log, f"start {_where()}")
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            time.sleep(0.01)
    except BaseException as exc:
        note(log, f"interrupted by {type(exc).__name__}")
        raise
    note(log, "done")
    return "finished"


def sleep_in_c(log: str, seconds: float) -> str:
    """One long ``time.sleep``: blocked in C, an asynchronous exception cannot land."""
    note(log, f"start {_where()}")
    try:
        time.sleep(seconds)
    except BaseException as exc:
        note(log, f"returned with {type(exc).__name__}")
        raise
    note(log, "returned")
    return "slept"


def times_out_on_first_attempt(log: str, seconds: float) -> int:
    """Overruns on attempt 1, succeeds at once afterwards."""
    attempt = JobContext.current().attempt
    note(log, f"attempt {attempt}")
    if attempt == 1:
        overrun(log, seconds)
    return attempt


def record_start(log: str) -> str:
    note(log, f"start {_where()} at {time.monotonic()}")
    return "ok"


def where_am_i() -> dict[str, Any]:
    ctx = JobContext.current()
    return {
        "pid": os.getpid(),
        "thread": threading.current_thread().name,
        "job_id": str(ctx.job_id),
        "deadline": ctx.deadline().isoformat() if ctx.deadline() else None,
    }


def boom(message: str) -> None:
    raise RuntimeError(message)


class Permanent(Exception):
    __ratchet_do_not_retry__ = True


def boom_permanently(message: str) -> None:
    raise Permanent(message)


def crash_process() -> None:
    os._exit(3)


# ------------------------------------------------------------------ asyncio
async def async_units_with_safe_points(log: str, units: int, unit_seconds: float) -> int:
    ctx = JobContext.current()
    note(log, f"start {_where()} deadline={ctx.deadline()}")
    try:
        for i in range(units):
            ctx.throw_if_cancellation_requested()
            note(log, f"unit {i} begin")
            await asyncio.sleep(unit_seconds)
            note(log, f"unit {i} end")
    except CancellationRequestedException:
        note(log, "stopped at a safe point")
        raise
    note(log, "done")
    return units


async def async_overrun(log: str, seconds: float) -> str:
    note(log, f"start {_where()}")
    try:
        await asyncio.sleep(seconds)
    except BaseException as exc:
        note(log, f"interrupted by {type(exc).__name__}")
        raise
    note(log, "done")
    return "finished"


async def async_where_am_i() -> dict[str, Any]:
    await asyncio.sleep(0)
    return where_am_i()


# ------------------------------------------------------------------ the exception rules
# These jobs set their own attempt's request (standing in for the watchdog), so the order of
# "request" and "exception created" is exact.
def _request(reason: str = "test request") -> JobContext:
    ctx = JobContext.current()
    assert ctx.cancellation is not None
    ctx.cancellation.request(reason)
    return ctx


def raise_created_before_request() -> None:
    exc = CancellationRequestedException("made before the request")
    _request()
    raise exc


def raise_after_request() -> None:
    _request().throw_if_cancellation_requested()


def raise_wrapped_as_cause() -> None:
    ctx = _request()
    try:
        ctx.throw_if_cancellation_requested()
    except CancellationRequestedException as exc:
        raise RuntimeError("page copy aborted") from exc


def raise_in_handler() -> None:
    ctx = _request()
    try:
        ctx.throw_if_cancellation_requested()
    except CancellationRequestedException:
        raise ValueError("cleanup failed")  # noqa: B904 - the implicit __context__ is the point


def reraise_from_earlier_attempt(key: str) -> None:
    """Attempt 1 stops on its request and keeps the exception; attempt 2 raises it again."""
    ctx = JobContext.current()
    if ctx.attempt == 1:
        _request()
        try:
            ctx.throw_if_cancellation_requested()
        except CancellationRequestedException as exc:
            KEPT[key] = exc
            raise
    _request()  # even with a request in this attempt, the old exception is not this attempt's
    raise KEPT[key]


def raise_for_context_from_thread() -> None:
    ctx = _request()
    made: list[BaseException] = []
    helper = threading.Thread(
        target=lambda: made.append(CancellationRequestedException.for_context("helper", ctx))
    )
    helper.start()
    helper.join()
    raise made[0]


def raise_plain_from_thread() -> None:
    """The context is not bound on another thread: without for_context it is not this attempt's."""
    _request()
    made: list[BaseException] = []
    helper = threading.Thread(target=lambda: made.append(CancellationRequestedException("helper")))
    helper.start()
    helper.join()
    raise made[0]


def return_after_request() -> str:
    ctx = _request()
    assert ctx.is_cancellation_requested()
    return "finished anyway"


def report_deadline() -> str | None:
    deadline = JobContext.current().deadline()
    return deadline.isoformat() if deadline else None
