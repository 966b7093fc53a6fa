"""Retention: job log lines, the job archive, and the indexes removal needs.

``scheduler_job_log`` holds the lines jobs write through ``context.logger()`` (one row per
line, keyed by attempt and position); ``scheduler_job_archive`` receives removed jobs when
archival is on. Two indexes make the removal cheap on big tables: dependants by the job they
depend on (a job with dependants stays while they exist) and idempotency keys by age (for the
operator's tombstone purge). The hot queue table is not touched.

Revision ID: 0011
Revises: 0005 (it indexes ``scheduler_job.depends_on``, which the workflows revision adds)
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ratchet.sql.types import UTCMicros, UUIDType

revision = "0011"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scheduler_job_log",
        sa.Column("job_id", UUIDType(), primary_key=True),
        sa.Column("epoch", sa.Integer(), primary_key=True),
        sa.Column("seq", sa.Integer(), primary_key=True),
        sa.Column("attempt_no", sa.Integer(), nullable=False),
        sa.Column("logged_at", UTCMicros(), nullable=False),
        sa.Column("level", sa.String(8), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
    )
    op.create_index("idx_job_log_logged_at", "scheduler_job_log", ["logged_at"])
    op.create_table(
        "scheduler_job_archive",
        sa.Column("job_id", UUIDType(), primary_key=True),
        sa.Column("final_status", sa.String(16), nullable=False),
        sa.Column("target", sa.String(512), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("final_error", sa.Text(), nullable=True),
        sa.Column("priority", sa.SmallInteger(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_retries", sa.Integer(), nullable=False),
        sa.Column("tags", sa.Text(), nullable=True),
        sa.Column("params", sa.Text(), nullable=True),
        sa.Column("idempotency_key", sa.String(64), nullable=False),
        sa.Column("business_key", sa.String(255), nullable=True),
        sa.Column("executor", sa.String(64), nullable=True),
        sa.Column("job_type", sa.String(16), nullable=True),
        sa.Column("batch_id", UUIDType(), nullable=True),
        sa.Column("chain_id", UUIDType(), nullable=True),
        sa.Column("depends_on", UUIDType(), nullable=True),
        sa.Column("recurring_master_id", UUIDType(), nullable=True),
        sa.Column("superseded_by", UUIDType(), nullable=True),
        sa.Column("created_at", UTCMicros(), nullable=False),
        sa.Column("terminated_at", UTCMicros(), nullable=True),
        sa.Column("archived_at", UTCMicros(), nullable=False),
        sa.Column("archived_by", sa.String(128), nullable=False),
        sa.Column("attempt_history", sa.Text(), nullable=True),
    )
    op.create_index(
        "idx_job_archive_status", "scheduler_job_archive", ["final_status", "terminated_at"]
    )
    op.create_index("idx_job_archive_archived_at", "scheduler_job_archive", ["archived_at"])
    op.create_index("idx_job_depends_on", "scheduler_job", ["depends_on"])
    op.create_index("idx_idempotency_created", "scheduler_idempotency_key", ["created_at"])


def downgrade() -> None:
    op.drop_index("idx_idempotency_created", table_name="scheduler_idempotency_key")
    op.drop_index("idx_job_depends_on", table_name="scheduler_job")
    op.drop_index("idx_job_archive_archived_at", table_name="scheduler_job_archive")
    op.drop_index("idx_job_archive_status", table_name="scheduler_job_archive")
    op.drop_table("scheduler_job_archive")
    op.drop_index("idx_job_log_logged_at", table_name="scheduler_job_log")
    op.drop_table("scheduler_job_log")
