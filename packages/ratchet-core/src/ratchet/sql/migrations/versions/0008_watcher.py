"""Cluster liveness: node incarnations, progress, stalls, takeovers and checkpoints.

``scheduler_node`` learns each incarnation's stable ``node_name``, its ``host`` and ``pid`` (so a
restarted worker recognises its previous incarnation) and its capacity (``slots``,
``prefetch``). ``scheduler_job_queue`` gets what the watcher reads and writes on live jobs:
``last_progress_at`` (set by progress writes only, so "has reported progress" is
``last_progress_at IS NOT NULL``), ``timed_out_at`` and ``takeovers``. ``scheduler_job`` keeps the
definition's ``stall_timeout_ms`` and the last checkpoint (``checkpoint_step``,
``checkpoint_data`` as JSON text, ``checkpoint_epoch``, ``checkpoint_at``), which outlives the
queue row so that an operator's retry resumes from it too.

PostgreSQL: a partial index on the owned rows (QUEUED, RUNNING, TIMED_OUT), because the claim
index there covers PENDING rows only (revision 0002) and the watcher must not scan the waiting
jobs. Other databases read those rows through ``idx_queue_claim`` (``status`` first).

Revision ID: 0008
Revises: 0001
Create Date: 2026-12-10
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from ratchet.sql.types import UTCMicros

revision = "0008"
down_revision = "0001"
branch_labels = ("watcher",)
depends_on = None

WATCH_INDEX = "idx_queue_watch"

JOB_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("stall_timeout_ms", sa.BigInteger()),
    ("checkpoint_step", sa.Integer()),
    ("checkpoint_data", sa.Text()),
    ("checkpoint_epoch", sa.Integer()),
    ("checkpoint_at", UTCMicros()),
)
NODE_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("node_name", sa.String(128)),
    ("host", sa.String(255)),
    ("pid", sa.Integer()),
    ("slots", sa.Integer()),
    ("prefetch", sa.Integer()),
)


def _is_postgres() -> bool:
    return bool(op.get_context().dialect.name == "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("scheduler_job") as batch:
        for name, type_ in JOB_COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))
    with op.batch_alter_table("scheduler_job_queue") as batch:
        batch.add_column(sa.Column("last_progress_at", UTCMicros(), nullable=True))
        batch.add_column(sa.Column("timed_out_at", UTCMicros(), nullable=True))
        batch.add_column(sa.Column("takeovers", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("scheduler_node") as batch:
        for name, type_ in NODE_COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))
    op.create_index("idx_node_name", "scheduler_node", ["node_name", "host"])
    if _is_postgres():
        op.create_index(
            WATCH_INDEX,
            "scheduler_job_queue",
            ["status", "picked_by"],
            postgresql_where=sa.text("status IN ('QUEUED', 'RUNNING', 'TIMED_OUT')"),
        )


def downgrade() -> None:
    if _is_postgres():
        op.drop_index(WATCH_INDEX, table_name="scheduler_job_queue")
    op.drop_index("idx_node_name", table_name="scheduler_node")
    with op.batch_alter_table("scheduler_node") as batch:
        for name, _ in NODE_COLUMNS:
            batch.drop_column(name)
    with op.batch_alter_table("scheduler_job_queue") as batch:
        for name in ("takeovers", "timed_out_at", "last_progress_at"):
            batch.drop_column(name)
    with op.batch_alter_table("scheduler_job") as batch:
        for name, _ in JOB_COLUMNS:
            batch.drop_column(name)
