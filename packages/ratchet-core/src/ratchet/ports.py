"""Ports: the contracts that adapters implement (``typing.Protocol``).

The engine is written only against these. Plugins supply implementations through the hooks in
:mod:`ratchet.hookspecs`; the store conformance suite in :mod:`ratchet.testing.store_contract`
checks a store against :class:`Store`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar, runtime_checkable

from ratchet.domain.affinity import StrandedJob
from ratchet.domain.authorization import AuthorizationRequest
from ratchet.domain.breaker import BreakerSpec, BreakerState, Transition
from ratchet.domain.flows import BatchSpec, BranchSpec, FlowJob
from ratchet.domain.joblog import JobLogLine
from ratchet.domain.lifecycle import JobPriority, JobStatus
from ratchet.domain.model import (
    AttemptRecord,
    ClaimedJob,
    FlowWrite,
    JobFilter,
    JobRecord,
    NewJob,
    NodeRecord,
    Outcome,
    OutcomeWrite,
)
from ratchet.domain.query import JobLink, JobQuery, QueueHealth, RunningJob
from ratchet.domain.quick_init import quick_init
from ratchet.domain.recurring import (
    FirePlan,
    MaterializedFire,
    NewRecurring,
    RecurringRecord,
    SyncReport,
)
from ratchet.domain.resources import PermitDecision, PermitRecord, ResourceLimit
from ratchet.domain.retention import DeadLetterFilter, PageCursor
from ratchet.domain.retry import RetryPolicy
from ratchet.domain.type_limits import TypeDecision, TypeLimit
from ratchet.domain.watcher import (
    AcquiredWork,
    Checkpoint,
    JobLiveness,
    NodeInfo,
    StalledJob,
    WatcherReport,
    WatcherSettings,
)
from ratchet.domain.workflow import BatchContext, FlowResolver

T = TypeVar("T")


class Clock(Protocol):
    """Where the engine reads time. Always returns an aware UTC datetime."""

    def now(self) -> datetime: ...


@dataclass(frozen=True)
class StoreCapabilities:
    """Facts about a store that runtime code and the conformance suite both read."""

    dialect: str
    skip_locked: bool
    """Concurrent claimers skip each other's locked rows (otherwise claims serialise)."""
    multi_host: bool
    """Several machines may share the store (false for SQLite files)."""
    transactional_submit: bool = True
    """``submit(connection=...)`` can join the caller's transaction."""
    extras: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True, slots=True)
class InsertResult:
    """What happened to one job of a submission."""

    job_id: uuid.UUID
    inserted: bool
    """False when the idempotency key already belonged to ``job_id`` (the original job)."""


class Store(Protocol):
    """Durable home of jobs, nodes and attempt history.

    Every method takes the caller's ``now`` (so tests can drive time), runs in its own short
    transaction unless ``connection`` is given, and raises
    :class:`~ratchet.domain.errors.StoreUnavailable` when the database cannot be reached.
    Every write by an executing node is fenced by ``(job_id, epoch, node_id, status)``.
    """

    capabilities: StoreCapabilities
    url: str
    location: str
    """Where the store is, for logs and errors: the URL with its password hidden."""

    # -- lifecycle of the store itself ------------------------------------------------------
    def migrate(self) -> None:
        """Create or upgrade the schema to the newest revision (safe to call concurrently)."""

    def close(self) -> None:
        """Release every connection. Idempotent."""

    def database_time(self) -> datetime:
        """The database server's clock (for skew checks)."""

    def capability(self, kind: type[T]) -> T | None:
        """The optional capability ``kind`` if this store has it, else None."""

    # -- submission -------------------------------------------------------------------------
    def insert_jobs(
        self, jobs: Sequence[NewJob], *, now: datetime, connection: Any = None
    ) -> list[InsertResult]:
        """Insert jobs in one transaction (or in ``connection``'s, which the caller commits).

        A job whose idempotency key is already taken is not inserted: its result names the
        holder. A live business key conflict raises ``DuplicateBusinessKeyError`` and inserts
        nothing.
        """

    def replace_job(
        self,
        old_id: uuid.UUID,
        new_job: NewJob,
        *,
        now: datetime,
        resolve: FlowResolver | None = None,
    ) -> FlowWrite[bool]:
        """Cancel a live job and insert its replacement atomically (``superseded_by`` set).

        The replacement takes over the old job's business key unless it brings its own.
        ``value`` is False (and nothing changes) if the old job does not exist or is terminal;
        ``effects`` are what the old job's end triggers in its flow (see :meth:`cancel_job`).
        Raises ``DuplicateBusinessKeyError`` if a live job holds the replacement's business key
        and ``DuplicateIdempotencyKeyError`` if another job holds its idempotency key (a
        replacement cannot be answered with an earlier job); then nothing changes.
        """

    # -- the worker's side ------------------------------------------------------------------
    def claim(
        self,
        node_id: str,
        limit: int,
        *,
        now: datetime,
        boost_interval: timedelta,
        node_tags: frozenset[str] = frozenset(),
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` due PENDING jobs for ``node_id`` and mark them RUNNING.

        Order: effective priority (with age boost) descending, scheduled time, id. Each claim
        increments the job's epoch and opens an attempt-history row. Concurrent claimers never
        receive the same job. Only jobs whose affinity ``node_tags`` satisfy are claimed (the
        others are not even read out of the database).
        """

    def owned_jobs(
        self, node_id: str, jobs: Sequence[tuple[uuid.UUID, int]]
    ) -> set[tuple[uuid.UUID, int]]:
        """Which of ``jobs`` (``(job_id, epoch)`` pairs) ``node_id`` still owns under that
        epoch (RUNNING or TIMED_OUT): one read for all of them."""

    def record_outcomes(
        self,
        node_id: str,
        outcomes: Sequence[Outcome],
        *,
        now: datetime,
        resolve: FlowResolver | None = None,
    ) -> OutcomeWrite:
        """Apply attempt outcomes in one transaction; return the ids that were fenced out and
        the effects of those that applied.

        An outcome applies only if the job is still RUNNING under this node and epoch;
        otherwise it changes nothing and its id is in ``fenced``. A store with flows
        (:class:`WorkflowStore`) does what the ends cause in the same transaction, evaluating
        branch conditions through ``resolve`` (None: every stored reference is refused), and
        returns what must follow the commit as ``effects``; a store without flows returns none.
        """

    # -- operators --------------------------------------------------------------------------
    def cancel_job(
        self, job_id: uuid.UUID, *, now: datetime, resolve: FlowResolver | None = None
    ) -> FlowWrite[bool]:
        """Cancel a live job (a RUNNING one keeps running; its result is discarded).

        ``value``: whether it was canceled (False if missing or terminal). ``effects``: what the
        cancellation triggers in its flow, evaluated through ``resolve`` as in
        :meth:`record_outcomes` (a canceled batch child can complete its batch).
        """

    def pause_job(self, job_id: uuid.UUID, *, now: datetime) -> bool:
        """PENDING -> PAUSED; True if already PAUSED."""

    def resume_job(self, job_id: uuid.UUID, *, now: datetime) -> bool:
        """PAUSED -> the status it was paused from; False unless PAUSED."""

    def retry_job(self, job_id: uuid.UUID, *, now: datetime) -> bool:
        """FAILED -> PENDING with attempts reset; False unless FAILED."""

    def retry_jobs(self, job_filter: JobFilter, limit: int, *, now: datetime) -> int:
        """Retry up to ``limit`` FAILED jobs matching the filter, atomically; return the count."""

    def cancel_jobs_by_tag(
        self, tag: str, *, now: datetime, resolve: FlowResolver | None = None
    ) -> FlowWrite[int]:
        """Cancel every PENDING, PAUSED or WAITING job carrying ``tag``; ``value`` is the count,
        ``effects`` as for :meth:`cancel_job`."""

    # -- reading ----------------------------------------------------------------------------
    def get_job(self, job_id: uuid.UUID) -> JobRecord | None:
        """The job, live or terminal, or None."""

    def find_by_idempotency_key(self, key: str) -> uuid.UUID | None:
        """The job that holds ``key``, or None: the job it was given to (its key stays after
        the job is removed), else the stored job whose own id it is."""

    def list_jobs(self, job_filter: JobFilter, limit: int = 100) -> list[JobRecord]:
        """Jobs matching the filter, newest first."""

    def attempts(self, job_id: uuid.UUID) -> list[AttemptRecord]:
        """The attempt history of a job, oldest first."""

    def count_by_status(self) -> dict[str, int]:
        """How many jobs are in each status."""

    def live_counts(self) -> dict[str, int]:
        """How many live jobs are in each live status (the live jobs only: cheap to ask)."""

    # -- nodes (registered, heart-beating and declared dead through :class:`WatcherStore`) ---
    def deregister_node(self, node_id: str) -> None:
        """Remove this node's row."""

    def list_nodes(self) -> list[NodeRecord]:
        """Every registered node."""


@runtime_checkable
class PermitStore(Protocol):
    """Optional store capability: resource limits and the permits held against them.

    Limits and permits are shared by every node of the cluster. Acquisition is exact under
    concurrency: at most ``max_concurrent`` permits of a resource exist at any moment.
    """

    def set_resource_limit(self, limit: ResourceLimit, *, now: datetime) -> None:
        """Create or update a resource's limit (safe when several nodes do it at once)."""

    def get_resource_limit(self, name: str) -> ResourceLimit | None:
        """The limit of ``name``, or None (unlimited)."""

    def list_resource_limits(self) -> list[ResourceLimit]:
        """Every registered limit, by name."""

    def delete_resource_limit(self, name: str) -> bool:
        """Remove a limit (the resource becomes unlimited); False if there was none."""

    def acquire_permit(
        self, resource: str, job_id: uuid.UUID, epoch: int, node_id: str, *, now: datetime
    ) -> PermitDecision:
        """Take a permit for this attempt if one is free (idempotent per ``(job_id, epoch)``).

        Refuses, acquiring nothing, when the job is no longer RUNNING under ``node_id`` and
        ``epoch`` (``owned`` False). A resource without a limit always grants.
        """

    def release_permit(self, job_id: uuid.UUID, epoch: int) -> bool:
        """Give back this attempt's permit; False if it held none."""

    def list_permits(self, resource: str | None = None) -> list[PermitRecord]:
        """Held permits (of one resource, or all), oldest first."""

    def reclaim_permits(self, *, now: datetime, grace: timedelta) -> int:
        """Delete permits of nodes silent for longer than ``grace`` (or gone); return how many."""

    def release_stale_permits(
        self, node_id: str, keep: Collection[tuple[uuid.UUID, int]], *, before: datetime
    ) -> int:
        """Delete ``node_id``'s permits acquired before ``before`` except the attempts in
        ``keep`` (the node's running attempts): repairs releases lost to a database outage."""


NextFireFn = Callable[[str, str, datetime], datetime | None]
"""``(cron, zone, after) -> the first fire time strictly after ``after`` (None: none left)."""

FirePlanner = Callable[[RecurringRecord, datetime], FirePlan]
"""Decides, inside the materializer's transaction, what one due master creates now."""


@runtime_checkable
class TypeLimitStore(Protocol):
    """Optional: per execution type limits, cluster-wide (docs/affinity-and-limits.md): a start
    rate per minute and a concurrency cap per job target, kept in the database."""

    def set_type_limit(self, limit: TypeLimit, *, now: datetime) -> None:
        """Create or replace the limit of ``limit.target``."""

    def get_type_limit(self, target: str) -> TypeLimit | None:
        """The limit of ``target`` (None: unlimited)."""

    def list_type_limits(self) -> list[TypeLimit]:
        """Every limit, by target."""

    def delete_type_limit(self, target: str) -> bool:
        """Make ``target`` unlimited; False if it had no limit."""

    def admit_type(
        self, target: str, job_id: uuid.UUID, epoch: int, node_id: str, *, now: datetime
    ) -> TypeDecision:
        """Admit the attempt ``(job_id, epoch)`` now (recorded as started and executing), or
        say until when it must wait; exact under concurrent admissions of one type."""

    def release_type(self, job_id: uuid.UUID, epoch: int) -> bool:
        """The attempt ended: it no longer counts as executing."""


@runtime_checkable
class AffinityStore(Protocol):
    """Optional: node tag affinity (docs/affinity-and-limits.md). Workers send their node tags
    with every claim, reservation and takeover; jobs whose required and excluded tags they do not
    satisfy are left in the database for other nodes."""

    def stranded_jobs(self, limit: int = 100) -> list[StrandedJob]:
        """Due or waiting live jobs (PENDING, QUEUED, TIMED_OUT) with an affinity that no live
        (ALIVE) node's tags satisfy, oldest first: they wait until a node that may run them
        starts. At most ``limit``."""


@runtime_checkable
class RecurringStore(Protocol):
    """Optional store capability: recurring masters, their materialization, and named leases.

    Every write is one transaction. :meth:`materialize_recurring` claims due masters so that
    concurrent materializers never take the same one (``SKIP LOCKED`` or the database's write
    lock), and inserts their occurrences and advances their ``next_fire`` atomically: each
    occurrence is created exactly once across the cluster.
    """

    def create_recurring(self, master: NewRecurring, *, now: datetime) -> uuid.UUID:
        """Store a new ACTIVE master (and its tags).

        :raises DuplicateBusinessKeyError: an active master already holds its business key.
        """

    def get_recurring(self, recurring_id: uuid.UUID) -> RecurringRecord | None:
        """The master, active or ended, or None."""

    def find_recurring(self, business_key: str) -> RecurringRecord | None:
        """The ACTIVE master holding ``business_key``, or None."""

    def list_recurring(
        self, *, tag: str | None = None, active_only: bool = True, limit: int = 1000
    ) -> list[RecurringRecord]:
        """Masters (with ``tag``; only ACTIVE ones unless told otherwise), oldest first."""

    def recurring_fires(self, recurring_id: uuid.UUID, limit: int = 1000) -> list[JobRecord]:
        """The occurrences created for a master, oldest first."""

    def pause_recurring(self, recurring_id: uuid.UUID, *, now: datetime) -> bool:
        """Stop an ACTIVE master from firing (True if it already was paused)."""

    def resume_recurring(
        self, recurring_id: uuid.UUID, *, now: datetime, next_fire: NextFireFn
    ) -> bool:
        """Let a paused master fire again from its first fire time after ``now`` (times that
        passed while paused are not created). False unless it is ACTIVE and paused."""

    def cancel_recurring(self, recurring_id: uuid.UUID, *, now: datetime) -> bool:
        """End an ACTIVE master (CANCELED) and free its business key. Occurrences already
        created are ordinary jobs and stay. False unless it was ACTIVE."""

    def cancel_recurring_by_business_key(self, business_key: str, *, now: datetime) -> int:
        """Cancel the ACTIVE master holding ``business_key``; 0 or 1."""

    def cancel_recurring_by_tag(self, tag: str, *, now: datetime) -> int:
        """Cancel every ACTIVE master carrying ``tag``; return how many."""

    def materialize_recurring(
        self, node_id: str, *, now: datetime, limit: int, plan: FirePlanner
    ) -> tuple[int, list[MaterializedFire]]:
        """Claim up to ``limit`` ACTIVE, unpaused masters with ``next_fire <= now``; for each,
        insert the jobs ``plan`` returns and store its new next fire (none: EXHAUSTED), in one
        transaction. Returns how many masters were claimed and the occurrences created."""

    def sync_recurring(
        self,
        definitions: Sequence[NewRecurring],
        *,
        now: datetime,
        next_fire: NextFireFn,
        owns: Callable[[str], bool] | None = None,
    ) -> SyncReport:
        """Make the DECORATOR masters match ``definitions`` (keyed by business key) in one
        transaction: create missing ones, update changed ones (a new cron or zone restarts
        from ``now``), cancel DECORATOR masters whose key is not among them and whose target
        ``owns`` accepts (None: every target)."""

    def try_lock(self, name: str, owner: str, *, now: datetime, lease: timedelta) -> bool:
        """Take or renew the lease ``name`` for ``owner`` until ``now + lease``; False while
        another owner holds an unexpired lease."""

    def release_lock(self, name: str, owner: str) -> bool:
        """Give the lease back (False if ``owner`` did not hold it)."""


@runtime_checkable
class RetentionStore(Protocol):
    """Optional: removal of ended jobs (with their history), the archive, idempotency
    tombstones, and the dead-letter queue (docs/retention.md).

    Every removal is one short transaction over at most ``limit`` jobs that skips rows another
    transaction holds, so it never makes a claim or an outcome write wait. A job goes with its
    attempt history, tags and log lines; a job that another stored job still refers to (a batch
    parent with children, a job with dependants or branches) stays until they are gone.
    """

    def prune_jobs(
        self,
        status: JobStatus,
        before: datetime,
        *,
        limit: int,
        archive: bool,
        now: datetime,
        node_id: str,
    ) -> int:
        """Remove (after copying them to the archive when ``archive``) up to ``limit`` jobs that
        ended with ``status`` before ``before``, oldest first; return how many."""

    def count_prunable(self, status: JobStatus, before: datetime) -> int:
        """How many jobs :meth:`prune_jobs` would remove now, all batches together."""

    def archived_job(self, job_id: uuid.UUID) -> dict[str, Any] | None:
        """The archive row of a removed job (its fields, attempt history as a list), or None."""

    def purge_tombstones(self, before: datetime, *, limit: int) -> int:
        """Delete up to ``limit`` idempotency keys created before ``before`` whose job is not
        live; return how many (those keys can then be used again)."""

    def count_tombstones(self, before: datetime) -> int:
        """How many keys :meth:`purge_tombstones` would delete."""

    def purge_own_id_keys(
        self, after: str | None, *, limit: int, dry_run: bool = False
    ) -> tuple[int, str | None]:
        """Among the next ``limit`` key rows in key order after the key ``after`` (None: from
        the first), delete those whose key is their job's own id (rows a submission wrote
        before a job's own id held its key: they guard nothing); return how many (dry: would
        be), and the last key read (None once no row is left to read)."""

    def list_dead_letters(
        self, flt: DeadLetterFilter, *, limit: int, after: PageCursor | None = None
    ) -> list[JobRecord]:
        """FAILED jobs matching ``flt``, most recently failed first, continuing after ``after``."""

    def count_dead_letters(self, flt: DeadLetterFilter) -> int:
        """How many FAILED jobs match ``flt``."""

    def replay_dead_letters(self, flt: DeadLetterFilter, limit: int, *, now: datetime) -> int:
        """Move up to ``limit`` (1..1000) matching FAILED jobs back to PENDING with their attempts
        reset, all or nothing (as :meth:`Store.retry_jobs`); return how many."""

    def purge_dead_letters(self, flt: DeadLetterFilter, *, limit: int, now: datetime) -> int:
        """Remove up to ``limit`` matching FAILED jobs (as :meth:`prune_jobs` removes); return how
        many."""

    def try_lock(self, name: str, owner: str, *, now: datetime, lease: timedelta) -> bool:
        """Take or renew the cluster lease ``name`` (as :meth:`RecurringStore.try_lock`)."""

    def release_lock(self, name: str, owner: str) -> bool:
        """Give the lease back (False if ``owner`` did not hold it)."""


@runtime_checkable
class JobLogStore(Protocol):
    """Optional: the lines jobs write through ``context.logger()``, per attempt."""

    def append_job_logs(self, lines: Sequence[JobLogLine]) -> int:
        """Store ``lines`` (storable text, bounded by the caller) in one transaction; a line
        already stored (same job, epoch and position) is left as it is. Returns how many were
        new."""

    def job_logs(self, job_id: uuid.UUID, *, limit: int = 10_000) -> list[JobLogLine]:
        """A job's lines, oldest attempt first, in the order written."""

    def purge_job_logs(self, before: datetime, *, limit: int) -> int:
        """Delete up to ``limit`` lines written before ``before``; return how many."""


@runtime_checkable
class QueryStore(Protocol):
    """Optional store capability: the reads of the query API (``app.jobs``), built for tables
    of millions of jobs: every listing is a keyset range scan (no OFFSET), newest job first."""

    def query_jobs(
        self, query: JobQuery, *, after: uuid.UUID | None, limit: int
    ) -> list[JobRecord]:
        """At most ``limit`` jobs matching ``query``, job id descending, each id below
        ``after`` (None: from the newest)."""

    def dependants(self, job_id: uuid.UUID, *, limit: int) -> list[JobRecord]:
        """The jobs that wait for ``job_id`` to end (chain steps and branches), and theirs in
        turn, nearest first; at most ``limit``."""

    def job_links(self, job_ids: Sequence[uuid.UUID], *, limit: int) -> list[JobLink]:
        """The workflow edges that touch any of ``job_ids`` (as parent or as child), with the
        branch conditions; at most ``limit``, children of one parent in creation order."""

    def queue_health(self, *, now: datetime, window: timedelta) -> QueueHealth:
        """Counts by live status, the dead-letter count, what is due at ``now`` and how long
        the oldest due job has waited, the jobs ended within ``window`` before ``now``, and
        the running jobs per node."""

    def running_jobs(self, *, limit: int) -> list[RunningJob]:
        """Jobs held by nodes now (RUNNING or QUEUED), by node, at most ``limit``."""


@runtime_checkable
class StreamingInsertStore(Protocol):
    """Optional: a store that sends a submission's jobs while the caller is still building the
    rest (client and database work at once instead of in turn)."""

    insert_chunk_size: int
    """Jobs per chunk the store wants; submissions of at most this many are not worth streaming."""

    def insert_job_chunks(
        self, chunks: Iterable[Sequence[NewJob]], *, now: datetime
    ) -> list[InsertResult]:
        """:meth:`Store.insert_jobs` of the concatenated ``chunks``, in one transaction of its
        own: same results, same errors, nothing inserted if anything fails (including an
        exception raised by ``chunks`` itself). ``chunks`` is iterated once; the store may
        send each chunk before asking for the next."""


@runtime_checkable
class WorkflowStore(Protocol):
    """Optional store capability: batches, chains, workflow branches and signals
    (docs/workflows.md).

    Every job of a flow is stored at submit, in one transaction. Whatever follows a job's end
    (releasing or canceling its dependents, evaluating branch conditions, counting batch
    children, completing a batch exactly once) happens inside the transaction that ends it: the
    outcome write (:meth:`Store.record_outcomes`), a cancellation (:meth:`Store.cancel_job` and
    the other calls that end jobs), a signal timeout, a seal. Those calls take the caller's
    :class:`~ratchet.domain.workflow.FlowResolver` (``resolve``), the only way the store turns
    a stored predicate or enum reference into code, and return what must happen after their
    commit as :class:`~ratchet.domain.workflow.FlowEffect` values (events, ``on_success`` /
    ``on_failure`` callbacks, progress hooks, wakeups), which the caller applies.
    """

    # -- submission -------------------------------------------------------------------------
    def insert_flow(
        self,
        jobs: Sequence[FlowJob],
        *,
        now: datetime,
        branches: Sequence[BranchSpec] = (),
        batch: BatchSpec | None = None,
        connection: Any = None,
    ) -> InsertResult:
        """Insert a flow (head first) in one transaction (or in ``connection``'s): its jobs,
        branch conditions and batch row.

        Only the head's idempotency key answers with its holder (``inserted`` False, nothing
        stored); a taken business key of any job raises ``DuplicateBusinessKeyError`` and a
        taken idempotency key of a later job ``DuplicateIdempotencyKeyError``, storing nothing.
        """

    def add_batch_children(
        self, batch_id: uuid.UUID, children: Sequence[FlowJob], *, now: datetime
    ) -> int:
        """Insert one chunk of a streaming batch and add it to the total, in one transaction;
        return the new total.

        :raises InvalidJobOptions: the batch does not exist, is sealed, or was canceled.
        """

    def seal_batch(
        self, batch_id: uuid.UUID, *, now: datetime, resolve: FlowResolver
    ) -> FlowWrite[BatchContext | None]:
        """No more children will come: complete the batch now if every child already ended
        (exactly once, however the seal races the last child's end). ``value``: the batch's
        counters (None: no such batch)."""

    def get_batch(self, batch_id: uuid.UUID) -> BatchContext | None:
        """The batch's counters now (None: no such batch)."""

    def batch_completion_processed(self, batch_id: uuid.UUID) -> bool:
        """Whether the batch's completion was processed (or the batch canceled)."""

    # -- signals ----------------------------------------------------------------------------
    def deliver_signal(self, job_id: uuid.UUID, payload: str, *, now: datetime) -> int:
        """WAITING -> PENDING for one job waiting for a signal, storing ``payload``; 1, or 0 if
        it is not (any more) waiting. Ends no job, so it has no effects."""

    def deliver_signal_by_key(self, key: str, payload: str, *, now: datetime) -> int:
        """As :meth:`deliver_signal` for every job waiting on ``key``, in one statement;
        return how many were released."""

    def read_signal(self, job_id: uuid.UUID) -> str | None:
        """The stored signal of a live job (None: none delivered)."""

    def expire_signal_waits(
        self,
        *,
        now: datetime,
        limit: int,
        resolve: FlowResolver,
        policy: RetryPolicy | None = None,
    ) -> FlowWrite[int]:
        """Fail up to ``limit`` signal waits whose timeout passed, through the retry decision
        (with a retry left the job waits again); rows another scanner holds are skipped.
        ``value``: how many waits were handled."""


@runtime_checkable
class TransactionalStore(Protocol):
    """Optional: a store whose submissions join a caller's transaction (``connection=`` of
    :meth:`Store.insert_jobs` and :meth:`WorkflowStore.insert_flow`; for the SQL store a
    SQLAlchemy ``Connection`` or ``Session``), and that tells the engine when it ended.

    The store knows what ``connection`` is; the engine only hands it back here, so what follows
    a submission (events, wakeups) waits for the caller's commit.
    """

    def after_commit(
        self,
        connection: Any,
        callback: Callable[[], None],
        *,
        on_rollback: Callable[[], None] | None = None,
    ) -> None:
        """Call ``callback`` once the transaction open on ``connection`` commits; if it rolls
        back instead, forget it and call ``on_rollback`` (if given). Each is called at most
        once, in the order registered, on the thread that ends the transaction."""


@dataclass(frozen=True)
class CancelRequest:
    """An operator asked the attempt ``(job_id, epoch)`` running on a node to stop."""

    job_id: uuid.UUID
    epoch: int
    requested_at: datetime


@dataclass(frozen=True)
class QueueGauges:
    """What waits in the queue at one moment (:meth:`QueueGaugeStore.queue_gauges`)."""

    depths: dict[tuple[str, int], int]
    """Live jobs by (status, priority ordinal); only the pairs that have jobs."""
    oldest_due: datetime | None
    """The scheduled time of the oldest PENDING job due at the time asked (None: none is due)."""


@runtime_checkable
class QueueGaugeStore(Protocol):
    """Optional store capability: the queue's gauges for metrics, in one cheap read.

    Sampled by one node of the cluster at a time (``docs/observability.md``).
    """

    def queue_gauges(self, *, now: datetime) -> QueueGauges:
        """Live jobs by status and priority, and the oldest PENDING job due at ``now``."""


@runtime_checkable
class CancellationStore(Protocol):
    """Optional: delivers ``cancel_job(id, interrupt=True)`` to the node running the job."""

    def request_cancellation(
        self, job_id: uuid.UUID, *, now: datetime, resolve: FlowResolver | None = None
    ) -> FlowWrite[bool]:
        """Cancel a live job like ``cancel_job`` (same answer and effects); if it was RUNNING,
        also leave a request for its owner node to stop the attempt."""

    def cancellation_requests(self, node_id: str, *, now: datetime) -> list[CancelRequest]:
        """Take (return and delete) the requests addressed to ``node_id``."""


@runtime_checkable
class WatcherStore(Protocol):
    """Optional: cluster liveness and the stalled-job watcher (docs/clustering.md).

    Node incarnations with heartbeats and a state (ALIVE, DRAINING, DEAD), the watcher's
    transitions (each one a conditional write, idempotent when watchers race), takeovers with a
    new epoch, reservations (QUEUED), fenced progress and checkpoints, and the drain hand-back.
    """

    def register_incarnation(self, node: NodeInfo, *, now: datetime) -> list[NodeRecord]:
        """Register ``node`` ALIVE; return the other live incarnations with its name and host."""

    def beat(
        self, node_id: str, *, now: datetime, breakers: Mapping[str, str] | None = None
    ) -> bool:
        """Refresh a live incarnation's heartbeat, and with ``breakers`` (service name to
        state, as :func:`~ratchet.domain.breaker.published_breakers` makes it) the breakers it
        publishes; False if it is DEAD or gone."""

    def set_draining(self, node_id: str, *, now: datetime) -> bool:
        """ALIVE -> DRAINING; False unless it was ALIVE."""

    def declare_dead(
        self, node_ids: Collection[str], *, now: datetime, silent_for: timedelta | None = None
    ) -> list[str]:
        """Mark live incarnations DEAD (one compare-and-set each); return those marked. A store
        with :class:`PermitStore` deletes the resource permits of the nodes it marks."""

    def watch(
        self,
        *,
        now: datetime,
        settings: WatcherSettings,
        decide: Callable[[StalledJob], Outcome],
        judge_silence: bool = True,
        resolve: FlowResolver | None = None,
    ) -> WatcherReport:
        """One watcher pass: silent nodes -> DEAD and RUNNING jobs without progress -> TIMED_OUT
        (when ``judge_silence``), then the other due job transitions. The outcomes recorded for
        expired jobs are followed in their flows as in :meth:`Store.record_outcomes`
        (``resolve``); the report's ``effects`` are what must follow the commit. A store with
        :class:`PermitStore` also deletes the permits that nodes without a live row (deregistered,
        or never registered) acquired at least ``dead_after`` ago."""

    def takeover(
        self,
        node_id: str,
        limit: int,
        *,
        now: datetime,
        settings: WatcherSettings,
        exclude: Collection[uuid.UUID] = (),
        supports: Callable[[str, str | None], bool] | None = None,
        node_tags: frozenset[str] = frozenset(),
    ) -> list[ClaimedJob]:
        """Take over eligible TIMED_OUT jobs (epoch + 1), within the node's slots, and only
        those ``supports(target, executor)`` accepts (None: any) and whose affinity
        ``node_tags`` satisfy. Jobs whose takeover policy is FAIL are never taken over; a
        RESTART job's checkpoint is dropped and its stalled attempt counted as failed."""

    def acquire_work(
        self,
        node_id: str,
        want: int,
        *,
        now: datetime,
        settings: WatcherSettings,
        boost_interval: timedelta,
        reserved: Sequence[ClaimedJob] = (),
        exclude: Collection[uuid.UUID] = (),
        supports: Callable[[str, str | None], bool] | None = None,
        without_row: bool = False,
        node_tags: frozenset[str] = frozenset(),
    ) -> AcquiredWork:
        """One poll: takeovers (of jobs ``supports`` accepts), then reserved jobs started (only
        as many as the takeovers left room for; the others stay reserved), then claims."""

    def reserve(
        self,
        node_id: str,
        limit: int,
        *,
        now: datetime,
        boost_interval: timedelta,
        node_tags: frozenset[str] = frozenset(),
    ) -> list[ClaimedJob]:
        """Reserve due PENDING jobs that ``node_tags`` satisfy as QUEUED (epoch + 1), within the
        node's prefetch."""

    def start_reserved(self, node_id: str, job_id: uuid.UUID, epoch: int, *, now: datetime) -> bool:
        """QUEUED -> RUNNING for the node that reserved it; False if the reservation is gone."""

    def record_progress(
        self,
        node_id: str,
        job_id: uuid.UUID,
        epoch: int,
        *,
        now: datetime,
        step: int | None = None,
        data: Any = None,
    ) -> bool:
        """Fenced progress (and checkpoint); True if it revived a TIMED_OUT job.

        :raises FencedOut: the node no longer owns the job.
        """

    def last_checkpoint(self, job_id: uuid.UUID) -> Checkpoint | None:
        """The job's last checkpoint, or None."""

    def hand_back(
        self,
        node_id: str,
        job_ids: Sequence[uuid.UUID] | None,
        *,
        now: datetime,
        settings: WatcherSettings,
    ) -> tuple[int, int]:
        """Drain: QUEUED -> PENDING, RUNNING -> TIMED_OUT eligible at once."""

    def job_liveness(self, job_ids: Sequence[uuid.UUID] | None = None) -> list[JobLiveness]:
        """The watcher's view of live jobs."""


@dataclass(frozen=True)
class WakeupHint:
    """A hint that new work may be claimable (or, with ``target`` set to
    :data:`CANCEL_REQUESTS_TARGET`, that a cancellation request was stored; with
    :data:`CLAIMED_TARGET`, that a node claimed what it could see). Never needed for
    correctness."""

    priority: JobPriority
    origin_node: str
    target: str | None = None
    jobs: int = 1
    """How many jobs the hint is about: submitted (a new-work hint; hints coalesced on their
    way add up) or claimed (:data:`CLAIMED_TARGET`)."""
    remote: bool = field(default=False, compare=False, repr=False)
    """Received from another process (set by the coordinator on delivery, never sent)."""


#: The :class:`WakeupHint` target that announces a stored ``cancel_job(id, interrupt=True)``
#: request rather than new work: a busy node reads its requests at once instead of at its next
#: poll of them. No job's target can have this value (targets are ``module:qualname``).
CANCEL_REQUESTS_TARGET = "<cancel-requests>"

#: The :class:`WakeupHint` target with which a node that answered new-work hints reports that
#: its claim took everything it could see (``jobs`` of them): the other nodes then skip the
#: claims they were about to make for those hints (see ``ratchet.engine.hint_response``).
CLAIMED_TARGET = "<claimed>"


class ClusterCoordinator(Protocol):
    """Carries wakeup hints between nodes so idle pollers react within milliseconds."""

    def notify_new_work(self, hint: WakeupHint) -> None:
        """Publish a hint. Called after the submitting transaction committed. Never raises."""

    def add_listener(self, listener: Callable[[WakeupHint], None]) -> None:
        """Call ``listener`` for every hint received (on the coordinator's thread)."""

    def close(self) -> None:
        """Stop receiving and release connections. Idempotent."""


class CoordinatorCounts(Protocol):
    """The counters a :class:`CountingCoordinator` reports (metrics read ``published``)."""

    @property
    def published(self) -> int:
        """Hints the broker accepted."""


@runtime_checkable
class CountingCoordinator(Protocol):
    """Optional extra of a :class:`ClusterCoordinator`: it counts what it did."""

    def stats(self) -> CoordinatorCounts:
        """A snapshot of its counters."""


class WakeupConnection(Protocol):
    """One dedicated connection on which a :class:`WakeupTransport` receives wakeup messages.

    Only the coordinator's subscriber thread calls it, except :meth:`interrupt`.
    """

    def listen(self) -> None:
        """Subscribe to the wakeup channel; return once the broker confirmed it.

        :raises Exception: the subscription failed (the coordinator reconnects).
        """

    def receive(self, timeout: float) -> Sequence[str | bytes] | None:
        """Wait up to ``timeout`` seconds for traffic.

        ``None`` when nothing arrived; otherwise the messages that did, in order. An empty
        sequence means the connection showed life without a message (a ping's answer).

        :raises Exception: the connection is lost.
        """

    def ping(self) -> bool:
        """Ask the broker for a sign of life after a silence.

        True when it has answered already (a synchronous round trip); False when the answer
        comes later through :meth:`receive`.

        :raises Exception: the connection is lost.
        """

    def interrupt(self) -> None:
        """Make a blocked :meth:`listen` or :meth:`receive` return soon (it may raise).

        Called from another thread while the connection is open; must not block.
        """

    def close(self) -> None:
        """Release the connection."""


class WakeupTransport(Protocol):
    """What a broker-backed wakeup coordinator needs from its broker, and nothing more.

    :class:`ratchet.adapters.wakeups.BrokerCoordinator` turns a transport into a
    :class:`ClusterCoordinator`: the outbox, the publisher and subscriber threads, reconnection
    with backoff, keepalive, listener fan-out, ignoring its own messages, counters, logging,
    ``close`` and ``fork`` live there once.
    """

    where: str
    """The broker and channel, safe to log (no password)."""

    errors: tuple[type[BaseException], ...]
    """Exceptions that mean the broker is unreachable or a connection broke: logged once per
    outage without a traceback. Anything else is a bug, logged with its traceback (and handled
    the same way: the coordinator's threads never die)."""

    def connect(self) -> WakeupConnection:
        """Open a new receiving connection (not yet subscribed)."""

    def publish(self, messages: Sequence[str]) -> None:
        """Send ``messages`` (one or more, in this order) to every subscriber of the channel.

        Called from the publisher thread only.

        :raises Exception: not sent (the hints are dropped and counted).
        """

    def encode(self, hint: WakeupHint, sender: str) -> str:
        """The wire form of ``hint`` sent by the coordinator instance ``sender``."""

    def decode(self, message: str | bytes) -> tuple[WakeupHint, str]:
        """``(hint, sender)`` from the wire form.

        :raises ValueError: (or ``KeyError`` / ``TypeError``) not a hint; counted and ignored.
        """

    def redact(self, text: str) -> str:
        """``text`` (an error message or traceback) with every secret of this transport hidden."""

    def after_fork_in_child(self) -> None:
        """Forget, without closing, every connection inherited from the parent process."""

    def close(self) -> None:
        """Release the publishing side. Called once, after the coordinator's threads stopped."""


class ClassPolicy(Protocol):
    """Decides which job targets may be stored and run."""

    def is_allowed(self, module: str, qualname: str) -> bool: ...


class JobAuthorizationPolicy(Protocol):
    """Decides which principal may do what to which job (docs/security.md). The default,
    :class:`~ratchet.domain.authorization.PermitAll`, allows everything."""

    def authorize(self, request: AuthorizationRequest) -> bool:
        """Whether the request's principal may do its action (False: ``NotAuthorized``)."""

    def filter_for_principal(self, job_filter: JobFilter, principal: str | None) -> JobFilter:
        """The filter a listing by ``principal`` runs with (narrow it, e.g. to the jobs the
        principal submitted: ``replace(job_filter, caller_principal=principal)``)."""


class KeyProvider(Protocol):
    """Supplies the AES-256 keys of payload encryption (docs/security.md, "Rotation")."""

    def current_key_id(self) -> str:
        """The id of the key new payloads and results are sealed with."""

    def key(self, key_id: str) -> bytes | None:
        """The 32-byte key called ``key_id``, or None if this provider does not have it."""


@dataclass(frozen=True)
class KeyUsage:
    """How many stored jobs have their arguments sealed with one key (None: not encrypted)."""

    key_id: str | None
    live: int
    """Jobs not ended yet (still to be decrypted by a worker)."""
    total: int


@runtime_checkable
class EncryptionKeyStore(Protocol):
    """Optional: reports which keys the stored payloads need (``ratchet keys report``)."""

    def key_usage(self) -> list[KeyUsage]:
        """The jobs per payload key id (NULL: plaintext), ordered by key id."""

    def jobs_on_key(self, key_id: str, limit: int) -> list[uuid.UUID]:
        """Up to ``limit`` ids of jobs whose arguments are sealed with ``key_id``, live first."""


class BeanResolver(Protocol):
    """Supplies the instance on which a method job runs."""

    def resolve(self, cls: type[T]) -> T: ...

    def clear(self) -> None:
        """Forget cached instances (on shutdown)."""


class ResilienceStrategy(Protocol):
    """Guards calls to a service (a circuit breaker)."""

    def is_available(self, service: str) -> bool:
        """False while the service's breaker is open."""

    def retry_delay(self, service: str) -> timedelta:
        """How long to wait before trying an unavailable service again."""

    def execute(self, service: str, call: Callable[[], T]) -> T:
        """Run ``call`` under the service's breaker, recording its outcome."""


@runtime_checkable
class BreakerRegistry(Protocol):
    """Optional capability of a :class:`ResilienceStrategy`: named, observable breakers."""

    def configure(self, service: str, spec: BreakerSpec) -> None:
        """Guard ``service`` as ``spec`` says (profile, recorded / ignored exceptions)."""

    def state(self, service: str) -> BreakerState:
        """The service's breaker state now."""

    def attach(self, clock: Clock, on_change: Callable[[Transition], None]) -> None:
        """Read time from ``clock`` and report every state change to ``on_change``."""


@runtime_checkable
class BreakerStates(Protocol):
    """Optional capability of a :class:`ResilienceStrategy`: the state of every breaker it has
    (sampled for metrics)."""

    def states(self) -> dict[str, BreakerState]:
        """Each service's breaker state now."""


class ExecutorProvider(Protocol):
    """Runs job attempts somewhere (threads, an event loop, processes).

    A provider is built with the worker's ``concurrency`` and runs at most that many calls at
    once; the worker may hand it more while its runs end fast (jobs claimed ahead,
    ``WorkerConfig.claim_ahead``), which wait in the provider's queue for a free one.
    """

    name: str

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Start ``fn``; the future completes when it returns or raises."""

    def shutdown(self, wait: bool = True) -> None:
        """Stop accepting work; wait for running work if asked."""


@runtime_checkable
class Dispatcher(Protocol):
    """Optional extra of an :class:`ExecutorProvider`: start work without a future.

    The worker never reads an attempt's future (the attempt reports its own outcome), so a
    provider that can skip creating one saves that cost on every job.
    """

    def dispatch(self, fn: Callable[[], object]) -> None:
        """Start ``fn``; an exception it raises is logged, not returned."""

    def dispatch_many(self, fns: Sequence[Callable[[], object]]) -> None:
        """Start each of ``fns`` (one hand-off for a whole claim), as :meth:`dispatch` does."""


@quick_init
@dataclass(frozen=True)
class JobCall:
    """One invocation of a job's target, handed to an :class:`InterruptibleExecutor`.

    ``invoke()`` runs it in this process (awaiting an ``async def`` target to completion);
    ``fn``/``args``/``kwargs`` allow running it elsewhere in this process (an event loop);
    ``target`` and ``payload`` (the stored reference and JSON arguments) let a provider run it
    in another process without pickling anything.
    """

    job: ClaimedJob
    target: str
    payload: str
    fn: Callable[..., Any]
    args: Sequence[Any]
    kwargs: dict[str, Any]
    context: Any
    """The attempt's :class:`~ratchet.engine.context.JobContext`."""
    invoke: Callable[[], Any]
    max_result_bytes: int = 65_536


class AttemptControl(Protocol):
    """What an executor provider sees of a running attempt (the watchdog owns the time)."""

    @property
    def deadline(self) -> datetime | None:
        """When the watchdog interrupts the attempt."""

    def is_cancellation_requested(self) -> bool:
        """Whether the attempt was asked to stop."""

    def watch(
        self,
        *,
        interrupt: Callable[[], object] | None = None,
        on_request: Callable[[], None] | None = None,
    ) -> AbstractContextManager[None]:
        """Install handlers for the duration of the call.

        ``interrupt`` runs (on the watchdog's thread) when the deadline passes while the call
        runs; it must only start stopping the call, never block. ``on_request`` runs when the
        cancellation request is set (at once if it already is). Entering raises
        :class:`~ratchet.domain.errors.JobTimeoutError` if the deadline has already passed.
        """


@runtime_checkable
class InterruptibleExecutor(Protocol):
    """Optional: a provider that runs the call itself and can stop it at the deadline.

    A provider without it still works: the call runs on the slot's thread, the timeout is still
    recorded at the deadline, and a late result is discarded, but nothing interrupts the call.
    """

    def run(self, call: JobCall, control: AttemptControl) -> Any:
        """Run ``call`` on the current slot (a task this provider's ``submit`` started) and
        return its value or raise its error; raise ``JobTimeoutError`` if interrupted."""


def iter_chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """Slices of ``items`` of at most ``size`` elements (helper for batched writes)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


# -- factories: what the registry hooks register (ratchet.hookspecs, ratchet.registry) --------
# Their parameters are positional-only: an implementation may name them as it likes.


class StoreFactory(Protocol):
    """Makes the store of a database URL: ``factory(url, options)``.

    ``options`` are the app's ``store_options`` (None when it passed none).
    """

    def __call__(self, url: str, options: dict[str, Any] | None, /) -> Store: ...


@dataclass(frozen=True, kw_only=True)
class CoordinatorContext:
    """What a coordinator factory is told about the app the coordinator serves."""

    store_url: str | None
    """The URL of the app's store (None when the coordinator is made outside an app), for a
    coordinator that reuses the store's database (``coordinator="postgres"``)."""
    node_name: str
    """The app's node name (its ``node_name`` setting, else ``client``)."""


class CoordinatorFactory(Protocol):
    """Makes a coordinator: ``factory(spec, context)``.

    ``spec`` is the app's ``coordinator`` argument as given: a registered name (``local``) or a
    URL whose scheme is one (``redis://host/0``).
    """

    def __call__(self, spec: str, context: CoordinatorContext, /) -> ClusterCoordinator: ...


class ExecutorFactory(Protocol):
    """Makes an executor provider with ``max_workers`` job slots: ``factory(max_workers)``."""

    def __call__(self, max_workers: int, /) -> ExecutorProvider: ...


# ---------------------------------------------------------------------------------- tracing
#: A span attribute value (what every tracing system can hold).
SpanValue = str | int | float | bool


class SubmitSpan(Protocol):
    """The span around one submission (a tracer's), open while the jobs are built and stored."""

    @property
    def trace_context(self) -> str | None:
        """The context every job of the submission stores, so that its attempts join this
        span's trace (at most :data:`~ratchet.domain.model.MAX_TRACE_CONTEXT` characters of
        storable text); None: nothing to store."""
        ...

    def set_attribute(self, key: str, value: SpanValue) -> None:
        """Add an attribute learnt after the span started (a job id, say)."""
        ...


class AttemptSpan(Protocol):
    """The span of one attempt (a tracer's).

    :meth:`activate` and :meth:`failed` are called on the attempt's thread; :meth:`end` there or
    on the watchdog's thread (a timeout), and must be idempotent: the first call wins.
    """

    def activate(self) -> AbstractContextManager[None]:
        """Make the span current for the block (spans the job makes become its children)."""
        ...

    def failed(self, error_type: str, message: str, traceback: str, *, timed_out: bool) -> None:
        """The attempt failed with an exception of class ``error_type`` (record it). ``message``
        and ``traceback`` have been through the error sanitiser: a tracer never sees the raw
        exception, so no secret the sanitiser removes reaches a tracing backend."""
        ...

    def end(self, outcome: str) -> None:
        """End the span with how the attempt ended (``SUCCEEDED``, ``RETRY``, ``DEAD``,
        ``RESCHEDULE``, ``TIMED_OUT``, ``NOT_RUN``)."""
        ...


class Tracer(Protocol):
    """Traces submissions and attempts (supplied by ``ratchet_job_tracer``; see docs/observability.md).

    The engine calls it only when an app has one, so an app without tracing pays nothing.
    """

    def submission(
        self, operation: str, attributes: dict[str, SpanValue]
    ) -> AbstractContextManager[SubmitSpan]:
        """A span for one submission (``enqueue``, ``schedule``, ``submit_many``, ``workflow``,
        ``batch``, ``batch_chunk``, ``replace``, ``recurring``), child of the caller's current
        span; an exception leaving the block is recorded on it."""
        ...

    def attempt(self, job: ClaimedJob, node_id: str) -> AttemptSpan:
        """Start the span of ``job``'s attempt on ``node_id``, parented on the job's stored
        :attr:`~ratchet.domain.model.ClaimedJob.trace_context` (a new trace without one)."""
        ...
