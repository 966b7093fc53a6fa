"""Jobs of the security tests (principal, encryption, masking)."""

from __future__ import annotations

from typing import Any

from ratchet import JobContext


def whoami() -> str | None:
    """The caller principal the job runs for."""
    return JobContext.current().caller_principal


def login(user: str, password: str) -> dict[str, Any]:
    """A result with a sensitive field."""
    return {"user": user, "token": f"token-of-{user}", "length": len(password)}


def double(x: int) -> int:
    return 2 * x


def is_42(value: Any) -> bool:
    """A result predicate."""
    return bool(value == 42)
