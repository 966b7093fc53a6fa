"""Every error and traceback the worker writes, emits or logs passes the app's sanitiser (the
``ratchet_sanitize_error`` hook) first, once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ratchet.domain.text import describe_error, describe_traceback

if TYPE_CHECKING:
    from ratchet.engine.host import AppHost


def sanitized_error(app: AppHost, exc: BaseException) -> str:
    """``module.Class: message`` of ``exc``, with its secrets removed by the app's sanitiser."""
    return app.plugins.sanitize_error(describe_error(exc), "message", app.config)


def sanitized_traceback(app: AppHost, exc: BaseException) -> str:
    """``exc``'s traceback, with its secrets removed by the app's sanitiser."""
    return app.plugins.sanitize_error(describe_traceback(exc), "traceback", app.config)
