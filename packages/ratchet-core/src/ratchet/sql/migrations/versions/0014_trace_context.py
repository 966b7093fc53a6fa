"""Trace context: each job keeps the W3C trace context of the submission that created it.

One nullable text column on the job's definition row (``scheduler_job.trace_context``: the
``traceparent`` and ``tracestate`` as a small JSON object), written by every insert path and read
by the claim, so that a worker parents the attempt's span on the trace that submitted the job.
The hot queue table does not change.

Revision ID: 0014
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0001"
branch_labels = ("tracing",)
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("scheduler_job") as batch:
        batch.add_column(sa.Column("trace_context", sa.String(1024), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("scheduler_job") as batch:
        batch.drop_column("trace_context")
