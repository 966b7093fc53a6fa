"""PostgreSQL: ``idx_queue_status_page`` leaves out the PENDING and RUNNING rows.

The index (revision 0012) serves the query API's pages of one live status in id order. Every
job passes through PENDING and RUNNING, so every submission and every claim added an entry to
it (a claim updates its row out of place: each index whose predicate the new version meets
gets an entry); those two statuses are nearly every row of a busy queue, and their pages have
other ways in: the queue's primary key in id order with the status as a filter (PENDING rows
are most of the queue), or the claim index (PENDING) and the owner index (RUNNING, at most the
nodes' slots) and a sort. The other statuses (PAUSED, WAITING, QUEUED, TIMED_OUT) stay in the
index, which a query of one of them uses because its status implies the predicate. Measured
on a default store: a batch enqueue's server CPU per job a fifth less, one index entry fewer
per job at submission and at claim.

``CREATE INDEX`` runs inside the migration transaction and blocks writes to the queue while it
scans it; on a large queue apply this in a quiet moment.

Revision ID: pg04
Revises: pg03
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "pg04"
down_revision = "pg03"
branch_labels = None
depends_on = None

INDEX = "idx_queue_status_page"
QUEUE = "scheduler_job_queue"
COLUMNS = ["status", "job_id"]
#: Spelled here, not read from the live schema: a revision must create what it created the day
#: it shipped.
WHERE = "status NOT IN ('PENDING', 'RUNNING')"


def upgrade() -> None:
    op.drop_index(INDEX, table_name=QUEUE)
    op.create_index(INDEX, QUEUE, COLUMNS, postgresql_where=sa.text(WHERE))


def downgrade() -> None:
    op.drop_index(INDEX, table_name=QUEUE)
    op.create_index(INDEX, QUEUE, COLUMNS)
