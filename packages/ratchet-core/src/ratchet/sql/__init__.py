"""The SQL store: SQLAlchemy Core tables, migrations, and the dialect-neutral store."""

from __future__ import annotations
