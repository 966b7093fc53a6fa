"""SQLite: the secondary indexes on columns that a new job leaves NULL hold only non-NULL rows.

A submitted job has no owner, signal, dependency, batch, recurring master, encryption key or
terminal status, yet SQLite files a NULL key in every index on such a column: each submission
wrote nine index entries (one more B-tree page each in the write-ahead log) that no query
reads. Each of these indexes becomes partial, ``WHERE <first column> IS NOT NULL``. Every
query that uses one compares that column with ``=``, ``IN``, ``<=`` or ``IS NOT NULL``, which
implies the predicate, so SQLite still uses them (``test_partial_indexes_serve_their_queries``
in ``tests/integration/test_sqlite_partial_indexes.py``). A single submission writes about nine
pages fewer to the write-ahead log; the key-usage report (``ratchet keys report``) counts the jobs without a key by a scan of
the job table instead of that index.

It merges the branches that created those indexes: the initial schema (owner, terminal),
workflows (0005: batch and signal indexes, through 0011: the dependency index), recurring
(0006) and security (0010: the encryption key).

Revision ID: sq01
Revises: 0006, 0010, 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# idx_job_terminal (the terminal status and time) was on this list until revision 0016, which
# drops it, partial or not, whichever of the two runs first.
revision = "sq01"
down_revision = ("0006", "0010", "0011")
branch_labels = ("sqlite",)
depends_on = None

#: (index, table, columns); the predicate is ``<first column> IS NOT NULL``.
INDEXES = (
    ("idx_queue_owner", "scheduler_job_queue", ["picked_by", "status"]),
    ("idx_queue_waiting_for", "scheduler_job_queue", ["waiting_for"]),
    ("idx_queue_signal_key", "scheduler_job_queue", ["signal_key", "status"]),
    ("idx_queue_signal_deadline", "scheduler_job_queue", ["signal_deadline"]),
    ("idx_job_recurring_master", "scheduler_job", ["recurring_master_id"]),
    ("idx_job_batch", "scheduler_job", ["batch_id"]),
    ("idx_job_encryption_key_id", "scheduler_job", ["encryption_key_id"]),
    ("idx_job_depends_on", "scheduler_job", ["depends_on"]),
)


def upgrade() -> None:
    for name, table, columns in INDEXES:
        op.drop_index(name, table_name=table)
        op.create_index(name, table, columns, sqlite_where=sa.text(f"{columns[0]} IS NOT NULL"))


def downgrade() -> None:
    for name, table, columns in INDEXES:
        op.drop_index(name, table_name=table)
        op.create_index(name, table, columns)
