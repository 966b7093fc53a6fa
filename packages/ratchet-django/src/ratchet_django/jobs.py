"""The project's Ratchet app, built from ``settings.RATCHET``, and submission in Django's
transactions."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ratchet import Ratchet
from ratchet.engine.builder import JobBuilder, JobHandle
from ratchet_django import conf
from ratchet_django.db import joined_transaction, store_url

#: Always allowed: the module whose function runs Django tasks.
OWN_MODULES = ("ratchet_django.runner",)

_lock = threading.Lock()
_app: Ratchet | None = None


def build_app(**overrides: Any) -> Ratchet:
    """A new Ratchet app on the database of ``settings.RATCHET['DATABASE']``.

    The schema is never migrated here: ``manage.py migrate`` (or ``ratchet_migrate``) does it.
    """
    settings = conf.current()
    options: dict[str, Any] = {
        "allowed_modules": (*settings.allowed_modules, *OWN_MODULES),
        "coordinator": settings.coordinator,
        "auto_migrate": False,
        **settings.options,
        **overrides,
    }
    return Ratchet(store_url(settings.database), **options)


def get_app() -> Ratchet:
    """The project's Ratchet app (built on first use, shared by every thread)."""
    global _app
    with _lock:
        if _app is None:
            _app = build_app()
        return _app


def reset_app() -> None:
    """Close the shared app (the next :func:`get_app` builds a new one), e.g. after settings
    changed in a test."""
    global _app
    with _lock:
        app, _app = _app, None
    if app is not None:
        app.close()


def submit(builder: JobBuilder, *, using: str | None = None) -> JobHandle:
    """Store ``builder``'s job in Django's transaction on ``using`` (default: the database of
    ``settings.RATCHET``).

    Inside ``transaction.atomic()`` the job commits or rolls back with the block; outside one it
    commits at once. Wakeups and events follow Django's commit (``transaction.on_commit``).
    """
    alias = using or conf.current().database
    with joined_transaction(alias) as tx:
        return builder.submit(connection=tx)


def enqueue(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> JobHandle:
    """Submit ``fn(*args, **kwargs)`` as a job due now, in Django's current transaction."""
    return submit(get_app().enqueue(fn, *args, **kwargs))
