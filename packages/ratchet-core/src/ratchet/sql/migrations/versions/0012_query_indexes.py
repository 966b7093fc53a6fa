"""Query API: the indexes that make every page of ``app.jobs.list`` a short range scan.

Pages are keyset pages in job id order, so each filter the API offers gets an index that ends
with ``job_id``: the filtered column first, then the id to continue after. Columns that are NULL
for most jobs (terminal status while a job lives, business key, recurring master, batch, chain)
get partial indexes ``WHERE column IS NOT NULL`` where the database has them
(PostgreSQL, SQLite), so submitting a plain job maintains none of them. The tag index is
replaced by its ``(tag, job_id)`` form, which serves every lookup the old one did. On MySQL a
secondary index already ends with the primary key, so the single-column indexes on the
recurring master and the batch (revisions 0005, 0006) serve the pages as they are and no second
one is made there.

Revision ID: 0012
Revises: 0005, 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
# It indexes columns that the batch (0005) and recurring (0006) revisions add.
down_revision = ("0005", "0006")
branch_labels = None
depends_on = None

#: (name, table, columns, partial: only rows where the first column is not NULL)
INDEXES = (
    ("idx_job_status_page", "scheduler_job", ["terminal_status", "job_id"], True),
    ("idx_job_target_page", "scheduler_job", ["target", "job_id"], False),
    ("idx_job_business_key_page", "scheduler_job", ["business_key", "job_id"], True),
    ("idx_job_master_page", "scheduler_job", ["recurring_master_id", "job_id"], True),
    ("idx_job_batch_page", "scheduler_job", ["batch_id", "job_id"], True),
    ("idx_job_chain", "scheduler_job", ["chain_id"], True),
    ("idx_queue_status_page", "scheduler_job_queue", ["status", "job_id"], False),
    ("idx_job_tag_page", "scheduler_job_tag", ["tag", "job_id"], False),
)

#: (name, table, columns) of the indexes the ``(column, job_id)`` forms replace.
REPLACED = (("idx_job_tag_tag", "scheduler_job_tag", ["tag"]),)

#: Indexes MySQL does not need: its single-column ones already end with ``job_id``.
NOT_ON_MYSQL = frozenset({"idx_job_master_page", "idx_job_batch_page"})


def _indexes() -> list[tuple[str, str, list[str], bool]]:
    mysql = op.get_context().dialect.name in ("mysql", "mariadb")
    return [ix for ix in INDEXES if not (mysql and ix[0] in NOT_ON_MYSQL)]


def upgrade() -> None:
    for name, table, columns, partial in _indexes():
        where = sa.text(f"{columns[0]} IS NOT NULL") if partial else None
        op.create_index(name, table, columns, postgresql_where=where, sqlite_where=where)
    for name, table, _ in REPLACED:
        op.drop_index(name, table_name=table)


def downgrade() -> None:
    for name, table, columns in REPLACED:
        op.create_index(name, table, columns)
    for name, table, _, _ in _indexes():
        op.drop_index(name, table_name=table)
