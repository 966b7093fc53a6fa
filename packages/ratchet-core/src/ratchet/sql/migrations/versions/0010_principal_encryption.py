"""Caller principal and payload encryption: who submitted each job, and which key seals it.

``scheduler_job.caller_principal`` is written once at submit and never changed.
``scheduler_job.encryption_key_id`` names the key of the stored arguments (NULL: plain JSON);
its index answers "which rows still need an old key" during a key rotation without reading
payloads.

MySQL / MariaDB: both columns compare byte for byte (binary no-pad collation), as on
PostgreSQL and SQLite: principal ``Alice`` is not ``alice``.

Revision ID: 0010
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ratchet.sql.migrations.mysql_collation import binary_collation, is_mysql, set_collation

revision = "0010"
down_revision = "0001"
branch_labels = ("security",)
depends_on = None

KEY_INDEX = "idx_job_encryption_key_id"
EXACT_COLUMNS = (
    ("scheduler_job", "caller_principal", "VARCHAR(255)", True),
    ("scheduler_job", "encryption_key_id", "VARCHAR(128)", True),
)


def upgrade() -> None:
    with op.batch_alter_table("scheduler_job") as batch:
        batch.add_column(sa.Column("caller_principal", sa.String(255), nullable=True))
        batch.add_column(sa.Column("encryption_key_id", sa.String(128), nullable=True))
    if is_mysql():
        set_collation(EXACT_COLUMNS, binary_collation())
    op.create_index(KEY_INDEX, "scheduler_job", ["encryption_key_id"])


def downgrade() -> None:
    op.drop_index(KEY_INDEX, table_name="scheduler_job")
    with op.batch_alter_table("scheduler_job") as batch:
        batch.drop_column("encryption_key_id")
        batch.drop_column("caller_principal")
