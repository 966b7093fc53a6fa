"""Alembic environment: runs on the connection handed over by ``ratchet.sql.migrate``."""

from __future__ import annotations

from alembic import context

from ratchet.sql.migrate import VERSION_TABLE
from ratchet.sql.schema import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    transactional_ddl=True,
)
with context.begin_transaction():
    context.run_migrations()
