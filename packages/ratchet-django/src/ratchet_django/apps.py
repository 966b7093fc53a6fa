"""The Django app: add ``"ratchet_django"`` to ``INSTALLED_APPS``."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class RatchetDjangoConfig(AppConfig):
    """Checks ``settings.RATCHET`` at start-up and migrates Ratchet's schema after Django's."""

    name = "ratchet_django"
    label = "ratchet"
    verbose_name = "Ratchet"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from ratchet_django import conf

        conf.current()  # a wrong setting fails at start-up, not at the first job
        post_migrate.connect(migrate_after_django, sender=self)


def migrate_after_django(sender: AppConfig, using: str = "default", **_: Any) -> None:
    """``manage.py migrate`` on Ratchet's database also upgrades Ratchet's schema (Ratchet's own
    Alembic migrations, idempotent), unless ``MIGRATE_WITH_DJANGO`` is False."""
    from ratchet_django import conf
    from ratchet_django.migrate import migrate

    settings = conf.current()
    if settings.migrate_with_django and using == settings.database:
        migrate()
