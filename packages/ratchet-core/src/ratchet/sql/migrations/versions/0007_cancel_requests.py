"""Cancellation requests: ``cancel_job(id, interrupt=True)`` reaches the node running the job.

A small table, one row per canceled RUNNING attempt, read (and emptied) by its owner node. The
job itself is canceled at once in the same transaction, so a request never keeps a job alive and
a dead owner cannot bring it back; the hot queue table and its claim index stay untouched.

Revision ID: 0007
Revises: 0001
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ratchet.sql.types import UTCMicros, UUIDType

revision = "0007"
down_revision = "0001"
branch_labels = ("timeouts",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scheduler_cancel_request",
        sa.Column("job_id", UUIDType(), primary_key=True),
        sa.Column("epoch", sa.Integer(), primary_key=True),
        sa.Column("node_id", sa.String(128), nullable=False),
        sa.Column("requested_at", UTCMicros(), nullable=False),
    )
    op.create_index("idx_cancel_request_node", "scheduler_cancel_request", ["node_id"])


def downgrade() -> None:
    op.drop_index("idx_cancel_request_node", table_name="scheduler_cancel_request")
    op.drop_table("scheduler_cancel_request")
