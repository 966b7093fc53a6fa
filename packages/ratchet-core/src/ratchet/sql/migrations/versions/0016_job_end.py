"""A job's end in a table of its own: ``scheduler_job_end``.

Ending a job used to update its row in ``scheduler_job``: terminal status, time, error, result
and attempts. That row is wide (the payload, the options), and two of its indexes held the
terminal status, so every end wrote a whole new version of the row and an entry in each of the
table's indexes, and left the old version for the vacuum (PostgreSQL), or rewrote the row and
moved its index entries (MySQL, SQLite). Now the job row is written once, at submission, and
ending a job inserts one narrow row into ``scheduler_job_end`` (the job's key and two indexes:
status and time for retention and the counts, status and id for the query API's pages).

The upgrade copies the end of every job that already ended, then drops the job table's terminal
columns (``terminal_status``, ``terminal_error``, ``result``, ``terminated_at``, ``attempts``)
and their two indexes. Nodes of an older version write those columns when a job ends: stop them
before upgrading (docs/operations.md, "Upgrades"). The copy reads every ended job once: with
1,000,000 ended jobs the whole upgrade took 6.4 s on PostgreSQL 15 and 4.4 s on MariaDB 10.11
(the development machine, 2 cores).

Revision ID: 0016
Revises: 0012
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ratchet.sql.types import UTCMicros, UUIDType

revision = "0016"
# It drops the status page index that 0012 made.
down_revision = "0012"
branch_labels = ("job_end",)
depends_on = None

#: The job table's indexes on its terminal columns (partial where the status is set, on the
#: databases that have partial indexes, as revisions pg01, sq01 and 0012 left them).
JOB_INDEXES = (
    ("idx_job_terminal", ["terminal_status", "terminated_at"]),
    ("idx_job_status_page", ["terminal_status", "job_id"]),
)

#: The end's columns, in the job table's names and types.
END_COLUMNS = ("terminal_status", "terminated_at", "attempts", "terminal_error", "result")


def _job_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("terminal_status", sa.String(16), nullable=True),
        sa.Column("terminal_error", sa.Text(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("terminated_at", UTCMicros(), nullable=True),
    ]


def upgrade() -> None:
    op.create_table(
        "scheduler_job_end",
        sa.Column("job_id", UUIDType(), primary_key=True),
        sa.Column("terminal_status", sa.String(16), nullable=False),
        sa.Column("terminated_at", UTCMicros(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("terminal_error", sa.Text(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
    )
    names = ", ".join(END_COLUMNS)
    op.execute(
        f"INSERT INTO scheduler_job_end (job_id, {names})"
        " SELECT job_id, terminal_status, COALESCE(terminated_at, created_at), attempts,"
        " terminal_error, result"
        " FROM scheduler_job WHERE terminal_status IS NOT NULL"
    )
    op.create_index("idx_job_end_time", "scheduler_job_end", ["terminal_status", "terminated_at"])
    op.create_index("idx_job_end_page", "scheduler_job_end", ["terminal_status", "job_id"])
    for name, _ in JOB_INDEXES:
        op.drop_index(name, table_name="scheduler_job")
    for column in _job_columns():
        op.drop_column("scheduler_job", column.name)


def downgrade() -> None:
    for column in _job_columns():
        op.add_column("scheduler_job", column)
    job = sa.table("scheduler_job", *(sa.column(c) for c in ("job_id", *END_COLUMNS)))
    end = sa.table("scheduler_job_end", *(sa.column(c) for c in ("job_id", *END_COLUMNS)))
    ended = sa.select(end.c.job_id).where(end.c.job_id == job.c.job_id).exists()
    op.execute(
        job.update()
        .where(ended)
        .values(
            {
                c: sa.select(end.c[c]).where(end.c.job_id == job.c.job_id).scalar_subquery()
                for c in END_COLUMNS
            }
        )
    )
    where = sa.text("terminal_status IS NOT NULL")
    for name, columns in JOB_INDEXES:
        op.create_index(name, "scheduler_job", columns, postgresql_where=where, sqlite_where=where)
    op.drop_table("scheduler_job_end")
