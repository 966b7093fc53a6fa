"""Node breakers: each worker publishes its circuit breakers that are not closed.

One nullable text column on the node row (``scheduler_node.breakers``: a small JSON object,
service name to ``OPEN`` or ``HALF_OPEN``), written with every heartbeat, so that an operator's
tools (``ratchet nodes``, the dashboard) see every worker's breakers, which live in the worker's
memory. NULL: all closed, or a worker that does not publish them.

Revision ID: 0015
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0008"
branch_labels = ("breakers",)
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("scheduler_node") as batch:
        batch.add_column(sa.Column("breakers", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("scheduler_node") as batch:
        batch.drop_column("breakers")
