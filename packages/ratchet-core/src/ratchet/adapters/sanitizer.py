"""The built-in error sanitiser (``ratchet_sanitize_error``), configured by the app's
``sanitize_*`` settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ratchet import hookimpl
from ratchet.domain.sanitize import sanitize_text

if TYPE_CHECKING:
    from ratchet.config import RatchetConfig


@hookimpl(trylast=True)
def ratchet_sanitize_error(text: str, kind: str, config: RatchetConfig) -> str:
    return sanitize_text(text, config.sanitize_policy(), traceback=kind == "traceback")
