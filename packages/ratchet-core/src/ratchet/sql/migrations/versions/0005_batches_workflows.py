"""Batches, chains, workflows and signals.

``scheduler_job`` learns each job's role (``job_type``: NULL for SINGLE, BATCH_PARENT,
BATCH_CHILD, CHAIN_STEP, WORKFLOW_BRANCH), its links (``batch_id``, ``chain_id``,
``depends_on``), whether anything waits for it (``has_dependents``), its callbacks
(``on_success`` / ``on_failure``: ``module:qualname``), its signal wait (``signal_key``, ``signal_wait_ms``) and,
for a batch child, whether its batch already counted it (``batch_counted``: an operator's retry
of a failed child must not count it twice).

``scheduler_job_queue`` gets what a WAITING row needs: ``waiting_for`` (a chain step or workflow
branch hidden until that job ends; a batch parent waiting for its children has none) and the
signal columns (``signal_key``, ``signal_deadline``, ``signal_payload``). The claim never reads
WAITING rows, so its index is untouched.

``scheduler_batch`` holds a batch's counters and ``completion_processed`` (set exactly once, by
the transaction that records the last child); ``scheduler_workflow_condition`` one row per branch.

Revision ID: 0005
Revises: 0001
Create Date: 2026-12-03
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from ratchet.sql.types import UTCMicros, UUIDType

revision = "0005"
down_revision = "0001"
branch_labels = ("workflows",)
depends_on = None

JOB_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("job_type", sa.String(16)),
    ("batch_id", UUIDType()),
    ("chain_id", UUIDType()),
    ("depends_on", UUIDType()),
    ("has_dependents", sa.Boolean()),
    ("on_success", sa.String(512)),
    ("on_failure", sa.String(512)),
    ("signal_key", sa.String(255)),
    ("signal_wait_ms", sa.BigInteger()),
    ("batch_counted", sa.Boolean()),
)
QUEUE_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("waiting_for", UUIDType()),
    ("signal_key", sa.String(255)),
    ("signal_deadline", UTCMicros()),
    ("signal_payload", sa.Text()),
)


def _is_mysql() -> bool:
    return op.get_context().dialect.name in ("mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("scheduler_job") as batch:
        for name, type_ in JOB_COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))
    op.create_index("idx_job_batch", "scheduler_job", ["batch_id"])
    with op.batch_alter_table("scheduler_job_queue") as batch:
        for name, type_ in QUEUE_COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))
    op.create_index("idx_queue_waiting_for", "scheduler_job_queue", ["waiting_for"])
    op.create_index("idx_queue_signal_key", "scheduler_job_queue", ["signal_key", "status"])
    op.create_index("idx_queue_signal_deadline", "scheduler_job_queue", ["signal_deadline"])
    if _is_mysql():
        # Signal keys compare byte for byte, as on PostgreSQL and SQLite (see revision 0003).
        op.execute(
            "ALTER TABLE `scheduler_job_queue` MODIFY `signal_key` VARCHAR(255) "
            "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL"
        )
    op.create_table(
        "scheduler_batch",
        sa.Column("batch_id", UUIDType(), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("total_items", sa.Integer(), nullable=False),
        sa.Column("completed_items", sa.Integer(), nullable=False),
        sa.Column("failed_items", sa.Integer(), nullable=False),
        sa.Column("sealed", sa.Boolean(), nullable=False),
        sa.Column("completion_processed", sa.Boolean(), nullable=False),
        sa.Column("progress_hook", sa.String(512), nullable=True),
        sa.Column("created_at", UTCMicros(), nullable=False),
        sa.Column("completed_at", UTCMicros(), nullable=True),
    )
    op.create_table(
        "scheduler_workflow_condition",
        sa.Column("parent_job_id", UUIDType(), primary_key=True),
        sa.Column("definition_order", sa.Integer(), primary_key=True),
        sa.Column("child_job_id", UUIDType(), nullable=False),
        sa.Column("condition_type", sa.String(32), nullable=False),
        sa.Column("condition_expression", sa.Text(), nullable=True),
        sa.Column("condition_priority", sa.Integer(), nullable=False),
        sa.Column("first_match", sa.Boolean(), nullable=False),
        sa.Column("description", sa.String(255), nullable=True),
        sa.Column("created_at", UTCMicros(), nullable=False),
    )
    op.create_index("idx_wf_condition_child", "scheduler_workflow_condition", ["child_job_id"])


def downgrade() -> None:
    op.drop_table("scheduler_workflow_condition")
    op.drop_table("scheduler_batch")
    for index in ("idx_queue_signal_deadline", "idx_queue_signal_key", "idx_queue_waiting_for"):
        op.drop_index(index, table_name="scheduler_job_queue")
    with op.batch_alter_table("scheduler_job_queue") as batch:
        for name, _ in QUEUE_COLUMNS:
            batch.drop_column(name)
    op.drop_index("idx_job_batch", table_name="scheduler_job")
    with op.batch_alter_table("scheduler_job") as batch:
        for name, _ in JOB_COLUMNS:
            batch.drop_column(name)
