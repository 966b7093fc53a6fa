"""The dialect-neutral SQL store. Dialects supply only their differences.

Every method is one short transaction. Writes by an executing node are fenced: they apply only
while the job is RUNNING under that node and epoch, checked inside the same transaction.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import (
    Select,
    create_engine,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Connection, Engine, Row, make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from ratchet.domain.affinity import Affinity
from ratchet.domain.breaker import read_published_breakers
from ratchet.domain.envelope import envelope_key_id
from ratchet.domain.errors import (
    ConfigurationError,
    ConnectionLimitReached,
    DuplicateBusinessKeyError,
    DuplicateIdempotencyKeyError,
    InvalidJobOptions,
    SchemaNotReady,
    StoreUnavailable,
)
from ratchet.domain.lifecycle import JobPriority, JobStatus, check_transition, sources_of
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
    own_id,
)
from ratchet.domain.options import BackoffPolicy
from ratchet.domain.takeover import TakeoverPolicy
from ratchet.domain.workflow import FlowEffect, FlowResolver
from ratchet.ports import InsertResult, StoreCapabilities, iter_chunks
from ratchet.sql import attempt_history, schema
from ratchet.sql.affinity import AffinityStoreMixin, tag_list
from ratchet.sql.caller_tx import CallerTransactions, caller_connection
from ratchet.sql.cancellation import CancellationStoreMixin
from ratchet.sql.dialect import ErrorKind, SqlDialect
from ratchet.sql.hotpaths import (
    OWNED_ROWS,
    HotPaths,
    _ms,
    first_of_each_key,
    insert_results,
    plan_outcomes,
)
from ratchet.sql.key_usage import EncryptionKeyStoreMixin
from ratchet.sql.metrics_store import QueueGaugeStoreMixin
from ratchet.sql.permits import PermitStoreMixin
from ratchet.sql.pool import ShrinkingQueuePool, ping_when_idle
from ratchet.sql.query_store import QueryStoreMixin
from ratchet.sql.recurring_store import RecurringStoreMixin
from ratchet.sql.retention_store import RetentionStoreMixin
from ratchet.sql.type_limits import TypeLimitStoreMixin
from ratchet.sql.watcher_store import CHUNK, WatcherStoreMixin
from ratchet.sql.workflow_store import REFUSE_ALL, WorkflowStoreMixin

log = logging.getLogger("ratchet.store")

T = TypeVar("T")

Q = schema.job_queue
J = schema.job
END = schema.job_end
JOB_WITH_STATE = schema.job_with_state
TAGS = schema.job_tag
IDEM = schema.idempotency_key
EXE = schema.job_execution
NODE = schema.node

RETRY_ATTEMPTS = 8
CANCELLABLE = sources_of(JobStatus.CANCELED)
TAG_CANCELLABLE = (JobStatus.PENDING, JobStatus.PAUSED, JobStatus.WAITING)


OutcomeHook = Callable[[Connection, list[Outcome], datetime, list[FlowEffect], FlowResolver], None]
"""``(conn, applied outcomes, now, effects, resolve)``: appends what must follow the commit to
``effects`` and resolves stored references only through ``resolve``. A hook acts only on
outcomes with ``flow_effects``: a batch without any may be written without calling it."""
TerminalHook = Callable[
    [Connection, list[uuid.UUID], JobStatus, datetime, list[FlowEffect], FlowResolver], None
]
"""``(conn, job ids, terminal status, now, effects, resolve)``, as :data:`OutcomeHook`."""


def describe_location(url: str) -> str:
    """``url`` as logs and errors may show it: password hidden, a SQLite file's path absolute
    (a relative one depends on the working directory, the usual surprise)."""
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() == "sqlite" and database and database != ":memory:":
        parsed = parsed.set(database=os.path.abspath(database))
    return parsed.render_as_string(hide_password=True)


class SqlStore(
    EncryptionKeyStoreMixin,
    QueueGaugeStoreMixin,
    QueryStoreMixin,
    AffinityStoreMixin,
    PermitStoreMixin,
    CancellationStoreMixin,
    WorkflowStoreMixin,
    RecurringStoreMixin,
    TypeLimitStoreMixin,
    WatcherStoreMixin,
    RetentionStoreMixin,
):
    """A :class:`~ratchet.ports.Store` over SQLAlchemy Core."""

    atomic_insert = False
    """Whether :meth:`_insert` writes with one statement (plus reads), so that a submission
    outside a caller's transaction may run it in autocommit mode."""

    atomic_record = False
    """Whether :meth:`_record` writes outcomes with one statement when none of them has flow
    effects, so that such a batch may be written in autocommit mode."""

    def __init__(self, url: str, dialect: SqlDialect, **engine_options: Any) -> None:
        self.url = url
        self.location = describe_location(url)
        self.dialect = dialect
        kwargs = {**dialect.engine_kwargs(url), **engine_options}
        self.engine: Engine = create_engine(url, **kwargs)
        dialect.configure_engine(self.engine, write=True)
        if isinstance(self.engine.pool, ShrinkingQueuePool):
            self.engine.pool.refused = self._refused_for_its_limit
        if dialect.ping_idle_after is not None:
            ping_when_idle(self.engine, dialect.ping_idle_after)
        if dialect.separate_write_engine():
            self.read_engine: Engine = create_engine(url, **kwargs)
            dialect.configure_engine(self.read_engine, write=False)
            if dialect.ping_idle_after is not None:
                ping_when_idle(self.read_engine, dialect.ping_idle_after)
        else:
            self.read_engine = self.engine
        self.capabilities = StoreCapabilities(
            dialect=dialect.name, skip_locked=dialect.skip_locked, multi_host=dialect.multi_host
        )
        self._locked_cache: dict[tuple[int, bool], Select[Any]] = {}
        self.hot_paths: HotPaths = self.make_hot_paths()
        """The statement sets of the claim, the insert and the outcome write (see
        :mod:`ratchet.sql.hotpaths`)."""
        self._engine_kwargs = kwargs
        self.outcome_hooks: list[OutcomeHook] = []
        """Called inside the outcome transaction with the outcomes that applied (not fenced),
        that write's effect list and the caller's resolver: features that must react exactly
        once (batch counters, chains) hook in here."""
        self.terminal_hooks: list[TerminalHook] = []
        """Called inside the transaction that cancels live jobs (before their rows go), with
        that write's effect list and the caller's resolver."""
        self._install_workflow_hooks()
        self._caller_transactions = CallerTransactions()
        self.retried_errors = 0
        """How many retryable errors (deadlocks, busy) were absorbed by retrying."""
        self._schema_ready = False
        self._schema_lock = threading.Lock()

    def require_schema(self) -> None:
        """Make sure the database is at the schema this installation ships, once per store:
        the first operation reads the migration version table (a failed check is repeated on
        the next operation, a passed one never; :meth:`migrate` counts as one).

        :raises SchemaNotReady: no schema, or an older one; the message names the command that
            fixes it.
        :raises StoreUnavailable: the database cannot be reached.
        """
        if self._schema_ready:
            return
        from ratchet.sql.migrate import schema_problem

        with self._schema_lock:
            if self._schema_ready:
                return
            try:
                problem = schema_problem(self)
            except DBAPIError as exc:
                outage = self._outage(exc, self._translate(exc))
                if outage is not None:
                    raise outage from exc
                raise
            except PoolTimeout as exc:
                raise self._pool_exhausted() from exc
            if problem is not None:
                raise SchemaNotReady(problem)
            self._schema_ready = True

    # ------------------------------------------------------------------ plumbing
    def _translate(self, exc: SQLAlchemyError) -> ErrorKind:
        return self.dialect.classify(exc)

    def _run(
        self, work: Callable[[Connection], T], *, write: bool = True, autocommit: bool = False
    ) -> T:
        """Run ``work`` in a transaction, retrying deadlocks and busy errors with backoff.

        ``autocommit``: ``work`` is a single statement, atomic on its own, so it runs without
        ``BEGIN`` and ``COMMIT`` (two round trips fewer on a client/server database).
        """
        if not self._schema_ready:
            self.require_schema()
        engine = self.engine if write else self.read_engine
        autocommit = autocommit and self.dialect.switches_autocommit
        delay = 0.005
        for attempt in range(1, RETRY_ATTEMPTS + 1):
            try:
                if autocommit:
                    return self._run_autocommit(engine, work)
                with engine.begin() as conn:
                    return work(conn)
            except DBAPIError as exc:
                self._retry_or_raise(exc, attempt, delay)
                delay = min(delay * 2, 0.5)
            except PoolTimeout as exc:
                raise self._pool_exhausted() from exc
        raise AssertionError("unreachable")

    def _retry_or_raise(self, exc: DBAPIError, attempt: int, delay: float) -> None:
        """Sleep ``delay`` before another attempt when ``exc`` is worth retrying (a deadlock
        or busy error, attempts left); else raise it (a lost database as StoreUnavailable, a
        refused connection as ConnectionLimitReached)."""
        kind = self._translate(exc)
        if kind is ErrorKind.RETRYABLE and attempt < RETRY_ATTEMPTS:
            self.retried_errors += 1
            log.debug("retrying after %s (attempt %d)", exc.orig, attempt)
            time.sleep(delay)
            return
        outage = self._outage(exc, kind)
        if outage is not None:
            raise outage from exc
        raise exc

    def _run_dbapi(self, work: Callable[[Any], T], *, commits_itself: bool = False) -> T:
        """Run ``work`` on a pooled DBAPI connection switched to autocommit: for one statement,
        atomic on its own, whose caller wants no SQLAlchemy ``Connection`` (setting one up and
        taking it down costs more CPU than a small insert itself). The same retries and errors
        as :meth:`_run`; the driver's errors are raised as SQLAlchemy's ``DBAPIError``, as
        :meth:`_run` raises them. ``commits_itself``: ``work`` commits on its own on an idle
        connection whatever its autocommit flag, which is then left as it is."""
        if not self._schema_ready:
            self.require_schema()
        engine = self.engine
        dialect = engine.dialect
        driver_error = dialect.loaded_dbapi.Error
        delay = 0.005
        for attempt in range(1, RETRY_ATTEMPTS + 1):
            try:
                pool = engine.pool
                # An idle connection, without the checkout's overhead:
                if (
                    isinstance(pool, ShrinkingQueuePool)
                    and (leased := pool.lease_idle()) is not None
                ):
                    idle = False
                    try:
                        result = self._autocommit_call(leased, work, driver_error, commits_itself)
                        idle = True  # it ran in autocommit and returned: no transaction is open
                        return result
                    finally:
                        pool.give_back(leased, idle=idle)
                try:
                    raw = engine.raw_connection()  # a failed connect raises the driver's error
                except driver_error as exc:
                    lost = dialect.is_disconnect(exc, None, None)
                    raise DBAPIError.instance(
                        None, None, exc, driver_error, dialect=dialect, connection_invalidated=lost
                    ) from exc
                try:
                    return self._autocommit_call(raw, work, driver_error, commits_itself)
                finally:
                    raw.close()
            except DBAPIError as exc:
                self._retry_or_raise(exc, attempt, delay)
                delay = min(delay * 2, 0.5)
            except PoolTimeout as exc:
                raise self._pool_exhausted() from exc
        raise AssertionError("unreachable")

    def _autocommit_call(
        self, raw: Any, work: Callable[[Any], T], driver_error: Any, commits_itself: bool = False
    ) -> T:
        """``work`` on the driver connection of the pooled ``raw`` (a checked-out connection
        or a leased pool entry), switched to autocommit for its duration and back unless it
        ``commits_itself`` (a connection found lost is invalidated, never reused)."""
        dialect = self.engine.dialect
        connection = raw.dbapi_connection
        try:
            if commits_itself:
                return work(raw.driver_connection)
            if not self.dialect.switches_autocommit:
                result = work(raw.driver_connection)
                connection.commit()
                return result
            self.dialect.set_autocommit(connection, True)
            try:
                return work(raw.driver_connection)
            finally:
                self.dialect.set_autocommit(connection, False)
        except driver_error as exc:
            lost = dialect.is_disconnect(exc, connection, None)
            if lost:
                raw.invalidate(exc)
            raise DBAPIError.instance(
                None, None, exc, driver_error, dialect=dialect, connection_invalidated=lost
            ) from exc

    def _refused_for_its_limit(self, error: BaseException) -> bool:
        """Whether ``error``, opening a connection, is the server's connection limit."""
        return self.dialect.classify(error) is ErrorKind.CONNECTION_LIMIT

    def _outage(self, exc: DBAPIError, kind: ErrorKind) -> StoreUnavailable | None:
        """The typed error of a database that cannot serve us (None: ``exc`` is no outage)."""
        if kind is ErrorKind.CONNECTION_LIMIT:
            return ConnectionLimitReached(
                f"{self.location}: the server refused a new connection, its connection limit "
                f"is reached ({str(exc.orig).strip()}). Raise "
                f"{self.dialect.connection_limit_setting(exc)}, or let each process open fewer "
                "connections (RATCHET_POOL_SIZE / RATCHET_MAX_OVERFLOW, ratchet worker "
                "--pool-size); see docs/deployment.md"
            )
        if kind is ErrorKind.TRANSIENT or exc.connection_invalidated:
            return StoreUnavailable(f"database unavailable: {exc.orig}")
        return None

    def _pool_exhausted(self) -> ConnectionLimitReached:
        pool = self.engine.pool
        size = getattr(pool, "size", lambda: "?")()
        overflow = getattr(pool, "max_overflow", "?")
        return ConnectionLimitReached(
            f"{self.location}: every connection of this process's pool is in use (pool_size "
            f"{size} + max_overflow {overflow}) and none came back in time; raise "
            "RATCHET_POOL_SIZE / RATCHET_MAX_OVERFLOW (or the store_options pool_size / "
            "max_overflow), or run fewer threads against the store; see docs/deployment.md"
        )

    def _run_autocommit(self, engine: Engine, work: Callable[[Connection], T]) -> T:
        """``work`` on a pooled connection switched to autocommit for its duration (the
        switch is a flag of the driver's connection: no round trip), then switched back."""
        with engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            self.dialect.set_autocommit(raw, True)
            try:
                result = work(conn)
                conn.commit()  # ends SQLAlchemy's transaction; nothing is sent in autocommit
                return result
            finally:
                try:
                    self.dialect.set_autocommit(raw, False)
                except Exception:  # a broken connection: the pool must not hand it out again
                    if not conn.invalidated:
                        conn.invalidate()

    def _locked(self, stmt: Select[Any], *, skip_locked: bool = False) -> Select[Any]:
        """A module-level ``stmt`` made to lock its rows by the dialect (waiting, or skipping
        rows others hold), built once."""
        key = (id(stmt), skip_locked)
        locked = self._locked_cache.get(key)
        if locked is None:
            lock = self.dialect.lock_for_claim if skip_locked else self.dialect.lock_rows
            locked = self._locked_cache[key] = lock(stmt)
        return locked

    def resize_pool(self, pool_size: int | None = None, max_overflow: int | None = None) -> bool:
        """Give the store's connection pool other sizes (None: keep that one), closing the
        connections it holds; what ``ratchet worker --pool-size`` and ``RATCHET_POOL_SIZE`` /
        ``RATCHET_MAX_OVERFLOW`` do to an app's store. Returns False, changing nothing, when
        the store's pool has no sizes (SQLite).

        :raises ConfigurationError: ``pool_size`` below 1 or ``max_overflow`` below 0.
        """
        if pool_size is not None and pool_size < 1:
            raise ConfigurationError(f"pool_size must be at least 1 (got {pool_size})")
        if max_overflow is not None and max_overflow < 0:
            raise ConfigurationError(f"max_overflow must be at least 0 (got {max_overflow})")
        pool = self.engine.pool
        if not isinstance(pool, ShrinkingQueuePool) or self.read_engine is not self.engine:
            return False
        size = pool.size() if pool_size is None else pool_size
        overflow = pool.max_overflow if max_overflow is None else max_overflow
        self.engine.pool = pool.resized(size, overflow)
        pool.dispose()
        return True

    def capability(self, kind: type[T]) -> T | None:
        return self if isinstance(self, kind) else None

    def migrate(self) -> None:
        from ratchet.sql.migrate import upgrade

        upgrade(self)
        self._schema_ready = True

    def close(self) -> None:
        self.engine.dispose()
        if self.read_engine is not self.engine:
            self.read_engine.dispose()
        self.dialect.close()

    def database_time(self) -> datetime:
        from ratchet.sql.types import from_micros

        def work(conn: Connection) -> datetime:
            value = conn.execute(select(func.current_timestamp())).scalar_one()
            if isinstance(value, str):
                value = datetime.fromisoformat(value)
            if value.tzinfo is None:
                from datetime import UTC

                value = value.replace(tzinfo=UTC)
            return from_micros(int((value.timestamp()) * 1_000_000))

        return self._run(work, write=False)

    # ------------------------------------------------------------------ submission
    def insert_jobs(
        self, jobs: Sequence[NewJob], *, now: datetime, connection: Any = None
    ) -> list[InsertResult]:
        for job in jobs:
            check_transition(None, job.status)
        if connection is not None:
            self.require_schema()
            conn = caller_connection(connection)
            try:
                return self._insert(conn, jobs, now)
            except DBAPIError as exc:
                self._raise_duplicate(exc, jobs)
                raise
        try:
            direct = self._insert_direct(jobs, now)
            if direct is not None:
                return direct
            return self._run(
                lambda conn: self._insert(conn, jobs, now), autocommit=self.atomic_insert
            )
        except DBAPIError as exc:
            if self._translate(exc) is not ErrorKind.DUPLICATE_JOB_ID:
                self._raise_duplicate(exc, jobs)
                raise
        # A job keyed by its own id is there already (a builder submitted again, or a retry
        # after a lost commit): rare, so only now are the ids looked up first.
        try:
            return self._run(lambda conn: self._insert(conn, jobs, now, check_ids=True))
        except DBAPIError as exc:
            self._raise_duplicate(exc, jobs)
            raise

    def _insert_direct(self, jobs: Sequence[NewJob], now: datetime) -> list[InsertResult] | None:
        """:meth:`_insert` on a bare DBAPI connection, as the work the dialect's insert
        statements give for it (:meth:`~ratchet.sql.hotpaths.InsertStatements.driver_insert`);
        None when they give none, or when the work gave up (the caller then runs
        :meth:`_insert`)."""
        if not jobs:
            return []
        first: dict[str, NewJob] = {}
        fresh = first_of_each_key(jobs, first)
        insert = self.hot_paths.insert
        work = insert.driver_insert(fresh, now, self.engine.dialect)
        if work is None:
            return None
        went_in = self._run_dbapi(work, commits_itself=insert.driver_insert_commits)
        if went_in is None:
            return None
        holders = (
            {}
            if went_in == len(fresh)
            else self._run(lambda conn: insert.holders_after(conn, fresh, went_in))
        )
        return insert_results(jobs, first, holders)

    def _raise_duplicate(self, exc: DBAPIError, jobs: Sequence[NewJob]) -> None:
        """Raise a taken key as its typed error, naming the key and its holder (if ``exc`` is
        one). Every submission path (plain, bulk, flows, streaming chunks, replacement) ends
        here, so each raises the same errors on every database."""
        kind = self._translate(exc)
        if kind is ErrorKind.DUPLICATE_JOB_ID:
            present = self._present_ids([j.job_id for j in jobs])
            job = next((j for j in jobs if j.job_id in present), jobs[0])
            raise DuplicateIdempotencyKeyError(job.idempotency_key, job.job_id) from exc
        if kind is ErrorKind.DUPLICATE_IDEMPOTENCY_KEY:
            keys = [j.idempotency_key for j in jobs]
            holders = self._lookup_keys(keys)
            key = next(iter(holders), keys[0] if len(keys) == 1 else "?")
            raise DuplicateIdempotencyKeyError(key, holders.get(key)) from exc
        if kind is ErrorKind.DUPLICATE_BUSINESS_KEY:
            bkeys = [j.business_key for j in jobs if j.business_key]
            holders = self._business_key_holders(bkeys)
            key = next(iter(holders), bkeys[0] if bkeys else "?")
            raise DuplicateBusinessKeyError(key, holders.get(key)) from exc

    def _lookup_keys(self, keys: Sequence[str]) -> dict[str, uuid.UUID]:
        def work(conn: Connection) -> dict[str, uuid.UUID]:
            found: dict[str, uuid.UUID] = {}
            for chunk in iter_chunks(list(keys), CHUNK):
                rows = conn.execute(
                    select(IDEM.c.idempotency_key, IDEM.c.job_id).where(
                        IDEM.c.idempotency_key.in_(chunk)
                    )
                )
                found.update({r.idempotency_key: r.job_id for r in rows})
            return found

        return self._run(work, write=False)

    def _present_ids(self, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Those of ``ids`` that name a stored job."""

        def work(conn: Connection) -> set[uuid.UUID]:
            return self._stored_ids(conn, ids)

        return self._run(work, write=False) if ids else set()

    @staticmethod
    def _stored_ids(conn: Connection, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Those of ``ids`` that name a job stored (as ``conn`` sees it)."""
        found: set[uuid.UUID] = set()
        for chunk in iter_chunks(list(ids), CHUNK):
            found.update(conn.execute(select(J.c.job_id).where(J.c.job_id.in_(chunk))).scalars())
        return found

    def _business_key_holders(self, keys: Sequence[str]) -> dict[str, uuid.UUID]:
        def work(conn: Connection) -> dict[str, uuid.UUID]:
            rows = conn.execute(
                select(Q.c.business_key, Q.c.job_id).where(Q.c.business_key.in_(list(keys)))
            )
            return {r.business_key: r.job_id for r in rows}

        return self._run(work, write=False) if keys else {}

    def make_hot_paths(self) -> HotPaths:
        """The statement sets of the hot paths (a dialect's store returns its own renderings)."""
        return HotPaths.generic(self.dialect)

    def _insert(
        self, conn: Connection, jobs: Sequence[NewJob], now: datetime, *, check_ids: bool = False
    ) -> list[InsertResult]:
        """Insert the jobs whose idempotency key is free; a taken key returns its holder, a key
        repeated in the batch its first job. ``check_ids``: first look up the jobs' ids, and
        skip the jobs stored already (each is its own holder); without it such a job fails the
        insert (a duplicate job id)."""
        if not jobs:
            return []
        first: dict[str, NewJob] = {}
        fresh = first_of_each_key(jobs, first)
        stored: dict[str, uuid.UUID] = {}
        if check_ids:
            present = self._stored_ids(conn, [j.job_id for j in fresh])
            stored = {j.idempotency_key: j.job_id for j in fresh if j.job_id in present}
            fresh = [j for j in fresh if j.job_id not in present]
        holders = self.hot_paths.insert.insert(conn, fresh, now) if fresh else {}
        return insert_results(jobs, first, {**stored, **holders})

    @staticmethod
    def _job_row(j: NewJob) -> dict[str, Any]:
        return {
            "job_id": j.job_id,
            "target": j.target,
            "payload": j.payload,
            "priority": int(j.priority),
            "max_retries": j.max_retries,
            "backoff_policy": j.backoff.value,
            "backoff_ms": _ms(j.backoff_delay),
            "timeout_ms": _ms(j.timeout),
            "params": json.dumps(dict(j.params)) if j.params else None,
            "tags": json.dumps(list(j.tags)) if j.tags else None,
            "idempotency_key": j.idempotency_key,
            "business_key": j.business_key,
            "executor": j.executor,
            "resource_name": j.resource_name,
            "recurring_master_id": j.recurring_master_id,
            "stall_timeout_ms": _ms(j.stall_timeout),
            "caller_principal": j.caller_principal,
            "encryption_key_id": envelope_key_id(j.payload),
            "require_tags": tag_list(j.affinity.require),
            "exclude_tags": tag_list(j.affinity.exclude),
            "schedule_to_start_ms": _ms(j.schedule_to_start),
            "takeover_policy": None if j.takeover_policy is None else j.takeover_policy.value,
            "trace_context": j.trace_context,
            "created_at": j.created_at,
            "attempts": 0,
        }

    def replace_job(
        self,
        old_id: uuid.UUID,
        new_job: NewJob,
        *,
        now: datetime,
        resolve: FlowResolver | None = None,
    ) -> FlowWrite[bool]:
        def work(conn: Connection) -> FlowWrite[bool]:
            row = self._locked_queue_row(conn, old_id)
            if row is None:
                return FlowWrite(False)
            status = JobStatus(row.status)
            check_transition(status, JobStatus.CANCELED)
            effects: list[FlowEffect] = []
            self._terminate(
                conn,
                [old_id],
                JobStatus.CANCELED,
                now,
                effects=effects,
                resolve=resolve or REFUSE_ALL,
                superseded_by=new_job.job_id,
            )
            replacement = new_job
            if replacement.business_key is None and row.business_key is not None:
                from dataclasses import replace as dc_replace

                replacement = dc_replace(new_job, business_key=row.business_key)
            [result] = self._insert(conn, [replacement], now)
            if not result.inserted:  # the key's holder cannot stand in: undo the cancel
                raise DuplicateIdempotencyKeyError(replacement.idempotency_key, result.job_id)
            return FlowWrite(True, tuple(effects))

        try:
            return self._run(work)
        except DBAPIError as exc:
            self._raise_duplicate(exc, [new_job])
            raise

    # ------------------------------------------------------------------ claim
    def _candidates(self, now: datetime, limit: int, node_tags: Sequence[Any] = ()) -> Select[Any]:
        """Per priority level, the ``limit`` oldest due jobs a node with ``node_tags`` may run
        (the claim's candidate query)."""
        return self.hot_paths.claim.candidates_select(now, limit, node_tags)

    def claim(
        self,
        node_id: str,
        limit: int,
        *,
        now: datetime,
        boost_interval: timedelta,
        node_tags: frozenset[str] = frozenset(),
    ) -> list[ClaimedJob]:
        if limit <= 0:
            return []
        claims = self.hot_paths.claim
        direct = claims.driver_claim(
            node_id, limit, now, boost_interval, node_tags, self.engine.dialect
        )
        if direct is not None:
            return self._run_dbapi(direct)
        return self._run(
            lambda conn: self._claim(conn, node_id, limit, now, boost_interval, node_tags)
        )

    def _claim(
        self,
        conn: Connection,
        node_id: str,
        limit: int,
        now: datetime,
        boost: timedelta,
        node_tags: frozenset[str] = frozenset(),
    ) -> list[ClaimedJob]:
        return self.hot_paths.claim.claim(conn, node_id, limit, now, boost, node_tags)

    def owned_jobs(
        self, node_id: str, jobs: Sequence[tuple[uuid.UUID, int]]
    ) -> set[tuple[uuid.UUID, int]]:
        if not jobs:
            return set()
        asked = set(jobs)

        ids = list({job_id for job_id, _ in asked})

        def work(conn: Connection) -> set[tuple[uuid.UUID, int]]:
            owned: set[tuple[uuid.UUID, int]] = set()
            for chunk in iter_chunks(ids, CHUNK):
                rows = conn.execute(OWNED_ROWS, {"ids": chunk, "node": node_id})
                owned.update((row[0], row[1]) for row in rows)  # job_id, epoch: by position
            return owned & asked

        # One chunk is one read: no BEGIN / COMMIT around it (a worker whose slots start late,
        # on a busy machine, asks this for many of its jobs).
        return self._run(work, write=False, autocommit=len(ids) <= CHUNK)

    # ------------------------------------------------------------------ outcomes
    def record_outcomes(
        self,
        node_id: str,
        outcomes: Sequence[Outcome],
        *,
        now: datetime,
        resolve: FlowResolver | None = None,
    ) -> OutcomeWrite:
        if not outcomes:
            return OutcomeWrite()
        in_flows = any(o.flow_effects for o in outcomes)
        if not in_flows:
            # No outcome of the batch is in a flow, so the outcome hooks have nothing to do
            # (they act on flows only): the write runs on the bare driver where the dialect's
            # statements give the work for it, without SQLAlchemy's Connection.
            planned = plan_outcomes(outcomes, now)
            direct = self.hot_paths.outcomes.driver_write(node_id, planned, self.engine.dialect)
            if direct is not None:
                applied = self._run_dbapi(direct)
                if len(applied) == len(outcomes):
                    # The written ids are distinct ids of these outcomes: all of them.
                    return OutcomeWrite()
                written = set(applied)
                return OutcomeWrite(tuple(o.job_id for o in outcomes if o.job_id not in written))
        plain = self.atomic_record and not in_flows
        resolver = resolve or REFUSE_ALL
        return self._run(
            lambda conn: self._record(conn, node_id, outcomes, now, resolver), autocommit=plain
        )

    def _written(
        self,
        conn: Connection,
        fenced: Sequence[uuid.UUID],
        applied: list[Outcome],
        now: datetime,
        resolve: FlowResolver,
    ) -> OutcomeWrite:
        """The end of the outcome write (:meth:`_record`): the outcome hooks see the
        outcomes that ``applied``, in the same transaction, and what they produce is returned
        with the ``fenced`` ids."""
        effects: list[FlowEffect] = []
        if applied:
            for hook in self.outcome_hooks:
                hook(conn, applied, now, effects, resolve)
        return OutcomeWrite(tuple(fenced), tuple(effects))

    def _record(
        self,
        conn: Connection,
        node_id: str,
        outcomes: Sequence[Outcome],
        now: datetime,
        resolve: FlowResolver,
    ) -> OutcomeWrite:
        """The fenced outcome write, for every dialect: the outcomes whose job ``node_id`` still
        holds under their epoch apply (written by the dialect's statement set,
        :class:`~ratchet.sql.hotpaths.OutcomeStatements`), the others are fenced (returned, in
        batch order, with what the outcome hooks produce for the applied ones)."""
        applied_ids = self.hot_paths.outcomes.write(conn, node_id, plan_outcomes(outcomes, now))
        fenced = [o.job_id for o in outcomes if o.job_id not in applied_ids]
        applied = [o for o in outcomes if o.job_id in applied_ids] if applied_ids else []
        return self._written(conn, fenced, applied, now, resolve)

    # ------------------------------------------------------------------ operators
    def _locked_queue_row(self, conn: Connection, job_id: uuid.UUID) -> Row[Any] | None:
        stmt = select(Q.c.status, Q.c.paused_from_status, Q.c.business_key, Q.c.epoch).where(
            Q.c.job_id == job_id
        )
        return conn.execute(self.dialect.lock_rows(stmt)).first()

    def _terminate(
        self,
        conn: Connection,
        ids: Sequence[uuid.UUID],
        status: JobStatus,
        now: datetime,
        *,
        effects: list[FlowEffect],
        resolve: FlowResolver,
        superseded_by: uuid.UUID | None = None,
        error: str | None = None,
    ) -> None:
        """Move live jobs to a terminal status (caller checked the transition); what follows in
        flows is appended to ``effects``."""
        for hook in self.terminal_hooks:
            hook(conn, list(ids), status, now, effects, resolve)
        for chunk in iter_chunks(list(ids), CHUNK):
            live = conn.execute(
                select(Q.c.status, *attempt_history.LIVE_ATTEMPT_COLUMNS).where(
                    Q.c.job_id.in_(chunk)
                )
            ).all()
            attempts = {r.job_id: r.attempts for r in live}
            running = [r for r in live if attempt_history.in_progress(r)]
            attempt_history.end_attempts(conn, running, status.value, now)
            conn.execute(delete(Q).where(Q.c.job_id.in_(chunk)))
            conn.execute(
                insert(END),
                [
                    {
                        "job_id": jid,
                        "terminal_status": status.value,
                        "terminated_at": now,
                        "terminal_error": error,
                        "attempts": attempts.get(jid, 0),
                    }
                    for jid in chunk
                ],
            )
            if superseded_by is not None:
                conn.execute(
                    update(J).where(J.c.job_id.in_(chunk)).values(superseded_by=superseded_by)
                )

    def cancel_job(
        self, job_id: uuid.UUID, *, now: datetime, resolve: FlowResolver | None = None
    ) -> FlowWrite[bool]:
        def work(conn: Connection) -> FlowWrite[bool]:
            row = self._locked_queue_row(conn, job_id)
            if row is None or JobStatus(row.status) not in CANCELLABLE:
                return FlowWrite(False)
            effects: list[FlowEffect] = []
            self._terminate(
                conn,
                [job_id],
                JobStatus.CANCELED,
                now,
                effects=effects,
                resolve=resolve or REFUSE_ALL,
            )
            return FlowWrite(True, tuple(effects))

        return self._run(work)

    def pause_job(self, job_id: uuid.UUID, *, now: datetime) -> bool:
        def work(conn: Connection) -> bool:
            row = self._locked_queue_row(conn, job_id)
            if row is None:
                return False
            status = JobStatus(row.status)
            if status is JobStatus.PAUSED:
                return True
            if status is not JobStatus.PENDING:
                return False
            conn.execute(
                update(Q)
                .where(Q.c.job_id == job_id, Q.c.status == status.value)
                .values(status=JobStatus.PAUSED.value, paused_from_status=status.value)
            )
            return True

        return self._run(work)

    def resume_job(self, job_id: uuid.UUID, *, now: datetime) -> bool:
        def work(conn: Connection) -> bool:
            row = self._locked_queue_row(conn, job_id)
            if row is None or row.status != JobStatus.PAUSED.value:
                return False
            back = JobStatus(row.paused_from_status or JobStatus.PENDING.value)
            check_transition(JobStatus.PAUSED, back)
            conn.execute(
                update(Q)
                .where(Q.c.job_id == job_id, Q.c.status == JobStatus.PAUSED.value)
                .values(status=back.value, paused_from_status=None)
            )
            return True

        return self._run(work)

    def _requeue_failed(self, conn: Connection, ids: Sequence[uuid.UUID], now: datetime) -> int:
        count = 0
        for chunk in iter_chunks(list(ids), CHUNK):
            stmt = (
                select(J.c.job_id, J.c.priority, J.c.business_key)
                .select_from(schema.ended_job)
                .where(J.c.job_id.in_(chunk), END.c.terminal_status == JobStatus.FAILED.value)
            )
            rows = conn.execute(self.dialect.lock_rows(stmt)).all()
            if not rows:
                continue
            found = [r.job_id for r in rows]
            epochs = dict(
                conn.execute(
                    select(EXE.c.job_id, func.max(EXE.c.epoch))
                    .where(EXE.c.job_id.in_(found))
                    .group_by(EXE.c.job_id)
                ).all()
            )
            conn.execute(delete(END).where(END.c.job_id.in_(found)))
            conn.execute(
                insert(Q),
                [
                    {
                        "job_id": r.job_id,
                        "status": JobStatus.PENDING.value,
                        "priority": r.priority,
                        "scheduled_time": now,
                        "attempts": 0,
                        "epoch": epochs.get(r.job_id) or 0,
                        "business_key": r.business_key,
                    }
                    for r in rows
                ],
            )
            count += len(rows)
        return count

    def retry_job(self, job_id: uuid.UUID, *, now: datetime) -> bool:
        try:
            return self._run(lambda conn: self._requeue_failed(conn, [job_id], now) == 1)
        except DBAPIError as exc:
            self._raise_business_key_conflict(exc)
            raise

    def _raise_business_key_conflict(self, exc: DBAPIError) -> None:
        if self._translate(exc) is ErrorKind.DUPLICATE_BUSINESS_KEY:
            raise DuplicateBusinessKeyError(
                "?", "a live job; the retried job's business key is taken again"
            ) from exc

    def retry_jobs(self, job_filter: JobFilter, limit: int, *, now: datetime) -> int:
        if not 1 <= limit <= 1000:
            raise InvalidJobOptions(f"retry_jobs limit must be within 1..1000, got {limit}")
        failed_only = dataclasses.replace(job_filter, statuses=(JobStatus.FAILED,))

        def work(conn: Connection) -> int:
            ids = list(conn.execute(self._filter_select(failed_only, limit, J.c.job_id)).scalars())
            return self._requeue_failed(conn, ids, now)

        try:
            return self._run(work)
        except DBAPIError as exc:
            self._raise_business_key_conflict(exc)
            raise

    def cancel_jobs_by_tag(
        self, tag: str, *, now: datetime, resolve: FlowResolver | None = None
    ) -> FlowWrite[int]:
        norm = tag.strip().lower()

        def work(conn: Connection) -> FlowWrite[int]:
            stmt = (
                select(Q.c.job_id)
                .join(TAGS, TAGS.c.job_id == Q.c.job_id)
                .where(TAGS.c.tag == norm, Q.c.status.in_([s.value for s in TAG_CANCELLABLE]))
            )
            ids = list(conn.execute(self.dialect.lock_rows(stmt)).scalars())
            effects: list[FlowEffect] = []
            if ids:
                self._terminate(
                    conn,
                    ids,
                    JobStatus.CANCELED,
                    now,
                    effects=effects,
                    resolve=resolve or REFUSE_ALL,
                )
            return FlowWrite(len(ids), tuple(effects))

        return self._run(work)

    # ------------------------------------------------------------------ reading
    def _status_expr(self) -> Any:
        return func.coalesce(Q.c.status, END.c.terminal_status)

    def _filter_select(self, job_filter: JobFilter, limit: int, *cols: Any) -> Select[Any]:
        status = self._status_expr()
        stmt = select(*cols).select_from(JOB_WITH_STATE)
        if job_filter.statuses:
            stmt = stmt.where(status.in_([s.value for s in job_filter.statuses]))
        if job_filter.tag:
            stmt = stmt.where(
                J.c.job_id.in_(select(TAGS.c.job_id).where(TAGS.c.tag == job_filter.tag.lower()))
            )
        if job_filter.target:
            stmt = stmt.where(J.c.target == job_filter.target)
        if job_filter.created_before:
            stmt = stmt.where(J.c.created_at < job_filter.created_before)
        if job_filter.caller_principal is not None:
            stmt = stmt.where(J.c.caller_principal == job_filter.caller_principal)
        return stmt.order_by(J.c.job_id.desc()).limit(limit)

    def _record_cols(self) -> list[Any]:
        return [
            J,
            Q.c.status.label("q_status"),
            Q.c.scheduled_time,
            Q.c.attempts.label("q_attempts"),
            Q.c.epoch,
            Q.c.picked_by,
            Q.c.picked_at,
            Q.c.paused_from_status,
            Q.c.last_error,
            *schema.job_end_state,
        ]

    def _to_record(self, r: Row[Any], last_epoch: int | None = None) -> JobRecord:
        status = JobStatus(r.q_status or r.terminal_status)
        return JobRecord(
            job_id=r.job_id,
            status=status,
            target=r.target,
            payload=r.payload,
            priority=JobPriority(r.priority),
            max_retries=r.max_retries,
            attempts=r.q_attempts if r.q_status else r.attempts,
            backoff=BackoffPolicy(r.backoff_policy),
            backoff_delay=timedelta(milliseconds=r.backoff_ms),
            timeout=None if r.timeout_ms is None else timedelta(milliseconds=r.timeout_ms),
            scheduled_time=r.scheduled_time,
            created_at=r.created_at,
            idempotency_key=r.idempotency_key,
            business_key=r.business_key,
            tags=tuple(json.loads(r.tags)) if r.tags else (),
            params=json.loads(r.params) if r.params else {},
            epoch=r.epoch if r.q_status else (last_epoch or 0),
            picked_by=r.picked_by,
            picked_at=r.picked_at,
            paused_from=JobStatus(r.paused_from_status) if r.paused_from_status else None,
            last_error=r.last_error if r.q_status else r.terminal_error,
            result=r.result,
            terminated_at=r.terminated_at,
            superseded_by=r.superseded_by,
            executor=r.executor,
            resource_name=r.resource_name,
            recurring_master_id=r.recurring_master_id,
            stall_timeout=(
                None if r.stall_timeout_ms is None else timedelta(milliseconds=r.stall_timeout_ms)
            ),
            caller_principal=r.caller_principal,
            encryption_key_id=r.encryption_key_id,
            affinity=Affinity(
                frozenset(json.loads(r.require_tags)) if r.require_tags else frozenset(),
                frozenset(json.loads(r.exclude_tags)) if r.exclude_tags else frozenset(),
            ),
            schedule_to_start=(
                None
                if r.schedule_to_start_ms is None
                else timedelta(milliseconds=r.schedule_to_start_ms)
            ),
            takeover_policy=None
            if r.takeover_policy is None
            else TakeoverPolicy(r.takeover_policy),
        )

    def get_job(self, job_id: uuid.UUID) -> JobRecord | None:
        def work(conn: Connection) -> JobRecord | None:
            row = conn.execute(
                select(*self._record_cols()).select_from(JOB_WITH_STATE).where(J.c.job_id == job_id)
            ).first()
            if row is None:
                return None
            last_epoch = conn.execute(
                select(func.max(EXE.c.epoch)).where(EXE.c.job_id == job_id)
            ).scalar()
            return self._to_record(row, last_epoch)

        return self._run(work, write=False)

    def find_by_idempotency_key(self, key: str) -> uuid.UUID | None:
        holder = self._lookup_keys([key]).get(key)
        if holder is not None:
            return holder
        job_id = own_id(key)
        if job_id is None:
            return None

        def work(conn: Connection) -> uuid.UUID | None:
            keyed = select(J.c.job_id).where(J.c.job_id == job_id, J.c.idempotency_key == key)
            found: uuid.UUID | None = conn.execute(keyed).scalar()
            return found

        return self._run(work, write=False)

    def list_jobs(self, job_filter: JobFilter, limit: int = 100) -> list[JobRecord]:
        def work(conn: Connection) -> list[JobRecord]:
            rows = conn.execute(self._filter_select(job_filter, limit, *self._record_cols()))
            return [self._to_record(r) for r in rows]

        return self._run(work, write=False)

    def attempts(self, job_id: uuid.UUID) -> list[AttemptRecord]:
        return self._run(lambda conn: attempt_history.history(conn, job_id), write=False)

    def live_counts(self) -> dict[str, int]:
        def work(conn: Connection) -> dict[str, int]:
            rows = conn.execute(select(Q.c.status, func.count()).group_by(Q.c.status))
            return {status: n for status, n in rows}

        return self._run(work, write=False)

    def count_by_status(self) -> dict[str, int]:
        def work(conn: Connection) -> dict[str, int]:
            counts: dict[str, int] = {}
            for status, n in conn.execute(select(Q.c.status, func.count()).group_by(Q.c.status)):
                counts[status] = n
            for status, n in conn.execute(
                select(END.c.terminal_status, func.count()).group_by(END.c.terminal_status)
            ):
                counts[status] = n
            return counts

        return self._run(work, write=False)

    # ------------------------------------------------------------------ nodes
    def deregister_node(self, node_id: str) -> None:
        self._run(lambda conn: conn.execute(delete(NODE).where(NODE.c.node_id == node_id)))

    def list_nodes(self) -> list[NodeRecord]:
        def work(conn: Connection) -> list[NodeRecord]:
            return [
                NodeRecord(
                    r.node_id,
                    r.started_at,
                    r.heartbeat_at,
                    r.state,
                    r.node_name,
                    r.host,
                    r.pid,
                    r.slots,
                    frozenset(json.loads(r.tags)) if r.tags else frozenset(),
                    read_published_breakers(r.breakers),
                )
                for r in conn.execute(select(NODE).order_by(NODE.c.node_id))
            ]

        return self._run(work, write=False)

    # ------------------------------------------------------------------ caller transactions
    def after_commit(
        self,
        connection: Any,
        callback: Callable[[], None],
        *,
        on_rollback: Callable[[], None] | None = None,
    ) -> None:
        """Call ``callback`` once the caller's transaction on ``connection`` (a SQLAlchemy
        ``Connection``, ``Session`` or ``ExternalTransaction``) commits; never if it rolls back
        (``on_rollback`` then)."""
        self._caller_transactions.after_commit(connection, callback, on_rollback)

    # ------------------------------------------------------------------ testing aids
    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A plain connection (for tests and the caller-transaction API)."""
        with self.engine.connect() as conn:
            yield conn
