"""Attempt tracebacks: each failed attempt keeps a bounded traceback of its error.

One nullable text column on the attempt history; nothing on the hot queue table changes.

Revision ID: 0009
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0001"
branch_labels = ("tracebacks",)
depends_on = None


def upgrade() -> None:
    op.add_column("scheduler_job_execution", sa.Column("traceback", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("scheduler_job_execution", "traceback")
