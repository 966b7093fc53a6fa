"""``manage.py ratchet_migrate``: upgrade Ratchet's tables in the project's database."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Upgrade Ratchet's schema in the database of settings.RATCHET (manage.py migrate does "
        "it too unless RATCHET['MIGRATE_WITH_DJANGO'] is False)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        from ratchet_django.migrate import migrate

        migrate()
        self.stdout.write("ratchet schema is up to date")
