"""The tables (docs/lifecycle.md, "Hot and cold storage"). Migrations in ``ratchet/sql/migrations`` create them.

A hot/cold split: ``scheduler_job_queue`` holds only live jobs and is what the claim reads;
``scheduler_job`` keeps every job's definition, written once at submission; ``scheduler_job_end``
holds the end of each job that ended (its terminal status, time, error, result and attempts).
Business keys are unique in the queue table, which only holds live jobs, so "unique among live
jobs" needs no partial index on any database.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from ratchet.sql.types import UTCMicros, UUIDType

metadata = MetaData()


def _not_null(column: str) -> dict[str, Any]:
    """The options of a partial index over the rows where ``column`` is set (PostgreSQL,
    SQLite; MySQL has no partial indexes and indexes every row)."""
    where = text(f"{column} IS NOT NULL")
    return {"postgresql_where": where, "sqlite_where": where}


#: The predicate of ``idx_queue_status_page`` on PostgreSQL (pg04): its rows are those of the
#: statuses other than the two every job passes through. A query of one status proves it from
#: the status's value; PENDING and RUNNING pages read the primary key, the claim index or the
#: owner index instead.
STATUS_PAGE_WHERE = "status NOT IN ('PENDING', 'RUNNING')"


job = Table(
    "scheduler_job",
    metadata,
    Column("job_id", UUIDType(), primary_key=True),
    Column("target", String(512), nullable=False),
    Column("payload", Text, nullable=False),
    Column("priority", SmallInteger, nullable=False),
    Column("max_retries", Integer, nullable=False),
    Column("backoff_policy", String(16), nullable=False),
    Column("backoff_ms", Integer, nullable=False),
    Column("timeout_ms", Integer, nullable=True),
    Column("params", Text, nullable=True),
    Column("tags", Text, nullable=True),
    Column("idempotency_key", String(64), nullable=False),
    Column("business_key", String(255), nullable=True),
    Column("executor", String(64), nullable=True),
    Column("created_at", UTCMicros(), nullable=False),
    Column("superseded_by", UUIDType(), nullable=True),
    Column("resource_name", String(100), nullable=True),  # migration 0004 (permits)
    Column("recurring_master_id", UUIDType(), nullable=True),  # migration 0006 (recurring)
    # migration 0005 (workflows): the job's role in a batch, chain or workflow
    Column("job_type", String(16), nullable=True),  # NULL: SINGLE
    Column("batch_id", UUIDType(), nullable=True),
    Column("chain_id", UUIDType(), nullable=True),
    Column("depends_on", UUIDType(), nullable=True),
    Column("has_dependents", Boolean(), nullable=True),
    Column("on_success", String(512), nullable=True),
    Column("on_failure", String(512), nullable=True),
    Column("signal_key", String(255), nullable=True),
    Column("signal_wait_ms", BigInteger, nullable=True),
    Column("batch_counted", Boolean(), nullable=True),  # the child is in its batch's counts
    # migration 0008 (watcher): the stall timeout and the last checkpoint
    Column("stall_timeout_ms", BigInteger, nullable=True),
    Column("checkpoint_step", Integer, nullable=True),
    Column("checkpoint_data", Text, nullable=True),
    Column("checkpoint_epoch", Integer, nullable=True),
    Column("checkpoint_at", UTCMicros(), nullable=True),
    # migration 0010 (security): who submitted the job, the key sealing its arguments
    Column("caller_principal", String(255), nullable=True),
    Column("encryption_key_id", String(128), nullable=True),
    # migration 0013 (fleet): node tag affinity, the start deadline, the takeover policy
    Column("require_tags", Text, nullable=True),
    Column("exclude_tags", Text, nullable=True),
    Column("schedule_to_start_ms", BigInteger, nullable=True),
    Column("takeover_policy", String(16), nullable=True),
    Column("trace_context", String(1024), nullable=True),  # migration 0014 (tracing)
    Index("idx_job_recurring_master", "recurring_master_id"),
    Index("idx_job_batch", "batch_id"),
    Index("idx_job_encryption_key_id", "encryption_key_id"),
    Index("idx_job_depends_on", "depends_on"),  # migration 0011 (retention)
    # migration 0012 (query): keyset pages per filter; partial where most rows are NULL
    # (the master and batch pages are not made on MySQL, whose indexes end with the key)
    Index("idx_job_target_page", "target", "job_id"),
    Index("idx_job_business_key_page", "business_key", "job_id", **_not_null("business_key")),
    Index(
        "idx_job_master_page", "recurring_master_id", "job_id", **_not_null("recurring_master_id")
    ),
    Index("idx_job_batch_page", "batch_id", "job_id", **_not_null("batch_id")),
    Index("idx_job_chain", "chain_id", **_not_null("chain_id")),
)

#: The end of a job: one row for each job that reached a terminal status, inserted by the
#: statement that ends it (migration 0016). The job's own row is never updated when it ends, so
#: ending a job writes this narrow row and its three index entries instead of a new version of
#: the wide job row and an entry in each of its indexes. ``attempts``: its failed attempts.
job_end = Table(
    "scheduler_job_end",
    metadata,
    Column("job_id", UUIDType(), primary_key=True),
    Column("terminal_status", String(16), nullable=False),
    Column("terminated_at", UTCMicros(), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("terminal_error", Text, nullable=True),
    Column("result", Text, nullable=True),
    # retention and the counts: a status and a time range; the query API: pages in id order
    Index("idx_job_end_time", "terminal_status", "terminated_at"),
    Index("idx_job_end_page", "terminal_status", "job_id"),
)

job_queue = Table(
    "scheduler_job_queue",
    metadata,
    Column("job_id", UUIDType(), ForeignKey("scheduler_job.job_id"), primary_key=True),
    Column("status", String(16), nullable=False),
    Column("priority", SmallInteger, nullable=False),
    Column("scheduled_time", UTCMicros(), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("epoch", Integer, nullable=False, default=0),
    Column("picked_by", String(128), nullable=True),
    Column("picked_at", UTCMicros(), nullable=True),
    Column("paused_from_status", String(16), nullable=True),
    Column("last_error", Text, nullable=True),
    Column("business_key", String(255), nullable=True),
    # migration 0005 (workflows): hidden steps and signal waits (both WAITING)
    Column("waiting_for", UUIDType(), nullable=True),
    Column("signal_key", String(255), nullable=True),
    Column("signal_deadline", UTCMicros(), nullable=True),
    Column("signal_payload", Text, nullable=True),
    # migration 0008 (watcher): progress, the stall and takeovers
    Column("last_progress_at", UTCMicros(), nullable=True),
    Column("timed_out_at", UTCMicros(), nullable=True),
    Column("takeovers", Integer, nullable=False, server_default="0"),
    # migration 0013 (fleet): 1 when the job has affinity rows (the claim checks them only
    # then), and the time by which a job never started must start (T14)
    Column("affinity", SmallInteger, nullable=False, server_default="0"),
    Column("start_by", UTCMicros(), nullable=True),
    # a unique index on the non-NULL keys on PostgreSQL (pg02) and SQLite (sq02)
    UniqueConstraint("business_key", name="uq_queue_business_key"),
    Index("idx_queue_claim", "status", "priority", "scheduled_time", "job_id"),
    Index("idx_queue_owner", "picked_by", "status"),
    Index("idx_queue_waiting_for", "waiting_for"),
    Index("idx_queue_signal_key", "signal_key", "status"),
    Index("idx_queue_signal_deadline", "signal_deadline"),
    # migration 0012 (query); partial on PostgreSQL (pg04): a PENDING or RUNNING row, nearly
    # every row of a busy queue, costs no entry at its submission or at its claim
    Index(
        "idx_queue_status_page",
        "status",
        "job_id",
        postgresql_where=text(STATUS_PAGE_WHERE),
    ),
    # partial where the database has it: a row without a deadline costs no index entry on the
    # claim's update (PostgreSQL writes every index of a row that is not updated in place)
    Index(
        "idx_queue_start_by",
        "start_by",
        postgresql_where=text("start_by IS NOT NULL"),
        sqlite_where=text("start_by IS NOT NULL"),
    ),
)

#: Every job with its live row (while it lives) and its end (once it ended): a job has at most
#: one of the two.
job_with_state = job.outerjoin(job_queue, job_queue.c.job_id == job.c.job_id).outerjoin(
    job_end, job_end.c.job_id == job.c.job_id
)
#: The jobs that ended, each with its end.
ended_job = job_end.join(job, job.c.job_id == job_end.c.job_id)
#: What an end says of its job: every column of ``job_end`` but the key.
job_end_state = tuple(c for c in job_end.c if c is not job_end.c.job_id)

job_tag = Table(
    "scheduler_job_tag",
    metadata,
    Column("job_id", UUIDType(), ForeignKey("scheduler_job.job_id"), primary_key=True),
    Column("tag", String(64), primary_key=True),
    Index("idx_job_tag_page", "tag", "job_id"),  # migration 0012 (query)
)

job_affinity = Table(
    "scheduler_job_affinity",
    metadata,
    Column("job_id", UUIDType(), ForeignKey("scheduler_job.job_id"), primary_key=True),
    Column("tag", String(64), primary_key=True),
    Column("required", SmallInteger, nullable=False),  # 1 required, 0 excluded
)
"""Migration 0013: the node tags a job requires (``required`` 1) or excludes (0). A tag is never
both (the primary key). Rows stay after the job ends, like its tags."""

# On SQLite this table and the queue table are WITHOUT ROWID (migration sq02).
idempotency_key = Table(
    "scheduler_idempotency_key",
    metadata,
    Column("idempotency_key", String(64), primary_key=True),
    Column("job_id", UUIDType(), nullable=False),
    Column("created_at", UTCMicros(), nullable=False),
    Index("idx_idempotency_created", "created_at"),  # migration 0011 (retention)
)

job_execution = Table(
    "scheduler_job_execution",
    metadata,
    Column("job_id", UUIDType(), ForeignKey("scheduler_job.job_id"), primary_key=True),
    Column("attempt_no", Integer, primary_key=True),
    Column("epoch", Integer, primary_key=True),
    Column("node_id", String(128), nullable=False),
    Column("started_at", UTCMicros(), nullable=False),
    Column("finished_at", UTCMicros(), nullable=True),
    Column("outcome", String(16), nullable=False),
    Column("error", Text, nullable=True),
    Column("traceback", Text, nullable=True),  # migration 0009
)

node = Table(
    "scheduler_node",
    metadata,
    Column("node_id", String(128), primary_key=True),
    Column("started_at", UTCMicros(), nullable=False),
    Column("heartbeat_at", UTCMicros(), nullable=False),
    Column("state", String(16), nullable=False),
    # migration 0008 (watcher): the incarnation's stable name, where it runs, its capacity
    Column("node_name", String(128), nullable=True),
    Column("host", String(255), nullable=True),
    Column("pid", Integer, nullable=True),
    Column("slots", Integer, nullable=True),
    Column("prefetch", Integer, nullable=True),
    Column("tags", Text, nullable=True),  # migration 0013 (fleet): its node tags, JSON
    # migration 0015 (breakers): its circuit breakers that are not closed, JSON
    Column("breakers", Text, nullable=True),
    Index("idx_node_heartbeat", "heartbeat_at"),
    Index("idx_node_name", "node_name", "host"),
)
"""One row per node incarnation (a worker process, or a restart of its incarnation). ``state``
is ALIVE, DRAINING or DEAD; DEAD rows are deleted after a retention period."""

# -- recurring masters and the lease lock (migration 0006, branch "recurring") -----------------

recurring_job = Table(
    "scheduler_recurring_job",
    metadata,
    Column("recurring_id", UUIDType(), primary_key=True),
    Column("name", String(255), nullable=True),
    Column("cron_expr", String(255), nullable=False),
    Column("zone_id", String(64), nullable=False),
    Column("target", String(512), nullable=False),
    Column("payload", Text, nullable=False),
    Column("priority", SmallInteger, nullable=False),
    Column("max_retries", Integer, nullable=False),
    Column("backoff_policy", String(16), nullable=False),
    Column("backoff_ms", Integer, nullable=False),
    Column("timeout_ms", Integer, nullable=True),
    Column("params", Text, nullable=True),
    Column("tags", Text, nullable=True),
    Column("business_key", String(255), nullable=True),
    Column("active_key", String(255), nullable=True),
    Column("misfire_policy", String(16), nullable=False),
    Column("max_catch_up", Integer, nullable=False),
    Column("source", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("next_fire", UTCMicros(), nullable=True),
    Column("last_fire", UTCMicros(), nullable=True),
    Column("is_paused", Boolean(), nullable=False),
    Column("paused_at", UTCMicros(), nullable=True),
    Column("created_at", UTCMicros(), nullable=False),
    Column("updated_at", UTCMicros(), nullable=False),
    Column("ended_at", UTCMicros(), nullable=True),
    UniqueConstraint("active_key", name="uq_recurring_active_key"),
    Index("idx_recurring_due", "is_paused", "next_fire"),
)
"""One row per recurring master. ``active_key`` is the business key while the master is ACTIVE
and NULL once it ends, so a plain UNIQUE makes business keys unique among active masters on
every database. Ended masters have ``next_fire`` NULL: the due index holds only live ones."""

recurring_tag = Table(
    "scheduler_recurring_tag",
    metadata,
    Column("recurring_id", UUIDType(), primary_key=True),
    Column("tag", String(64), primary_key=True),
    Index("idx_recurring_tag_tag", "tag"),
)

scheduler_lock = Table(
    "scheduler_lock",
    metadata,
    Column("lock_name", String(128), primary_key=True),
    Column("owner_node", String(128), nullable=False),
    Column("locked_at", UTCMicros(), nullable=False),
    Column("expires_at", UTCMicros(), nullable=False),
)
"""Named cluster-wide leases (decorator registration at worker start). A lease whose
``expires_at`` has passed is free, so a holder that died blocks nobody for long."""

# -- resource permits (migration 0004, branch "permits") ----------------------------------------

resource_limit = Table(
    "scheduler_resource_limit",
    metadata,
    Column("resource_name", String(100), primary_key=True),
    Column("max_concurrent", Integer, nullable=False),
    Column("retry_delay_ms", Integer, nullable=False),
    Column("description", Text, nullable=True),
    Column("created_at", UTCMicros(), nullable=False),
    Column("updated_at", UTCMicros(), nullable=False),
)

resource_permit = Table(
    "scheduler_resource_permit",
    metadata,
    Column("job_id", UUIDType(), primary_key=True),
    Column("epoch", Integer, primary_key=True),
    Column("resource_name", String(100), nullable=False),
    Column("node_id", String(128), nullable=False),
    Column("acquired_at", UTCMicros(), nullable=False),
    Index("idx_permit_resource", "resource_name"),
    Index("idx_permit_node", "node_id"),
)

# -- per execution type limits (migration 0013) --------------------------------

type_limit = Table(
    "scheduler_type_limit",
    metadata,
    Column("target", String(512), primary_key=True),
    Column("rate_per_minute", Integer, nullable=True),
    Column("max_concurrent", Integer, nullable=True),
    Column("retry_delay_ms", Integer, nullable=False),
    Column("updated_at", UTCMicros(), nullable=False),
)
"""One row per limited execution type (job target). Admissions lock it, so they queue per type."""

type_start = Table(
    "scheduler_type_start",
    metadata,
    Column("job_id", UUIDType(), primary_key=True),
    Column("epoch", Integer, primary_key=True),
    Column("target", String(512), nullable=False),
    Column("node_id", String(128), nullable=False),
    Column("started_at", UTCMicros(), nullable=False),
    Column("released", SmallInteger, nullable=False),  # 1 once the attempt ended
    Index("idx_type_start_target", "target", "started_at"),
)
"""One row per attempt admitted under a type limit: the starts of the last minute (the rate) and
the attempts executing (``released`` 0 and still owned under that epoch: the cap)."""

# -- batches and workflow conditions (migration 0005, branch "workflows") ----------------------

batch = Table(
    "scheduler_batch",
    metadata,
    Column("batch_id", UUIDType(), primary_key=True),  # the BATCH_PARENT job's id
    Column("name", String(255), nullable=False),
    Column("total_items", Integer, nullable=False),
    Column("completed_items", Integer, nullable=False),
    Column("failed_items", Integer, nullable=False),
    Column("sealed", Boolean(), nullable=False),
    Column("completion_processed", Boolean(), nullable=False),
    Column("progress_hook", String(512), nullable=True),
    Column("created_at", UTCMicros(), nullable=False),
    Column("completed_at", UTCMicros(), nullable=True),
)
"""One row per batch. Children's terminal writes add to the counters in their own transaction;
the one that finds every child ended (and the batch sealed) sets ``completion_processed``."""

workflow_condition = Table(
    "scheduler_workflow_condition",
    metadata,
    Column("parent_job_id", UUIDType(), primary_key=True),
    Column("definition_order", Integer, primary_key=True),
    Column("child_job_id", UUIDType(), nullable=False),
    Column("condition_type", String(32), nullable=False),
    Column("condition_expression", Text, nullable=True),
    Column("condition_priority", Integer, nullable=False),
    Column("first_match", Boolean(), nullable=False),
    Column("description", String(255), nullable=True),
    Column("created_at", UTCMicros(), nullable=False),
    Index("idx_wf_condition_child", "child_job_id"),
)
"""A branch: ``child_job_id`` (WAITING, ``waiting_for`` = the parent) is released when the
condition holds once the parent ends, and canceled otherwise."""

# -- cancellation requests (migration 0007, branch "timeouts") ---------------------------------

cancel_request = Table(
    "scheduler_cancel_request",
    metadata,
    Column("job_id", UUIDType(), primary_key=True),
    Column("epoch", Integer, primary_key=True),
    Column("node_id", String(128), nullable=False),
    Column("requested_at", UTCMicros(), nullable=False),
    Index("idx_cancel_request_node", "node_id"),
)
"""``cancel_job(id, interrupt=True)`` on a RUNNING job: the attempt ``(job_id, epoch)`` on
``node_id`` must stop. The job itself is already CANCELED; the owner takes the row within one
poll and sets the attempt's cancellation request."""

# -- job logs and the job archive (migration 0011, after the workflows revision 0005) --------------------------

job_log = Table(
    "scheduler_job_log",
    metadata,
    Column("job_id", UUIDType(), primary_key=True),
    Column("epoch", Integer, primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("attempt_no", Integer, nullable=False),
    Column("logged_at", UTCMicros(), nullable=False),
    Column("level", String(8), nullable=False),
    Column("message", Text, nullable=False),
    Index("idx_job_log_logged_at", "logged_at"),
)
"""One row per line a job wrote through ``context.logger()``: ``(job_id, epoch)`` is the
attempt, ``seq`` the line's position in it. Removed with the job, or after ``job_log_days``."""

job_archive = Table(
    "scheduler_job_archive",
    metadata,
    Column("job_id", UUIDType(), primary_key=True),
    Column("final_status", String(16), nullable=False),
    Column("target", String(512), nullable=False),
    Column("payload", Text, nullable=False),
    Column("result", Text, nullable=True),
    Column("final_error", Text, nullable=True),
    Column("priority", SmallInteger, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("max_retries", Integer, nullable=False),
    Column("tags", Text, nullable=True),
    Column("params", Text, nullable=True),
    Column("idempotency_key", String(64), nullable=False),
    Column("business_key", String(255), nullable=True),
    Column("executor", String(64), nullable=True),
    Column("job_type", String(16), nullable=True),
    Column("batch_id", UUIDType(), nullable=True),
    Column("chain_id", UUIDType(), nullable=True),
    Column("depends_on", UUIDType(), nullable=True),
    Column("recurring_master_id", UUIDType(), nullable=True),
    Column("superseded_by", UUIDType(), nullable=True),
    Column("created_at", UTCMicros(), nullable=False),
    Column("terminated_at", UTCMicros(), nullable=True),
    Column("archived_at", UTCMicros(), nullable=False),
    Column("archived_by", String(128), nullable=False),
    Column("attempt_history", Text, nullable=True),
    Index("idx_job_archive_status", "final_status", "terminated_at"),
    Index("idx_job_archive_archived_at", "archived_at"),
)
"""Removed jobs, when archival is on: the definition, the outcome and the attempt history (a
JSON array). Log lines are not archived (their own retention is shorter)."""
