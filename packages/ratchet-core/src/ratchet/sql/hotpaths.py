"""The statement sets of the three hot paths: the claim, the insert and the fenced outcome write.

:class:`~ratchet.sql.store.SqlStore` holds the logic of each path once: the claim order and the
check that the claimed rows did not change under the claim's lock (:meth:`ClaimStatements.claim`),
which job of a batch owns each idempotency key and what each job's result is
(:func:`first_of_each_key`, :func:`insert_results`, :meth:`InsertStatements.holders_after`),
what an outcome writes (:func:`plan_outcomes`), which outcomes are owned under their epoch
(:func:`owned_under_epoch`) and the partition into applied and fenced outcomes with the outcome
hooks (``SqlStore._record``). The classes here are the generic statement sets (SQLAlchemy Core,
portable). A dialect package renders a path its own way by subclassing one of them and
overriding only its rendering hooks, then returning its subclasses from
``SqlStore.make_hot_paths``:

* :class:`ClaimStatements`: ``level_candidates`` / ``candidates_select`` and ``candidates`` (with
  ``candidates_locked`` when that read already locks the rows, skipping rows others hold),
  ``lock``, ``take``; or ``claim`` as a whole when the database does it in one statement;
* :class:`InsertStatements`: ``insert_rows`` (how rows reach a table), or ``insert`` as a whole;
* :class:`OutcomeStatements`: ``owned`` (the locking read) and ``apply`` (the writes), or ``write``
  as a whole.

Every value is a bound parameter, or (where a dialect renders statements as text) a literal made
by the driver's own escaping function; only constants of the code (statuses, outcome kinds) are
written into a statement as they are. ``ratchet.testing.dialect_contract`` runs each path through
a store's statement sets and through these generic ones on the same database, and compares the
rows and the answers.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Integer,
    Select,
    bindparam,
    delete,
    func,
    insert,
    literal,
    select,
    union_all,
    update,
)
from sqlalchemy.engine import Connection, Dialect

from ratchet.domain.envelope import envelope_key_id
from ratchet.domain.errors import DuplicateIdempotencyKeyError
from ratchet.domain.lifecycle import JobPriority, JobStatus
from ratchet.domain.model import ClaimedJob, NewJob, Outcome, OutcomeKind
from ratchet.domain.priority import claim_order_key
from ratchet.domain.watcher import NodeState
from ratchet.ports import InsertResult, iter_chunks
from ratchet.sql import schema
from ratchet.sql.affinity import (
    AFFINITY_COLUMNS,
    affinity_allows,
    affinity_rows,
    tag_binds,
    tag_list,
    tag_parameters,
)
from ratchet.sql.claimed import DEFINITIONS, claimed_job, definitions_of, plain_rows, row_maker
from ratchet.sql.dialect import SqlDialect
from ratchet.sql.prepared import PreparedInsert, PreparedKeyLookup, PreparedStatement, uuid_binder
from ratchet.sql.types import UTCMicros, UUIDType, from_micros, to_micros
from ratchet.sql.watcher_store import CHUNK, OWNED, poll_probe

Q = schema.job_queue
J = schema.job
END = schema.job_end
IDEM = schema.idempotency_key
EXE = schema.job_execution
TAGS = schema.job_tag
AFFINITY = schema.job_affinity


def _ids() -> Any:
    """The ``:ids`` list parameter of an ``IN``."""
    return bindparam("ids", expanding=True)


def _id_binds(n: int, column: Any) -> list[Any]:
    """``n`` bound parameters ``i0``... of ``column``'s type: an ``IN`` list of a statement
    rendered once per length and sent as driver SQL."""
    return [bindparam(f"i{k}", type_=column.type) for k in range(n)]


@contextmanager
def driver_transaction(driver: Any, begin: str) -> Iterator[Any]:
    """A cursor of the bare DBAPI connection ``driver`` (in autocommit mode) inside a
    transaction opened with ``begin``: committed when the block ends, rolled back when it
    raises (else the pool's reset on return would), the cursor closed either way."""
    cursor = driver.cursor()
    try:
        cursor.execute(begin)
        try:
            yield cursor
            cursor.execute("COMMIT")
        except BaseException:
            with suppress(Exception):
                cursor.execute("ROLLBACK")
            raise
    finally:
        cursor.close()


class _KeyTaken(Exception):
    """A driver insert found a key taken: its transaction is undone, the caller takes the
    ``Connection`` path."""


# Statements built once: their values are bound parameters, and constructing a statement costs
# more than executing it.
def _claim_mark(ids: Any) -> Any:
    """Mark the still PENDING jobs of ``ids`` (an ``IN`` list or one expanding parameter)
    RUNNING for ``:node`` since ``:now``, under a new epoch."""
    return (
        update(Q)
        .where(Q.c.job_id.in_(ids), Q.c.status == JobStatus.PENDING.value)
        .values(
            status=JobStatus.RUNNING.value,
            picked_by=bindparam("node", type_=Q.c.picked_by.type),
            picked_at=bindparam("now", type_=Q.c.picked_at.type),
            epoch=Q.c.epoch + 1,
            start_by=None,  # started: the schedule-to-start deadline is met
        )
    )


_CLAIM_MARK = _claim_mark(_ids())
_STILL_PENDING = select(Q.c.job_id).where(
    Q.c.job_id.in_(_ids()), Q.c.status == JobStatus.PENDING.value
)


#: The live rows of the ``:ids`` that ``:node`` holds (RUNNING or TIMED_OUT), with the epoch
#: they are held under, the attempts counted so far and when the running attempt started.
def _owned_rows(ids: Any) -> Any:
    """:data:`OWNED_ROWS` of ``ids`` (an ``IN`` list or one expanding parameter)."""
    return select(Q.c.job_id, Q.c.epoch, Q.c.attempts, Q.c.picked_at).where(
        Q.c.job_id.in_(ids),
        Q.c.picked_by == bindparam("node", type_=Q.c.picked_by.type),
        # each status its own bound constant: the statement renders once as driver SQL too
        Q.c.status.in_([literal(status) for status in OWNED]),
    )


OWNED_ROWS = _owned_rows(_ids())
_DELETE_LIVE = PreparedStatement(delete(Q).where(Q.c.job_id == bindparam("b_id")))
#: A job's end: its row in ``scheduler_job_end`` (its live row deleted under the fence before).
_END_JOB = PreparedStatement(
    insert(END).values(
        job_id=bindparam("b_id"),
        terminal_status=bindparam("b_status"),
        terminal_error=bindparam("b_error"),
        result=bindparam("b_result"),
        terminated_at=bindparam("b_at"),
        attempts=bindparam("b_attempts"),
    )
)
#: A retry or reschedule: back to PENDING. Its error (the failure, or why the attempt was
#: rescheduled: breaker open, no permit) becomes the job's last error; an outcome without one
#: keeps the previous last error.
_BACK_TO_PENDING = PreparedStatement(
    update(Q)
    .where(Q.c.job_id == bindparam("b_id"))
    .values(
        status=JobStatus.PENDING.value,
        scheduled_time=bindparam("b_time"),
        attempts=bindparam("b_attempts"),
        last_error=func.coalesce(bindparam("b_error", type_=Q.c.last_error.type), Q.c.last_error),
        picked_by=None,
        picked_at=None,
        timed_out_at=None,
    )
)
#: The ended attempt's row (see :mod:`ratchet.sql.attempt_history`): written once, here.
_ENDED_ATTEMPT = PreparedStatement(
    insert(EXE).values(
        {
            name: bindparam(f"b_{name}", type_=EXE.c[name].type)
            for name in (
                "job_id", "attempt_no", "epoch", "node_id", "started_at", "finished_at",
                "outcome", "error", "traceback",
            )
        }
    )
)  # fmt: skip


# ---------------------------------------------------------------------------------- the claim
@dataclass(frozen=True, slots=True)
class GatedClaim:
    """What a claim with the poll's probe folded in found: the node's state (None: the node has
    no row), whether a takeover is possible, and the jobs claimed (none unless the node may
    claim: ALIVE with no takeover to make first, or without a row when that was allowed)."""

    state: str | None
    eligible: bool
    claimed: list[ClaimedJob]


#: A candidate of the claim (:meth:`ClaimStatements.level_candidates`' columns).
_CANDIDATE_ROW = row_maker(("job_id", "priority", "scheduled_time", "epoch", "attempts"))
#: A row of :data:`~ratchet.sql.claimed.DEFINITIONS`.
_DEFINITION_ROW = row_maker(tuple(c.name for c in DEFINITIONS.selected_columns))
#: The poll probe's parameters, as the store gives them in a gate.
_PROBE_PARAMETERS = ("p_node", "p_takeovers", "p_window", "p_grace")


@functools.cache
def _driver_probe(dialect: Dialect) -> Any:
    """The rendering of the poll's probe (the node's state, whether a takeover is possible)."""
    return PreparedStatement(poll_probe()).rendering(dialect)


@functools.lru_cache(maxsize=256)
def _driver_mark(dialect: Dialect, n: int) -> Any:
    """The rendering of the claim's mark of ``n`` ids (``i0``...; ``node``, ``now``)."""
    return PreparedStatement(_claim_mark(_id_binds(n, Q.c.job_id))).rendering(dialect)


@functools.lru_cache(maxsize=256)
def _driver_definitions(dialect: Dialect, n: int) -> Any:
    """The rendering of :func:`~ratchet.sql.claimed.definitions_of` ``n`` ids (``i0``...)."""
    return PreparedStatement(definitions_of(_id_binds(n, J.c.job_id))).rendering(dialect)


def _uuid_reader(dialect: Dialect) -> Callable[[Any], uuid.UUID]:
    """What turns a driver's value of a :class:`~ratchet.sql.types.UUIDType` column into a
    :class:`uuid.UUID`."""
    process = UUIDType().result_processor(dialect, None)
    return (lambda value: value) if process is None else process  # type: ignore[return-value]


class ClaimStatements:
    """The claim: the due candidates per priority level, sorted in claim order, those nobody
    else holds locked, the first ``limit`` marked RUNNING under a new epoch with an attempt row
    each, and their definitions read.

    A subclass renders the steps (:meth:`candidates`, :meth:`lock`, :meth:`take`) its own way,
    or, where one statement does all of it, replaces :meth:`claim`; it must return what the
    generic claim returns and leave the same rows.
    """

    candidates_locked = False
    """Whether :meth:`candidates` locks the rows it returns, skipping rows others hold (then
    :meth:`lock` is not called)."""

    gates_claims = False
    """Whether :meth:`gated_claim` folds the poll's probe into the claim (one statement)."""

    def __init__(self, dialect: SqlDialect) -> None:
        self.dialect = dialect
        self._candidate_stmts: dict[int, Select[Any]] = {}
        self._lock_stmt = dialect.lock_for_claim(_STILL_PENDING)
        self._driver_candidate_reads: dict[tuple[Dialect, int], Any] = {}

    def level_candidates(
        self, level: JobPriority, now: Any, limit: Any, node_tags: Sequence[Any] = ()
    ) -> Select[Any]:
        """The ``limit`` oldest due PENDING jobs of one priority level that a node with
        ``node_tags`` may run (:func:`affinity_allows`; an index range scan on (status,
        priority, scheduled_time, job_id)). Columns: job_id, priority, scheduled_time, epoch,
        attempts."""
        return (
            select(Q.c.job_id, Q.c.priority, Q.c.scheduled_time, Q.c.epoch, Q.c.attempts)
            .where(
                Q.c.status == JobStatus.PENDING.value,
                Q.c.priority == int(level),
                Q.c.scheduled_time <= now,
                affinity_allows(node_tags),
            )
            .order_by(Q.c.scheduled_time, Q.c.job_id)
            .limit(limit)
        )

    def candidates_select(self, now: Any, limit: Any, node_tags: Sequence[Any] = ()) -> Select[Any]:
        """Per priority level, the ``limit`` oldest due jobs (:meth:`level_candidates`) a node
        with ``node_tags`` may run; their union holds the top ``limit``.

        Within one level the age boost never reorders jobs (older means more boost), so the best
        ``limit`` jobs overall are among the best ``limit`` of each level: the claim stays
        O(batch) however many jobs wait.
        """
        branches = [
            select(*self.level_candidates(level, now, limit, node_tags).subquery().c)
            for level in JobPriority
        ]
        return union_all(*branches)  # type: ignore[return-value]

    def candidates(
        self, conn: Connection, now: datetime, limit: int, node_tags: frozenset[str] = frozenset()
    ) -> list[Any]:
        """The candidates (:meth:`candidates_select`) due at ``now``, ``limit`` per level, that
        a node with ``node_tags`` may run."""
        stmt = self._candidates_statement(len(node_tags))
        params: dict[str, Any] = {"c_now": now, "c_limit": limit}
        if node_tags:
            params.update(tag_parameters(node_tags))
        return plain_rows(conn.execute(stmt, params).all())

    def _candidates_statement(self, tags: int) -> Select[Any]:
        """:meth:`candidates_select` for ``tags`` node tags, with the time (``c_now``), the
        batch size (``c_limit``) and the tags (``n_tag0``...) as bound parameters: built once
        per number of tags, since constructing (and compiling) the five-branch union costs more
        than running it."""
        stmt = self._candidate_stmts.get(tags)
        if stmt is None:
            stmt = self.candidates_select(
                bindparam("c_now", type_=UTCMicros()),
                bindparam("c_limit", type_=Integer()),
                tag_binds(tags),
            )
            self._candidate_stmts[tags] = stmt
        return stmt

    def lock(self, conn: Connection, ids: Sequence[uuid.UUID]) -> Collection[uuid.UUID]:
        """Lock the ``ids`` still PENDING that nobody else holds; return them."""
        return set(conn.execute(self._lock_stmt, {"ids": ids}).scalars())

    def take(
        self, conn: Connection, node_id: str, chosen: Sequence[Any], now: datetime
    ) -> tuple[int, Mapping[uuid.UUID, Any]]:
        """Mark the locked ``chosen`` candidates RUNNING for ``node_id`` (epoch + 1) and read
        their definitions (rows of ``DEFINITIONS`` by job id). Returns how many rows the mark
        changed, and the definitions. (No attempt row: the outcome write inserts it.)"""
        ids = [r.job_id for r in chosen]
        marked = conn.execute(_CLAIM_MARK, {"ids": ids, "node": node_id, "now": now}).rowcount
        definitions = {r.job_id: r for r in plain_rows(conn.execute(DEFINITIONS, {"ids": ids}))}
        return marked, definitions

    def gated_claim(
        self,
        conn: Connection,
        node_id: str,
        limit: int,
        now: datetime,
        boost: timedelta,
        node_tags: frozenset[str],
        gate: Mapping[str, Any],
    ) -> GatedClaim:
        """The poll's probe and, when it allows, the claim, in one statement (only where
        :attr:`gates_claims`). ``gate``: the probe's parameters (``p_takeovers``, ``p_window``,
        ``p_grace``) and ``without_row``."""
        raise NotImplementedError(f"{type(self).__name__} has no gated claim")

    def driver_claim(
        self,
        node_id: str,
        limit: int,
        now: datetime,
        boost: timedelta,
        node_tags: frozenset[str],
        dialect: Dialect,
    ) -> Callable[[Any], list[ClaimedJob]] | None:
        """:meth:`claim` as work for a bare driver connection in autocommit mode (the store's
        ``_run_dbapi``) on the engine ``dialect``, where the statement set claims in one
        statement; None here: the claim runs in a transaction through SQLAlchemy."""
        return None

    def driver_gated_claim(
        self,
        node_id: str,
        limit: int,
        now: datetime,
        boost: timedelta,
        node_tags: frozenset[str],
        gate: Mapping[str, Any],
        dialect: Dialect,
    ) -> Callable[[Any], GatedClaim] | None:
        """:meth:`gated_claim` as work for a bare driver connection in autocommit mode (the
        store's ``_run_dbapi``) on the engine ``dialect``, or None where there is none: a poll
        then skips SQLAlchemy's ``Connection`` and its execution path, which cost more CPU than
        building the jobs claimed. ``gate``: the poll probe's parameters (``p_node``,
        ``p_takeovers``, ``p_window``, ``p_grace``) and ``without_row``.

        The generic work, for a dialect that names its
        :attr:`~ratchet.sql.dialect.SqlDialect.driver_begin`, whose claims need no row locks,
        and a statement set that renders none of the claim's steps its own way, is one
        transaction of the probe and the generic claim as driver SQL with driver-ready values.
        """
        begin = self.dialect.driver_begin
        cls = type(self)
        own_steps = any(
            getattr(cls, step) is not getattr(ClaimStatements, step)
            for step in ("candidates", "lock", "take", "claim")
        )
        if begin is None or own_steps or self.dialect.skip_locked:
            return None
        probe = _driver_probe(dialect)
        probe_values = probe.driver_rows([{name: gate[name] for name in _PROBE_PARAMETERS}])[0]
        may_without_row = bool(gate["without_row"])
        candidates = self._driver_candidates(dialect, len(node_tags))
        values: dict[str, Any] = {"c_now": now, "c_limit": limit}
        values.update(tag_parameters(node_tags))
        candidate_values = candidates.driver_rows([values])[0]
        to_uuid = _uuid_reader(dialect)

        def work(driver: Any) -> GatedClaim:
            with driver_transaction(driver, begin) as cursor:
                state, eligible = cursor.execute(probe.sql, probe_values).fetchone()
                may = (state == NodeState.ALIVE.value and not eligible) or (
                    state is None and may_without_row
                )
                claimed = (
                    self._driver_take(
                        cursor, dialect, node_id, limit, now, boost, to_uuid,
                        cursor.execute(candidates.sql, candidate_values).fetchall(),
                    )
                    if may
                    else []
                )  # fmt: skip
            return GatedClaim(state, bool(eligible), claimed)

        return work

    def _driver_take(
        self,
        cursor: Any,
        dialect: Dialect,
        node_id: str,
        limit: int,
        now: datetime,
        boost: timedelta,
        to_uuid: Callable[[Any], uuid.UUID],
        raw: Sequence[Any],
    ) -> list[ClaimedJob]:
        """The generic claim's order, mark and definitions (:meth:`claim` after its candidates)
        on a driver ``cursor``, from the candidates' driver rows ``raw``."""
        if not raw:
            return []
        rows = [
            _CANDIDATE_ROW((to_uuid(job_id), priority, from_micros(scheduled), epoch, attempts))
            for job_id, priority, scheduled, epoch, attempts in raw
        ]
        rows.sort(
            key=lambda r: claim_order_key(r.priority, r.scheduled_time, str(r.job_id), now, boost)
        )
        chosen = rows[:limit]
        ids = [r.job_id for r in chosen]
        mark = _driver_mark(dialect, len(ids))
        marked = {f"i{k}": job_id for k, job_id in enumerate(ids)}
        cursor.execute(mark.sql, mark.driver_rows([{**marked, "node": node_id, "now": now}])[0])
        if cursor.rowcount != len(ids):
            raise AssertionError("claimed rows changed under the claim lock")
        read = _driver_definitions(dialect, len(ids))
        definitions = {
            d.job_id: d
            for d in map(
                _DEFINITION_ROW, cursor.execute(read.sql, read.driver_rows([marked])[0]).fetchall()
            )
        }
        raw_id = uuid_binder(dialect)
        return [
            claimed_job(r, definitions[raw_id(r.job_id)], now, epoch=r.epoch + 1) for r in chosen
        ]

    def _driver_candidates(self, dialect: Dialect, tags: int) -> Any:
        """The rendering of :meth:`candidates`' statement for ``tags`` node tags."""
        key = (dialect, tags)
        found = self._driver_candidate_reads.get(key)
        if found is None:
            found = PreparedStatement(self._candidates_statement(tags)).rendering(dialect)
            if len(self._driver_candidate_reads) >= 16:
                self._driver_candidate_reads = {}
            self._driver_candidate_reads[key] = found
        return found

    def claim(
        self,
        conn: Connection,
        node_id: str,
        limit: int,
        now: datetime,
        boost: timedelta,
        node_tags: frozenset[str] = frozenset(),
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` due jobs that a node with ``node_tags`` may run for
        ``node_id``, in claim order."""
        rows = self.candidates(conn, now, limit, node_tags)
        if not rows:
            return []
        rows.sort(
            key=lambda r: claim_order_key(r.priority, r.scheduled_time, str(r.job_id), now, boost)
        )
        if self.dialect.skip_locked and not self.candidates_locked:
            # Lock what nobody else holds; others' claims skip ours and vice versa.
            locked = self.lock(conn, [r.job_id for r in rows])
            rows = [r for r in rows if r.job_id in locked]
        chosen = rows[:limit]
        if not chosen:
            return []
        marked, definitions = self.take(conn, node_id, chosen, now)
        if marked != len(chosen):
            raise AssertionError("claimed rows changed under the claim lock")
        return [claimed_job(r, definitions[r.job_id], now, epoch=r.epoch + 1) for r in chosen]


# ---------------------------------------------------------------------------------- the insert
#: Columns the submit path writes, in table order (the order of the value tuples of
#: :func:`submit_rows`).
KEY_COLUMNS = ("idempotency_key", "job_id", "created_at")
JOB_COLUMNS = (
    "job_id", "target", "payload", "priority", "max_retries", "backoff_policy", "backoff_ms",
    "timeout_ms", "params", "tags", "idempotency_key", "business_key", "executor",
    "created_at", "resource_name", "recurring_master_id", "stall_timeout_ms",
    "caller_principal", "encryption_key_id",
    "require_tags", "exclude_tags", "schedule_to_start_ms", "takeover_policy",
    "trace_context",
)  # fmt: skip
QUEUE_COLUMNS = ("job_id", "status", "priority", "scheduled_time", "attempts", "epoch",
                 "business_key", "affinity", "start_by")  # fmt: skip
TAG_COLUMNS = ("job_id", "tag")


_MILLISECOND = timedelta(milliseconds=1)


def _ms(value: timedelta | None) -> int | None:
    return None if value is None else int(value / _MILLISECOND)


#: The queue row's own columns that a job record (:func:`job_records`) carries after the job
#: row's: the rest of the queue row repeats job columns or starts at zero.
RECORD_QUEUE_COLUMNS = ("status", "scheduled_time", "affinity", "start_by")
_JOB_ID, _PRIORITY, _IDEMPOTENCY_KEY, _BUSINESS_KEY = (
    JOB_COLUMNS.index(c) for c in ("job_id", "priority", "idempotency_key", "business_key")
)
_STATUS, _SCHEDULED, _AFFINITY, _START_BY = range(len(JOB_COLUMNS), len(JOB_COLUMNS) + 4)


def job_records(
    jobs: Sequence[NewJob], now: datetime, db_uuid: Callable[[uuid.UUID], Any]
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """One value tuple per job of ``jobs``: its job row (``JOB_COLUMNS``), then its queue row's
    ``RECORD_QUEUE_COLUMNS``; and the tag and affinity rows (``TAG_COLUMNS``,
    ``AFFINITY_COLUMNS``). Times as microseconds, durations as milliseconds, ids through
    ``db_uuid``. Built in one pass: a submission of many jobs spends a good part of its CPU
    here."""
    now_us = to_micros(now)
    records: list[tuple[Any, ...]] = []
    tag_rows: list[tuple[Any, ...]] = []
    aff_rows: list[tuple[Any, ...]] = []
    record = records.append
    for j in jobs:
        jid = db_uuid(j.job_id)
        created = now_us if j.created_at == now else to_micros(j.created_at)
        scheduled = created if j.scheduled_time == j.created_at else to_micros(j.scheduled_time)
        to_start = j.schedule_to_start
        affinity = j.affinity
        if affinity.empty:
            has_affinity, required, excluded = 0, None, None
        else:
            has_affinity = 1
            required, excluded = tag_list(affinity.require), tag_list(affinity.exclude)
            aff_rows.extend(affinity_rows(jid, j))
        if j.tags:
            tag_rows.extend((jid, t) for t in j.tags)
        record(
            (
                jid,
                j.target,
                j.payload,
                int(j.priority),
                j.max_retries,
                j.backoff._value_,
                _ms(j.backoff_delay) if j.backoff_delay else 0,
                None if j.timeout is None else _ms(j.timeout),
                json.dumps(dict(j.params)) if j.params else None,
                json.dumps(list(j.tags)) if j.tags else None,
                j.idempotency_key,
                j.business_key,
                j.executor,
                created,
                j.resource_name,
                None if j.recurring_master_id is None else db_uuid(j.recurring_master_id),
                None if j.stall_timeout is None else _ms(j.stall_timeout),
                j.caller_principal,
                envelope_key_id(j.payload),
                required,
                excluded,
                None if to_start is None else _ms(to_start),
                None if j.takeover_policy is None else j.takeover_policy._value_,
                j.trace_context,
                j.status._value_,
                scheduled,
                has_affinity,
                None if to_start is None else scheduled + to_start // _MICROSECOND,
            )
        )
    return records, tag_rows, aff_rows


_MICROSECOND = timedelta(microseconds=1)


def submit_rows(
    jobs: Sequence[NewJob], now: datetime, db_uuid: Callable[[uuid.UUID], Any]
) -> tuple[list[tuple[Any, ...]], ...]:
    """Value tuples for the key, job, queue, tag and affinity inserts of ``jobs``
    (``KEY_COLUMNS``, ``JOB_COLUMNS``, ``QUEUE_COLUMNS``, ``TAG_COLUMNS``,
    ``AFFINITY_COLUMNS``), from :func:`job_records`. A job keyed by its own id
    (:attr:`~ratchet.domain.model.NewJob.keyed_by_id`) has no key row."""
    now_us = to_micros(now)
    records, tag_rows, aff_rows = job_records(jobs, now, db_uuid)
    width = len(JOB_COLUMNS)
    key_rows = [
        (r[_IDEMPOTENCY_KEY], r[_JOB_ID], now_us)
        for j, r in zip(jobs, records, strict=True)
        if not j.keyed_by_id
    ]
    job_rows = [r[:width] for r in records]
    queue_rows = [
        (r[_JOB_ID], r[_STATUS], r[_PRIORITY], r[_SCHEDULED], 0, 0, r[_BUSINESS_KEY],
         r[_AFFINITY], r[_START_BY])
        for r in records
    ]  # fmt: skip
    return key_rows, job_rows, queue_rows, tag_rows, aff_rows


class SubmitStatements:
    """The inserts of the submit path rendered for one engine dialect, and its key look-up."""

    def __init__(self, dialect: Dialect, ignore_duplicates: Callable[[str], str | None]) -> None:
        self.keys = PreparedKeyLookup(dialect, IDEM, "idempotency_key", "job_id")
        self.key_insert = PreparedInsert(dialect, IDEM, KEY_COLUMNS)
        ignoring = ignore_duplicates(dialect.name)
        self.key_insert_ignoring = (
            None if ignoring is None else PreparedInsert(dialect, IDEM, KEY_COLUMNS, ignoring)
        )
        self.job_insert = PreparedInsert(dialect, J, JOB_COLUMNS)
        self.queue_insert = PreparedInsert(dialect, Q, QUEUE_COLUMNS)
        self.tag_insert = PreparedInsert(dialect, TAGS, TAG_COLUMNS)
        self.affinity_insert = PreparedInsert(dialect, AFFINITY, AFFINITY_COLUMNS)
        self.uuid = uuid_binder(dialect)

    def rows(self, jobs: Sequence[NewJob], now: datetime) -> tuple[list[tuple[Any, ...]], ...]:
        """Driver-ready value tuples for the key, job, queue, tag and affinity inserts of
        ``jobs``."""
        return submit_rows(jobs, now, self.uuid)

    def lookup(self, conn: Connection, keys: Iterable[str]) -> dict[str, uuid.UUID]:
        """The holders of ``keys`` (those taken) in the key table: the keys jobs were given,
        not those that are their jobs' own ids."""
        found: dict[str, uuid.UUID] = {}
        for chunk in iter_chunks(list(keys), CHUNK):
            found.update(self.keys.fetch(conn, chunk))
        return found


def first_of_each_key(
    jobs: Iterable[NewJob], first: dict[str, NewJob] | None = None
) -> list[NewJob]:
    """The jobs of ``jobs`` that are the first of their idempotency key, recording each in
    ``first`` (key -> first job; a key already there keeps its job)."""
    seen = {} if first is None else first
    fresh: list[NewJob] = []
    for job in jobs:
        if job.idempotency_key not in seen:
            seen[job.idempotency_key] = job
            fresh.append(job)
    return fresh


def insert_results(
    jobs: Sequence[NewJob], first: Mapping[str, NewJob], holders: Mapping[str, uuid.UUID]
) -> list[InsertResult]:
    """Each job's result: the holder of a key taken before the batch, else the batch's first
    job of the key (inserted at its first place in ``jobs``)."""
    results: list[InsertResult] = []
    answered: set[str] = set()
    for job in jobs:
        key = job.idempotency_key
        holder = holders.get(key)
        if holder is not None:
            results.append(InsertResult(holder, False))
        else:
            winner = first[key]
            results.append(InsertResult(winner.job_id, winner is job and key not in answered))
            answered.add(key)
    return results


class InsertStatements:
    """The insert of a batch of jobs whose idempotency keys are distinct: the jobs whose key is
    free go in (key, job, queue and tag rows; no key row for a job keyed by its own id); a key
    taken already names its holder.

    A subclass renders how rows reach a table (:meth:`insert_rows`), or replaces :meth:`insert`.
    """

    driver_insert_commits = False
    """Whether the work of :meth:`driver_insert` commits on its own on an idle connection,
    whatever the connection's autocommit flag (the store then leaves the flag alone)."""

    def __init__(self, dialect: SqlDialect) -> None:
        self.dialect = dialect
        self._prepared: dict[tuple[str, str, str], SubmitStatements] = {}

    def prepared(self, dialect: Dialect) -> SubmitStatements:
        """The submit path's statements for an engine ``dialect`` (rendered once, then reused)."""
        key = (dialect.name, dialect.driver, dialect.paramstyle)
        found = self._prepared.get(key)
        if found is None:
            found = SubmitStatements(dialect, self.dialect.skip_duplicate_keys_clause)
            self._prepared[key] = found
        return found

    def driver_insert(
        self, fresh: Sequence[NewJob], now: datetime, dialect: Dialect
    ) -> Callable[[Any], int | None] | None:
        """The insert of ``fresh`` as work for a bare DBAPI connection in autocommit mode, so
        that the store runs it without a SQLAlchemy ``Connection`` around it; None where the
        dialect has none for this batch.

        The work does what :meth:`insert` does except looking up the holders of taken keys: it
        returns how many jobs went in, or None when it undid its own transaction and the store
        should take the ``Connection`` path instead. The generic work (for a dialect that names
        its :attr:`~ratchet.sql.dialect.SqlDialect.driver_begin`) is one transaction of the
        prepared inserts, given up when a given key was taken (a rare case the other path
        handles). A job keyed by its own id that is there already fails the job insert (a
        duplicate job id, which the store handles).
        It sends rows as the generic :meth:`insert_rows` does: a subclass that renders its rows
        another way overrides this too, or its dialect leaves ``driver_begin`` unset.
        """
        begin = self.dialect.driver_begin
        prepared = self.prepared(dialect)
        key_insert = prepared.key_insert_ignoring
        if begin is None or key_insert is None:
            return None
        key_rows, job_rows, queue_rows, tag_rows, aff_rows = prepared.rows(fresh, now)
        keys = key_insert.params(key_rows)
        writes = [
            (statement.sql, statement.params(rows))
            for statement, rows in (
                (prepared.job_insert, job_rows),
                (prepared.queue_insert, queue_rows),
                (prepared.tag_insert, tag_rows),
                (prepared.affinity_insert, aff_rows),
            )
            if rows
        ]

        def work(driver: Any) -> int | None:
            try:
                with driver_transaction(driver, begin) as cursor:
                    if keys:
                        cursor.executemany(key_insert.sql, keys)
                        if cursor.rowcount != len(keys):
                            raise _KeyTaken
                    for sql, rows in writes:
                        cursor.executemany(sql, rows)
            except _KeyTaken:
                return None
            return len(fresh)

        return work

    def insert_rows(
        self, conn: Connection, statement: PreparedInsert, rows: Sequence[tuple[Any, ...]]
    ) -> None:
        """Insert driver-ready ``rows`` with ``statement``."""
        statement.execute(conn, rows)

    def holders_after(
        self, conn: Connection, fresh: Sequence[NewJob], went_in: int
    ) -> dict[str, uuid.UUID]:
        """After inserting ``fresh`` skipping the jobs whose given key was taken, of which
        ``went_in`` went in: the holders of the keys that were taken already (none when all went
        in). Jobs keyed by their own ids all went in (one that was there already fails the
        insert instead)."""
        if went_in == len(fresh):
            return {}
        given = [j for j in fresh if not j.keyed_by_id]
        found = self.prepared(conn.dialect).lookup(conn, [j.idempotency_key for j in given])
        holders: dict[str, uuid.UUID] = {}
        for job in given:
            holder = found.get(job.idempotency_key)
            if holder is None:  # pragma: no cover - keys are never deleted
                raise DuplicateIdempotencyKeyError(job.idempotency_key, None)
            if holder != job.job_id:
                holders[job.idempotency_key] = holder
        return holders

    def insert(
        self, conn: Connection, fresh: Sequence[NewJob], now: datetime
    ) -> dict[str, uuid.UUID]:
        """Insert the jobs of ``fresh`` (one per idempotency key) whose key is free; return the
        holders of the keys that were taken (key -> holder).

        Where the dialect can skip taken keys in the insert itself, the keys go in first and
        only a shortfall in the inserted row count costs a look-up; otherwise the taken keys are
        looked up first. Only given keys are checked here: a job keyed by its own id that is
        there already fails the job insert with a duplicate job id, which the store handles
        (:meth:`~ratchet.sql.store.SqlStore.insert_jobs`).
        """
        prepared = self.prepared(conn.dialect)
        if prepared.key_insert_ignoring is None:
            given = [j.idempotency_key for j in fresh if not j.keyed_by_id]
            holders = prepared.lookup(conn, given) if given else {}
            if holders:
                fresh = [j for j in fresh if j.idempotency_key not in holders]
            key_rows, job_rows, queue_rows, tag_rows, aff_rows = prepared.rows(fresh, now)
            self.insert_rows(conn, prepared.key_insert, key_rows)
        else:
            key_rows, job_rows, queue_rows, tag_rows, aff_rows = prepared.rows(fresh, now)
            keyed_by_id = len(fresh) - len(key_rows)
            went_in = keyed_by_id + prepared.key_insert_ignoring.execute(conn, key_rows)
            holders = self.holders_after(conn, fresh, went_in)
            if holders:
                fresh = [j for j in fresh if j.idempotency_key not in holders]
                key_rows, job_rows, queue_rows, tag_rows, aff_rows = prepared.rows(fresh, now)
        self.insert_rows(conn, prepared.job_insert, job_rows)
        self.insert_rows(conn, prepared.queue_insert, queue_rows)
        self.insert_rows(conn, prepared.tag_insert, tag_rows)
        if aff_rows:
            self.insert_rows(conn, prepared.affinity_insert, aff_rows)
        return holders


# ---------------------------------------------------------------------------------- outcomes
_TERMINAL = {
    OutcomeKind.SUCCEEDED: JobStatus.SUCCEEDED.value,
    OutcomeKind.DEAD: JobStatus.FAILED.value,
}
#: Attempts an outcome adds to its job's count: a failure counts, a success or reschedule not.
_ATTEMPTS_ADDED = {
    OutcomeKind.SUCCEEDED: 0,
    OutcomeKind.DEAD: 1,
    OutcomeKind.RETRY: 1,
    OutcomeKind.RESCHEDULE: 0,
}


@dataclass(slots=True)
class PlannedOutcome:
    """What an outcome writes if it applies, decided from the outcome alone (a value: not
    changed once made; not frozen, which would cost a microsecond per outcome)."""

    outcome: Outcome
    terminal_status: str | None
    """SUCCEEDED or FAILED: the job ends (its live row goes); None: back to PENDING."""
    attempts_added: int
    """Added to the live row's attempts (a failure counts, a success or reschedule not)."""
    pending_at: datetime
    """When a job that goes back to PENDING is due again (``retry_at``, else now)."""


def plan_outcomes(outcomes: Sequence[Outcome], now: datetime) -> list[PlannedOutcome]:
    """The writes of ``outcomes`` (in batch order)."""
    return [
        PlannedOutcome(o, _TERMINAL.get(o.kind), _ATTEMPTS_ADDED[o.kind], o.retry_at or now)
        for o in outcomes
    ]


class AppliedOutcome:
    """An applied outcome and the attempts its live row counted (``attempts``): the values of
    its statements (a value, like :class:`PlannedOutcome`). Plain attributes: the outcome write
    reads them several times per job."""

    __slots__ = ("attempts", "attempts_after", "outcome", "planned", "started_at")

    def __init__(self, planned: PlannedOutcome, attempts: int, started_at: datetime) -> None:
        self.planned = planned
        self.attempts = attempts
        self.started_at = started_at
        """When the attempt started (its live row's ``picked_at``)."""
        self.outcome: Outcome = planned.outcome
        self.attempts_after = attempts + planned.attempts_added
        """The attempts the job counts after this outcome."""

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, AppliedOutcome)
            and self.planned == other.planned
            and self.attempts == other.attempts
            and self.started_at == other.started_at
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        return f"AppliedOutcome({self.planned!r}, {self.attempts!r}, {self.started_at!r})"


#: A live row the node holds, as :meth:`OutcomeStatements.owned` gives it: (epoch, attempts,
#: when the running attempt started).
OwnedRow = tuple[int, int, datetime]


def owned_under_epoch(
    planned: Sequence[PlannedOutcome],
    owned: Mapping[Any, OwnedRow],
    key: Callable[[uuid.UUID], Any] | None = None,
) -> list[AppliedOutcome]:
    """The outcomes that apply: those whose job is in ``owned`` (the rows the node holds by
    id) under the outcome's epoch; every other one is fenced. ``key`` turns a job id into the
    key of ``owned`` (default: the id itself)."""
    writes = []
    for p in planned:
        o = p.outcome
        row = owned.get(o.job_id if key is None else key(o.job_id))
        if row is not None and row[0] == o.epoch:
            writes.append(AppliedOutcome(p, row[1], row[2]))
    return writes


def applied_rows(
    node_id: str, writes: Sequence[AppliedOutcome]
) -> list[tuple[PreparedStatement, list[dict[str, Any]]]]:
    """The statements that write the applied outcomes of ``node_id``'s attempts, each with its
    rows, in order: terminal ones leave the queue and end their job, the others go back to
    PENDING, and every attempt's row is written, ended."""
    terminal = [w for w in writes if w.planned.terminal_status is not None]
    back = [w for w in writes if w.planned.terminal_status is None]
    out: list[tuple[PreparedStatement, list[dict[str, Any]]]] = []
    if terminal:
        # One statement per job (the dialects batch them into one round trip): with an IN list
        # MySQL/MariaDB may scan the table (a small one by its statistics) and wait on, then
        # deadlock with, other workers' rows.
        out.append((_DELETE_LIVE, [{"b_id": w.outcome.job_id} for w in terminal]))
        out.append(
            (
                _END_JOB,
                [
                    {
                        "b_id": w.outcome.job_id,
                        "b_status": w.planned.terminal_status,
                        "b_error": w.outcome.error,
                        "b_result": w.outcome.result,
                        "b_at": w.outcome.finished_at,
                        "b_attempts": w.attempts_after,
                    }
                    for w in terminal
                ],
            )
        )
    if back:
        out.append(
            (
                _BACK_TO_PENDING,
                [
                    {
                        "b_id": w.outcome.job_id,
                        "b_time": w.planned.pending_at,
                        "b_attempts": w.attempts_after,
                        "b_error": w.outcome.error,
                    }
                    for w in back
                ],
            )
        )
    if writes:
        out.append(
            (
                _ENDED_ATTEMPT,
                [
                    {
                        "b_job_id": w.outcome.job_id,
                        "b_attempt_no": w.attempts + 1,
                        "b_epoch": w.outcome.epoch,
                        "b_node_id": node_id,
                        "b_started_at": w.started_at,
                        "b_finished_at": w.outcome.finished_at,
                        "b_outcome": w.outcome.kind.value,
                        "b_error": w.outcome.error,
                        "b_traceback": w.outcome.traceback,
                    }
                    for w in writes
                ],
            )
        )
    return out


class OutcomeStatements:
    """The fenced outcome write: the live rows the node holds are read and locked
    (:meth:`owned`), the outcomes owned under their epoch (:func:`owned_under_epoch`) written
    (:meth:`apply`): terminal ones leave the queue and end their job, retries and reschedules go
    back to PENDING, every applied attempt's row is written (ended).

    A subclass renders :meth:`owned` and :meth:`apply` its own way, or replaces :meth:`write`
    where one statement does all of it; it must apply exactly the outcomes owned under their
    epoch and write the same rows.
    """

    owned_key: Callable[[uuid.UUID], Any] | None = None
    """Turns a job id into the key of :meth:`owned`'s rows (None: the id itself)."""

    def __init__(self, dialect: SqlDialect) -> None:
        self.dialect = dialect
        self._owned_stmt = dialect.lock_rows(OWNED_ROWS)
        self._owned_reads: dict[tuple[Dialect, int], Any] = {}

    def owned(
        self, conn: Connection, node_id: str, ids: Sequence[uuid.UUID]
    ) -> Mapping[Any, OwnedRow]:
        """Lock and return the live rows of ``ids`` that ``node_id`` holds."""
        owned: dict[Any, OwnedRow] = {}
        for chunk in iter_chunks(list(ids), CHUNK):
            rows = conn.execute(self._owned_stmt, {"ids": chunk, "node": node_id})
            # By position (OWNED_ROWS' column order): a row read by name costs a failed look-up.
            owned.update({job_id: (epoch, n, started) for job_id, epoch, n, started in rows})
        return owned

    def apply(self, conn: Connection, node_id: str, writes: Sequence[AppliedOutcome]) -> None:
        """Write the applied outcomes of ``node_id``'s attempts (their rows are locked)."""
        for statement, rows in applied_rows(node_id, writes):
            statement.execute(conn, rows)

    def write(
        self, conn: Connection, node_id: str, planned: Sequence[PlannedOutcome]
    ) -> Collection[uuid.UUID]:
        """Apply the ``planned`` outcomes owned by ``node_id`` under their epoch; return the ids
        of those applied."""
        owned = self.owned(conn, node_id, [p.outcome.job_id for p in planned])
        writes = owned_under_epoch(planned, owned, self.owned_key)
        if writes:
            self.apply(conn, node_id, writes)
        return {w.outcome.job_id for w in writes}

    def driver_write(
        self, node_id: str, planned: Sequence[PlannedOutcome], dialect: Dialect
    ) -> Callable[[Any], Collection[uuid.UUID]] | None:
        """:meth:`write` as work for a bare driver connection in autocommit mode (the store's
        ``_run_dbapi``) on the engine ``dialect``; None where there is none.

        The generic work, for a dialect that names its
        :attr:`~ratchet.sql.dialect.SqlDialect.driver_begin` and a statement set that renders
        neither :meth:`owned` nor :meth:`apply` its own way, is one transaction of the same
        statements sent as driver SQL with driver-ready values: SQLAlchemy's ``Connection``,
        its parameter processing and its result rows cost more than SQLite's own writes.
        """
        begin = self.dialect.driver_begin
        generic = type(self).owned is OutcomeStatements.owned
        if begin is None or not generic or type(self).apply is not OutcomeStatements.apply:
            return None
        ids = [p.outcome.job_id for p in planned]
        raw_id = uuid_binder(dialect)
        reads = []
        for chunk in iter_chunks(ids, CHUNK):
            read = self._owned_read(dialect, len(chunk))
            values = {f"i{k}": job_id for k, job_id in enumerate(chunk)}
            reads.append((read.sql, read.driver_rows([{**values, "node": node_id}])[0]))

        def work(driver: Any) -> Collection[uuid.UUID]:
            with driver_transaction(driver, begin) as cursor:
                owned: dict[Any, OwnedRow] = {}
                for sql, values in reads:
                    for job_id, epoch, attempts, started in cursor.execute(sql, values):
                        owned[job_id] = (epoch, attempts, from_micros(started))
                writes = owned_under_epoch(planned, owned, raw_id)
                for statement, rows in applied_rows(node_id, writes):
                    rendering = statement.rendering(dialect)
                    cursor.executemany(rendering.sql, rendering.driver_rows(rows))
            return {w.outcome.job_id for w in writes}

        return work

    def _owned_read(self, dialect: Dialect, n: int) -> Any:
        """:data:`OWNED_ROWS` for ``n`` ids as a driver statement (its rendering: ``sql`` and
        ``driver_rows``), the ids bound as ``i0`` ... and the node as ``node``."""
        key = (dialect, n)
        found = self._owned_reads.get(key)
        if found is None:
            stmt = self.dialect.lock_rows(_owned_rows(_id_binds(n, Q.c.job_id)))
            found = PreparedStatement(stmt).rendering(dialect)
            if len(self._owned_reads) >= 64:
                self._owned_reads = {}
            self._owned_reads[key] = found
        return found


# ---------------------------------------------------------------------------------- together
@dataclass
class HotPaths:
    """The statement sets a store runs its hot paths with."""

    claim: ClaimStatements
    insert: InsertStatements
    outcomes: OutcomeStatements

    @classmethod
    def generic(cls, dialect: SqlDialect) -> HotPaths:
        """The generic statement sets (SQLAlchemy Core) for ``dialect``."""
        return cls(ClaimStatements(dialect), InsertStatements(dialect), OutcomeStatements(dialect))
