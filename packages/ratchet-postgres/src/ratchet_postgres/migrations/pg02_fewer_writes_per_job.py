"""PostgreSQL: no foreign keys to the job table, and three more NULL-free indexes made partial.

**Foreign keys.** The queue, tag, affinity and attempt tables each referred to
``scheduler_job(job_id)``. PostgreSQL checks such a key with a row trigger that locks the job
row (``FOR KEY SHARE``) for every row inserted: at submission once per job (the queue row) and
at every claim once more (the attempt row). Each lock is a WAL record and dirties the job's page,
and the trigger costs about a fifth of a batch insert's execution time. Removing a job paid the
other side: a look-up in each of the four tables per job deleted. The store keeps the relation
itself: a job's own rows are written in the statement or transaction that writes the job, an
attempt row only by the claim of a queued job (a job with a queue row is never terminal, so
retention never removes it), and retention deletes a job's rows before the job. The other
databases keep their keys.

**Indexes.** ``idx_job_depends_on`` and ``idx_job_encryption_key_id`` (revisions 0011 and 0010)
held an entry for every job, though a job without a dependency or an encryption key is never
looked up through them; every insert and every outcome (the job row is updated out of place)
wrote those entries. Both become partial, ``WHERE <column> IS NOT NULL``, as ``pg01`` did for
seven others; every query that reads them compares the column with ``=`` or ``IN``, which
implies the predicate. The unique constraint ``uq_queue_business_key`` becomes a unique index of
the same name on the non-NULL keys: NULLs never conflicted, so it admits the same rows, and a
violation still names it (``DuplicateBusinessKeyError``), but a job without a business key no
longer writes an entry at submission and at every claim.

Measured on a batch insert of 20,000 jobs: execution time per job on the server about a quarter
less, WAL per job 1,301 -> 1,051 bytes; on claim and outcome of the same jobs 2,509 -> 2,230
bytes; a prune's time per job less than half (``docs/performance.md``).

``CREATE INDEX`` runs inside the migration transaction and blocks writes to the job table while
it scans it; on a large table apply this in a quiet moment.

Revision ID: pg02
Revises: pg01, 0010, 0011, 0013
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "pg02"
down_revision = ("pg01", "0010", "0011", "0013")
branch_labels = None
depends_on = None

#: The tables whose ``job_id`` referred to ``scheduler_job``.
REFERRING = ("scheduler_job_queue", "scheduler_job_tag", "scheduler_job_affinity",
             "scheduler_job_execution")  # fmt: skip

#: (index, column) on ``scheduler_job``; the predicate is ``<column> IS NOT NULL``.
INDEXES = (
    ("idx_job_depends_on", "depends_on"),
    ("idx_job_encryption_key_id", "encryption_key_id"),
)

#: The business key's uniqueness among live jobs: a constraint before, a partial index after.
BUSINESS_KEY = "uq_queue_business_key"


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    for table in REFERRING:
        for key in inspector.get_foreign_keys(table):
            if key["referred_table"] == "scheduler_job" and key["name"]:
                op.drop_constraint(key["name"], table, type_="foreignkey")
    for name, column in INDEXES:
        op.drop_index(name, table_name="scheduler_job")
        op.create_index(
            name, "scheduler_job", [column], postgresql_where=sa.text(f"{column} IS NOT NULL")
        )
    op.drop_constraint(BUSINESS_KEY, "scheduler_job_queue", type_="unique")
    op.create_index(
        BUSINESS_KEY,
        "scheduler_job_queue",
        ["business_key"],
        unique=True,
        postgresql_where=sa.text("business_key IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index(BUSINESS_KEY, table_name="scheduler_job_queue")
    op.create_unique_constraint(BUSINESS_KEY, "scheduler_job_queue", ["business_key"])
    for name, column in INDEXES:
        op.drop_index(name, table_name="scheduler_job")
        op.create_index(name, "scheduler_job", [column])
    for table in REFERRING:
        op.create_foreign_key(
            f"{table}_job_id_fkey", table, "scheduler_job", ["job_id"], ["job_id"]
        )
