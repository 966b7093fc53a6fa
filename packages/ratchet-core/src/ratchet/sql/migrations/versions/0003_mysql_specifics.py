"""MySQL / MariaDB: exact (binary, no-pad) comparison for keys, names and targets.

A MySQL table takes its database's default collation, usually a case- and accent-insensitive one
that also ignores trailing spaces (``utf8mb4_unicode_ci``, ``utf8mb4_0900_ai_ci``). Under it the
idempotency keys ``Pay-1`` and ``pay-1`` would be "duplicates", and so would two business keys
that PostgreSQL and SQLite keep apart. This revision gives the key columns a binary collation
without padding (``utf8mb4_nopad_bin`` on MariaDB, ``utf8mb4_0900_bin`` on MySQL >= 8.0.17,
else ``utf8mb4_bin``), so they compare byte for byte as on the other databases. The business-key
rule itself needs nothing MySQL-specific: ``scheduler_job_queue`` only holds live jobs, and its
plain UNIQUE index allows any number of NULLs.
Other databases: nothing.

Revision ID: 0003
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from ratchet.sql.migrations.mysql_collation import binary_collation, is_mysql, set_collation

revision = "0003"
down_revision = "0001"
branch_labels = ("mysql",)
depends_on = None

#: (table, column, SQL type, nullable) of every column that must compare exactly.
COLUMNS = (
    ("scheduler_idempotency_key", "idempotency_key", "VARCHAR(64)", False),
    ("scheduler_job", "idempotency_key", "VARCHAR(64)", False),
    ("scheduler_job", "business_key", "VARCHAR(255)", True),
    ("scheduler_job", "target", "VARCHAR(512)", False),
    ("scheduler_job_queue", "business_key", "VARCHAR(255)", True),
    ("scheduler_job_queue", "picked_by", "VARCHAR(128)", True),
    ("scheduler_job_tag", "tag", "VARCHAR(64)", False),
    ("scheduler_job_execution", "node_id", "VARCHAR(128)", False),
    ("scheduler_node", "node_id", "VARCHAR(128)", False),
)


def upgrade() -> None:
    if is_mysql():
        set_collation(COLUMNS, binary_collation())


def downgrade() -> None:
    if is_mysql():
        set_collation(COLUMNS, None)  # back to the table's default collation
