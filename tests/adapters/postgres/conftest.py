"""PostgreSQL adapter tests: a fresh database per test (see ``tests/pg_fixtures.py``)."""

from __future__ import annotations

from pg_fixtures import (  # noqa: F401  (fixtures)
    postgres_admin,
    postgres_database_pool,
    postgres_empty_url,
    postgres_store_url,
    postgres_template,
)
