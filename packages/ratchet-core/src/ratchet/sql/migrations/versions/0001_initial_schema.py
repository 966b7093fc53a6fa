"""Initial schema: jobs (hot queue + cold definitions), tags, idempotency keys, attempts, nodes.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ratchet.sql.types import UTCMicros, UUIDType

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scheduler_job",
        sa.Column("job_id", UUIDType(), primary_key=True),
        sa.Column("target", sa.String(512), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("priority", sa.SmallInteger(), nullable=False),
        sa.Column("max_retries", sa.Integer(), nullable=False),
        sa.Column("backoff_policy", sa.String(16), nullable=False),
        sa.Column("backoff_ms", sa.Integer(), nullable=False),
        sa.Column("timeout_ms", sa.Integer(), nullable=True),
        sa.Column("params", sa.Text(), nullable=True),
        sa.Column("tags", sa.Text(), nullable=True),
        sa.Column("idempotency_key", sa.String(64), nullable=False),
        sa.Column("business_key", sa.String(255), nullable=True),
        sa.Column("executor", sa.String(64), nullable=True),
        sa.Column("created_at", UTCMicros(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("terminal_status", sa.String(16), nullable=True),
        sa.Column("terminal_error", sa.Text(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("terminated_at", UTCMicros(), nullable=True),
        sa.Column("superseded_by", UUIDType(), nullable=True),
    )
    op.create_index("idx_job_terminal", "scheduler_job", ["terminal_status", "terminated_at"])
    op.create_table(
        "scheduler_job_queue",
        sa.Column("job_id", UUIDType(), sa.ForeignKey("scheduler_job.job_id"), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("priority", sa.SmallInteger(), nullable=False),
        sa.Column("scheduled_time", UTCMicros(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("picked_by", sa.String(128), nullable=True),
        sa.Column("picked_at", UTCMicros(), nullable=True),
        sa.Column("paused_from_status", sa.String(16), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("business_key", sa.String(255), nullable=True),
        sa.UniqueConstraint("business_key", name="uq_queue_business_key"),
    )
    op.create_index(
        "idx_queue_claim",
        "scheduler_job_queue",
        ["status", "priority", "scheduled_time", "job_id"],
    )
    op.create_index("idx_queue_owner", "scheduler_job_queue", ["picked_by", "status"])
    op.create_table(
        "scheduler_job_tag",
        sa.Column("job_id", UUIDType(), sa.ForeignKey("scheduler_job.job_id"), primary_key=True),
        sa.Column("tag", sa.String(64), primary_key=True),
    )
    op.create_index("idx_job_tag_tag", "scheduler_job_tag", ["tag"])
    op.create_table(
        "scheduler_idempotency_key",
        sa.Column("idempotency_key", sa.String(64), primary_key=True),
        sa.Column("job_id", UUIDType(), nullable=False),
        sa.Column("created_at", UTCMicros(), nullable=False),
    )
    op.create_table(
        "scheduler_job_execution",
        sa.Column("job_id", UUIDType(), sa.ForeignKey("scheduler_job.job_id"), primary_key=True),
        sa.Column("attempt_no", sa.Integer(), primary_key=True),
        sa.Column("epoch", sa.Integer(), primary_key=True),
        sa.Column("node_id", sa.String(128), nullable=False),
        sa.Column("started_at", UTCMicros(), nullable=False),
        sa.Column("finished_at", UTCMicros(), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
    )
    op.create_table(
        "scheduler_node",
        sa.Column("node_id", sa.String(128), primary_key=True),
        sa.Column("started_at", UTCMicros(), nullable=False),
        sa.Column("heartbeat_at", UTCMicros(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
    )
    op.create_index("idx_node_heartbeat", "scheduler_node", ["heartbeat_at"])


def downgrade() -> None:
    for table in (
        "scheduler_node",
        "scheduler_job_execution",
        "scheduler_idempotency_key",
        "scheduler_job_tag",
        "scheduler_job_queue",
        "scheduler_job",
    ):
        op.drop_table(table)
