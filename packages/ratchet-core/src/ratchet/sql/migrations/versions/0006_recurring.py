"""Recurring masters: ``scheduler_recurring_job``, its tags, ``scheduler_lock``, and the link
from an occurrence to its master (``scheduler_job.recurring_master_id``, indexed, no foreign
key: an occurrence keeps its lineage whatever happens to the master row).

``active_key`` holds a master's business key while it is ACTIVE and NULL afterwards, so one plain
UNIQUE index gives "unique among active masters" on every database (NULLs never collide).
``idx_recurring_due (is_paused, next_fire)`` is what the materializer's claim reads; ended
masters have no ``next_fire``. ``scheduler_lock`` holds named leases with an expiry.

MySQL / MariaDB: the key, tag and name columns get the binary no-pad collation that migration
0003 gives the job tables, so they compare byte for byte as on PostgreSQL and SQLite.

Revision ID: 0006
Revises: 0001
Create Date: 2026-12-09
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ratchet.sql.migrations.mysql_collation import binary_collation, is_mysql, set_collation
from ratchet.sql.types import UTCMicros, UUIDType

revision = "0006"
down_revision = "0001"
branch_labels = ("recurring",)
depends_on = None

#: (table, column, SQL type, nullable) of every new column that must compare exactly on MySQL.
EXACT_COLUMNS = (
    ("scheduler_recurring_job", "business_key", "VARCHAR(255)", True),
    ("scheduler_recurring_job", "active_key", "VARCHAR(255)", True),
    ("scheduler_recurring_job", "target", "VARCHAR(512)", False),
    ("scheduler_recurring_tag", "tag", "VARCHAR(64)", False),
    ("scheduler_lock", "lock_name", "VARCHAR(128)", False),
    ("scheduler_lock", "owner_node", "VARCHAR(128)", False),
)


def upgrade() -> None:
    op.add_column("scheduler_job", sa.Column("recurring_master_id", UUIDType(), nullable=True))
    op.create_index("idx_job_recurring_master", "scheduler_job", ["recurring_master_id"])
    op.create_table(
        "scheduler_recurring_job",
        sa.Column("recurring_id", UUIDType(), primary_key=True),
        sa.Column("name", sa.String(255), nullable=True),
        sa.Column("cron_expr", sa.String(255), nullable=False),
        sa.Column("zone_id", sa.String(64), nullable=False),
        sa.Column("target", sa.String(512), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("priority", sa.SmallInteger(), nullable=False),
        sa.Column("max_retries", sa.Integer(), nullable=False),
        sa.Column("backoff_policy", sa.String(16), nullable=False),
        sa.Column("backoff_ms", sa.Integer(), nullable=False),
        sa.Column("timeout_ms", sa.Integer(), nullable=True),
        sa.Column("params", sa.Text(), nullable=True),
        sa.Column("tags", sa.Text(), nullable=True),
        sa.Column("business_key", sa.String(255), nullable=True),
        sa.Column("active_key", sa.String(255), nullable=True),
        sa.Column("misfire_policy", sa.String(16), nullable=False),
        sa.Column("max_catch_up", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("next_fire", UTCMicros(), nullable=True),
        sa.Column("last_fire", UTCMicros(), nullable=True),
        sa.Column("is_paused", sa.Boolean(), nullable=False),
        sa.Column("paused_at", UTCMicros(), nullable=True),
        sa.Column("created_at", UTCMicros(), nullable=False),
        sa.Column("updated_at", UTCMicros(), nullable=False),
        sa.Column("ended_at", UTCMicros(), nullable=True),
        sa.UniqueConstraint("active_key", name="uq_recurring_active_key"),
    )
    op.create_index("idx_recurring_due", "scheduler_recurring_job", ["is_paused", "next_fire"])
    op.create_table(
        "scheduler_recurring_tag",
        sa.Column("recurring_id", UUIDType(), primary_key=True),
        sa.Column("tag", sa.String(64), primary_key=True),
    )
    op.create_index("idx_recurring_tag_tag", "scheduler_recurring_tag", ["tag"])
    op.create_table(
        "scheduler_lock",
        sa.Column("lock_name", sa.String(128), primary_key=True),
        sa.Column("owner_node", sa.String(128), nullable=False),
        sa.Column("locked_at", UTCMicros(), nullable=False),
        sa.Column("expires_at", UTCMicros(), nullable=False),
    )
    if is_mysql():
        set_collation(EXACT_COLUMNS, binary_collation())


def downgrade() -> None:
    op.drop_table("scheduler_lock")
    op.drop_index("idx_recurring_tag_tag", table_name="scheduler_recurring_tag")
    op.drop_table("scheduler_recurring_tag")
    op.drop_index("idx_recurring_due", table_name="scheduler_recurring_job")
    op.drop_table("scheduler_recurring_job")
    op.drop_index("idx_job_recurring_master", table_name="scheduler_job")
    with op.batch_alter_table("scheduler_job") as batch:
        batch.drop_column("recurring_master_id")
