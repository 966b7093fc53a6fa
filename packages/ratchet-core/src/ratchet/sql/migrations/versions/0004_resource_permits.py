"""Resource permits: ``scheduler_job.resource_name``, resource limits and held permits.

A permit row is one attempt ``(job_id, epoch)`` executing against a resource on ``node_id``; the
limit row of a resource is what concurrent acquirers lock (``FOR UPDATE``) so that counting and
inserting permits is exact. No foreign key to ``scheduler_job``: permits are short-lived and
deleted by job id and epoch, and a missing job only means a permit to reclaim.

Revision ID: 0004
Revises: 0001
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ratchet.sql.types import UTCMicros, UUIDType

revision = "0004"
down_revision = "0001"
branch_labels = ("permits",)
depends_on = None


def upgrade() -> None:
    op.add_column("scheduler_job", sa.Column("resource_name", sa.String(100), nullable=True))
    op.create_table(
        "scheduler_resource_limit",
        sa.Column("resource_name", sa.String(100), primary_key=True),
        sa.Column("max_concurrent", sa.Integer(), nullable=False),
        sa.Column("retry_delay_ms", sa.Integer(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("created_at", UTCMicros(), nullable=False),
        sa.Column("updated_at", UTCMicros(), nullable=False),
    )
    op.create_table(
        "scheduler_resource_permit",
        sa.Column("job_id", UUIDType(), primary_key=True),
        sa.Column("epoch", sa.Integer(), primary_key=True),
        sa.Column("resource_name", sa.String(100), nullable=False),
        sa.Column("node_id", sa.String(128), nullable=False),
        sa.Column("acquired_at", UTCMicros(), nullable=False),
    )
    op.create_index("idx_permit_resource", "scheduler_resource_permit", ["resource_name"])
    op.create_index("idx_permit_node", "scheduler_resource_permit", ["node_id"])


def downgrade() -> None:
    op.drop_table("scheduler_resource_permit")
    op.drop_table("scheduler_resource_limit")
    with op.batch_alter_table("scheduler_job") as batch:
        batch.drop_column("resource_name")
