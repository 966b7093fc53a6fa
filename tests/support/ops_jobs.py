"""Jobs for the query API, sanitiser and operator CLI tests."""

from __future__ import annotations

SECRET = "hunter2-Zq9"
DSN = f"postgresql://billing:{SECRET}@db.internal:5432/billing"


def ok(n: int = 0) -> int:
    return n


def leaks(customer: str = "bob@example.org") -> None:
    """Fails with a message and a traceback full of secrets."""
    password = SECRET  # noqa: F841 - shows up in the traceback's source line below
    raise ConnectionError(f"cannot reach {DSN} (password={SECRET}) for {customer}")
