"""Ratchet's schema in a Django project's database."""

from __future__ import annotations

from ratchet_django.jobs import build_app


def migrate() -> None:
    """Upgrade Ratchet's tables in ``settings.RATCHET['DATABASE']`` to the newest revision
    (``ratchet db upgrade`` for the project's database)."""
    app = build_app()
    try:
        app.store.migrate()
    finally:
        app.close()
