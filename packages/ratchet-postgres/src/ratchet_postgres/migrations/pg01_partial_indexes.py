"""PostgreSQL: the secondary indexes on columns that a new job leaves NULL hold only non-NULL rows.

A submitted job has no owner, signal, dependency, batch, recurring master or terminal status,
yet PostgreSQL puts NULL keys in a B-tree: every job inserted paid seven index entries that no
query ever reads. Each of these indexes becomes partial, ``WHERE <first column> IS NOT NULL``.
Every query that uses one compares that column with ``=``, ``IN``, ``<=`` or ``IS NOT NULL``,
which implies the predicate, so the planner still uses them (``test_partial_indexes_serve_their
_queries``); the claim reads ``idx_queue_pending_claim`` and is unaffected. The insert of a
batch costs about a fifth less server CPU. Other databases: not part of their migrations.

``CREATE INDEX`` runs inside the migration transaction and blocks writes to the table while it
scans it; on a large table apply this in a quiet moment.

It merges the branches that created those indexes: the claim index (0002, on the path of every
PostgreSQL schema), workflows (0005: batch, dependency and signal indexes) and recurring (0006).

Revision ID: pg01
Revises: 0002, 0005, 0006
Create Date: 2026-12-20
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# idx_job_terminal (the terminal status and time) was on this list until revision 0016, which
# drops it, partial or not, whichever of the two runs first.
revision = "pg01"
down_revision = ("0002", "0005", "0006")
branch_labels = ("postgres",)
depends_on = None

#: (index, table, columns); the predicate is ``<first column> IS NOT NULL``.
INDEXES = (
    ("idx_queue_owner", "scheduler_job_queue", ["picked_by", "status"]),
    ("idx_queue_waiting_for", "scheduler_job_queue", ["waiting_for"]),
    ("idx_queue_signal_key", "scheduler_job_queue", ["signal_key", "status"]),
    ("idx_queue_signal_deadline", "scheduler_job_queue", ["signal_deadline"]),
    ("idx_job_recurring_master", "scheduler_job", ["recurring_master_id"]),
    ("idx_job_batch", "scheduler_job", ["batch_id"]),
)


def upgrade() -> None:
    for name, table, columns in INDEXES:
        op.drop_index(name, table_name=table)
        op.create_index(name, table, columns, postgresql_where=sa.text(f"{columns[0]} IS NOT NULL"))


def downgrade() -> None:
    for name, table, columns in INDEXES:
        op.drop_index(name, table_name=table)
        op.create_index(name, table, columns)
