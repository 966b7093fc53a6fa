"""PostgreSQL: a partial index on the PENDING rows replaces the full claim index.

The claim scans, per priority level, the oldest due PENDING jobs. This index holds only PENDING
rows in exactly that order, so each branch is a short range scan whatever the number of RUNNING,
WAITING or PAUSED rows, and the claim stays O(batch) with millions of jobs waiting. It makes
``idx_queue_claim`` (status, priority, scheduled_time, job_id) redundant on PostgreSQL: that one
is dropped, so every state change maintains one index less, and the planner cannot pick the
larger index for the claim on a cost tie. Other databases: nothing (they keep
``idx_queue_claim``).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

INDEX = "idx_queue_pending_claim"
FULL_INDEX = "idx_queue_claim"


def _is_postgres() -> bool:
    return bool(op.get_context().dialect.name == "postgresql")


def upgrade() -> None:
    if not _is_postgres():
        return
    op.create_index(
        INDEX,
        "scheduler_job_queue",
        ["priority", "scheduled_time", "job_id"],
        postgresql_where=sa.text("status = 'PENDING'"),
    )
    op.drop_index(FULL_INDEX, table_name="scheduler_job_queue")


def downgrade() -> None:
    if not _is_postgres():
        return
    op.create_index(
        FULL_INDEX, "scheduler_job_queue", ["status", "priority", "scheduled_time", "job_id"]
    )
    op.drop_index(INDEX, table_name="scheduler_job_queue")
