"""Job functions used by the tests (an importable module, as real jobs must be)."""

from __future__ import annotations

import enum
import http
import os
import sqlite3
import threading
from datetime import date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from ratchet import DoNotRetry, JobContext, do_not_retry

CALLS: list[tuple[str, Any]] = []
_lock = threading.Lock()


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


def record(value: Any) -> Any:
    """Succeeds and returns its argument."""
    with _lock:
        CALLS.append(("record", value))
    return value


def echo_types(
    when: datetime, day: date, ident: UUID, amount: Decimal, color: Color, nested: dict[str, Any]
) -> dict[str, Any]:
    """Proves rich arguments arrive with their exact types."""
    assert isinstance(when, datetime) and isinstance(day, date) and isinstance(ident, UUID)
    assert isinstance(amount, Decimal) and isinstance(color, Color)
    return {
        "when": when,
        "day": day,
        "ident": ident,
        "amount": amount,
        "color": color,
        "nested": nested,
    }


def fail_always(message: str) -> None:
    raise RuntimeError(message)


def fail_until(succeed_on_attempt: int) -> int:
    attempt = JobContext.current().attempt
    if attempt < succeed_on_attempt:
        raise ConnectionError(f"attempt {attempt} fails")
    return attempt


@do_not_retry
class PermanentError(Exception):
    pass


class SubPermanent(PermanentError):
    pass


class Fatal(DoNotRetry):
    pass


def fail_permanently() -> None:
    raise SubPermanent("no point retrying")


def fail_fatal() -> None:
    raise Fatal("fatal")


def returns_unserialisable() -> object:
    return object()


def returns_http_status() -> http.HTTPStatus:
    """Returns a member of an enum class outside the tests' allowed modules."""
    return http.HTTPStatus.OK


def noop() -> None:
    return None


def mark_file(path: str, token: str) -> None:
    """Append ``token`` to a file (cross-process side effect)."""
    with open(path, "a") as fh:
        fh.write(token + "\n")


def side_effect(db_path: str, token: str) -> None:
    """Insert (token, pid) into a SQLite side-effect table: proves exactly-once across processes."""
    conn = sqlite3.connect(db_path, timeout=30)
    try:
        conn.execute("PRAGMA synchronous=OFF")  # bookkeeping of the test, not the store under test
        conn.execute("INSERT INTO side_effect(token, pid) VALUES (?, ?)", (token, os.getpid()))
        conn.commit()
    finally:
        conn.close()


def slow_side_effect(db_path: str, token: str, seconds: float) -> None:
    """Like side_effect, but takes a while first (so a kill lands mid-job)."""
    import time

    time.sleep(seconds)
    side_effect(db_path, token)


class Greeter:
    """A bean: its methods run on an instance the BeanResolver supplies."""

    def __init__(self) -> None:
        self.greeting = "hello"

    def greet(self, name: str) -> str:
        return f"{self.greeting} {name}"

    @staticmethod
    def static_greet(name: str) -> str:
        return f"static {name}"

    @classmethod
    def class_greet(cls, name: str) -> str:
        return f"{cls.__name__} {name}"


def log_warning(text: str) -> str:
    """Logs ``text`` at WARNING on the ``sample_jobs`` logger (from inside the job)."""
    import logging

    logging.getLogger("sample_jobs").warning("%s", text)
    return text
