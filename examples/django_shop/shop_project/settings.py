"""Settings of the example shop. ``SHOP_DATABASE_URL`` picks the database (a SQLAlchemy URL:
``postgresql+psycopg://...``, ``mysql+mysqldb://...``, ``sqlite:///shop.sqlite3``)."""

from __future__ import annotations

import os
from pathlib import Path

from ratchet_django.db import django_database

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ.get("SHOP_SECRET_KEY", "example-only-not-secret")
DEBUG = os.environ.get("SHOP_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["*"]
USE_TZ = True
ROOT_URLCONF = "shop_project.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "ratchet_django",
    "shop",
]
try:  # Django before 6: the django-tasks backport is an app of its own
    import django.tasks  # noqa: F401
except ImportError:
    INSTALLED_APPS.insert(2, "django_tasks")

URL = os.environ.get("SHOP_DATABASE_URL", f"sqlite:///{BASE_DIR / 'shop.sqlite3'}")
# SQLite: take the write lock when a transaction starts, and wait for it instead of failing.
SQLITE = {"OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE"}}
DATABASES = {"default": django_database(URL, **(SQLITE if URL.startswith("sqlite") else {}))}

# Every @task of the project becomes a durable Ratchet job.
TASKS = {
    "default": {
        "BACKEND": "ratchet_django.backend.RatchetBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"MAX_RETRIES": 3},
    }
}

RATCHET = {
    "DATABASE": "default",  # Ratchet's tables live here; jobs join its transactions
    "ALLOWED_MODULES": ["shop."],  # the class policy: which modules jobs may come from
    "WORKER": {"concurrency": 4},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"ratchet": {"handlers": ["console"], "level": "WARNING"}},
}
