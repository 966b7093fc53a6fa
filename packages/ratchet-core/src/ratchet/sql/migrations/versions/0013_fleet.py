"""A heterogeneous fleet: node tag affinity, the schedule-to-start deadline, takeover policies.

``scheduler_job`` keeps a job's ``require_tags`` and ``exclude_tags`` (JSON lists, as read back),
its ``schedule_to_start_ms`` and its ``takeover_policy``. ``scheduler_job_affinity`` holds one row
per required or excluded tag, which the claim checks; the queue row's ``affinity`` is 1 when there
are any, so the claim of a job without affinity reads nothing more. ``start_by`` is when a job that
never started must start (NULL: no deadline; cleared by its first claim). ``scheduler_node`` keeps
each incarnation's node ``tags`` (JSON), so that jobs no live node may run can be listed.
``scheduler_type_limit`` holds the per execution type limits (rate per minute, concurrency) and
``scheduler_type_start`` the attempts admitted under them.

PostgreSQL: the partial claim index of revision 0002 also carries ``affinity`` (``INCLUDE``), so
the claim's per-level range scans stay index-only: a job without affinity is accepted from the
index entry, and only jobs with affinity rows are looked up further.

Revision ID: 0013
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from ratchet.sql.migrations.mysql_collation import binary_collation, is_mysql, set_collation
from ratchet.sql.types import UTCMicros, UUIDType

revision = "0013"
down_revision = "0002"  # it replaces that revision's PostgreSQL claim index
branch_labels = ("fleet",)
depends_on = None

CLAIM_INDEX = "idx_queue_pending_claim"
CLAIM_COLUMNS = ["priority", "scheduled_time", "job_id"]


def _claim_index(include: list[str]) -> None:
    """(PostgreSQL) the partial claim index of revision 0002, carrying ``include``."""
    op.drop_index(CLAIM_INDEX, table_name="scheduler_job_queue")
    op.create_index(
        CLAIM_INDEX,
        "scheduler_job_queue",
        CLAIM_COLUMNS,
        postgresql_where=sa.text("status = 'PENDING'"),
        postgresql_include=include,
    )


JOB_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("require_tags", sa.Text()),
    ("exclude_tags", sa.Text()),
    ("schedule_to_start_ms", sa.BigInteger()),
    ("takeover_policy", sa.String(16)),
)

#: (table, column, SQL type, nullable) of the targets that must compare exactly on MySQL.
TARGET_COLUMNS = (
    ("scheduler_type_limit", "target", "VARCHAR(512)", False),
    ("scheduler_type_start", "target", "VARCHAR(512)", False),
)


def upgrade() -> None:
    with op.batch_alter_table("scheduler_job") as batch:
        for name, type_ in JOB_COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))
    with op.batch_alter_table("scheduler_job_queue") as batch:
        batch.add_column(
            sa.Column("affinity", sa.SmallInteger(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("start_by", UTCMicros(), nullable=True))
    op.create_index(
        "idx_queue_start_by",
        "scheduler_job_queue",
        ["start_by"],
        postgresql_where=sa.text("start_by IS NOT NULL"),
        sqlite_where=sa.text("start_by IS NOT NULL"),
    )
    with op.batch_alter_table("scheduler_node") as batch:
        batch.add_column(sa.Column("tags", sa.Text(), nullable=True))
    op.create_table(
        "scheduler_job_affinity",
        sa.Column("job_id", UUIDType(), sa.ForeignKey("scheduler_job.job_id"), primary_key=True),
        sa.Column("tag", sa.String(64), primary_key=True),
        sa.Column("required", sa.SmallInteger(), nullable=False),
    )
    op.create_table(
        "scheduler_type_limit",
        sa.Column("target", sa.String(512), primary_key=True),
        sa.Column("rate_per_minute", sa.Integer(), nullable=True),
        sa.Column("max_concurrent", sa.Integer(), nullable=True),
        sa.Column("retry_delay_ms", sa.Integer(), nullable=False),
        sa.Column("updated_at", UTCMicros(), nullable=False),
    )
    op.create_table(
        "scheduler_type_start",
        sa.Column("job_id", UUIDType(), primary_key=True),
        sa.Column("epoch", sa.Integer(), primary_key=True),
        sa.Column("target", sa.String(512), nullable=False),
        sa.Column("node_id", sa.String(128), nullable=False),
        sa.Column("started_at", UTCMicros(), nullable=False),
        sa.Column("released", sa.SmallInteger(), nullable=False),
    )
    op.create_index("idx_type_start_target", "scheduler_type_start", ["target", "started_at"])
    if is_mysql():  # job targets compare exactly, as on the other databases
        set_collation(TARGET_COLUMNS, binary_collation())
    if op.get_context().dialect.name == "postgresql":
        _claim_index(["affinity"])


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        _claim_index([])
    op.drop_index("idx_type_start_target", table_name="scheduler_type_start")
    op.drop_table("scheduler_type_start")
    op.drop_table("scheduler_type_limit")
    op.drop_table("scheduler_job_affinity")
    with op.batch_alter_table("scheduler_node") as batch:
        batch.drop_column("tags")
    op.drop_index("idx_queue_start_by", table_name="scheduler_job_queue")
    with op.batch_alter_table("scheduler_job_queue") as batch:
        batch.drop_column("start_by")
        batch.drop_column("affinity")
    with op.batch_alter_table("scheduler_job") as batch:
        for name, _ in JOB_COLUMNS:
            batch.drop_column(name)
