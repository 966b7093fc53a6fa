"""The PostgreSQL store: the shared SQL store with one-statement claims, inserts and outcomes.

The claim picks the candidates, locks them with ``FOR UPDATE SKIP LOCKED``, marks them RUNNING,
opens their attempt-history rows and returns their definitions in a single round trip
(data-modifying CTEs), where the generic claim needs four. Inserting a batch of jobs and
recording a batch of outcomes are one statement each too, where the generic versions pay a
round trip per row and table. They are the statement sets of :mod:`ratchet.sql.hotpaths`
rendered for PostgreSQL (:class:`PostgresClaim`, :class:`PostgresInsert`,
:class:`PostgresOutcomes`); the shared store keeps the logic around them (which job of a batch
owns a key, the results, what an outcome writes, the fenced partition and the outcome hooks).
``ratchet.testing.dialect_contract`` checks each against the generic statement set, row for row.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from datetime import datetime, timedelta
from functools import cache
from typing import Any

import psycopg
from sqlalchemy import String, Table, TextClause, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection, Dialect, make_url
from sqlalchemy.exc import DBAPIError

from ratchet.domain.errors import ConfigurationError
from ratchet.domain.lifecycle import JobPriority, JobStatus, check_transition
from ratchet.domain.model import ClaimedJob, NewJob
from ratchet.domain.watcher import LIVE_NODE_STATES, NodeState
from ratchet.ports import InsertResult, iter_chunks
from ratchet.sql import schema
from ratchet.sql.affinity import AFFINITY_COLUMNS
from ratchet.sql.claimed import claimed_job, has_flow_effects, plain_rows, row_maker
from ratchet.sql.hotpaths import (
    JOB_COLUMNS,
    QUEUE_COLUMNS,
    RECORD_QUEUE_COLUMNS,
    ClaimStatements,
    GatedClaim,
    HotPaths,
    InsertStatements,
    OutcomeStatements,
    PlannedOutcome,
    first_of_each_key,
    insert_results,
    job_records,
)
from ratchet.sql.store import SqlStore
from ratchet.sql.types import from_micros, to_micros
from ratchet.sql.watcher_store import OWNED
from ratchet_postgres.dialect import PostgresDialect
from ratchet_postgres.named_statement import NamedStatement

_PG = postgresql.dialect()  # type: ignore[no-untyped-call]

DRIVER = "psycopg"


def normalize_url(url: str) -> str:
    """``postgres://`` and ``postgresql://`` mean psycopg 3 (SQLAlchemy would pick psycopg2)."""
    parsed = make_url(
        url.replace("postgres://", "postgresql://", 1) if url.startswith("postgres://") else url
    )
    backend, _, driver = parsed.drivername.partition("+")
    if backend == "postgresql" and not driver:
        parsed = parsed.set(drivername=f"postgresql+{DRIVER}")
    return parsed.render_as_string(hide_password=False)


#: The URL query parameter that says PgBouncer is in between (``?pgbouncer=transaction``).
PGBOUNCER_PARAMETER = "pgbouncer"
#: Its values: PgBouncer's pool modes (``true`` counts as ``transaction``, the strictest
#: that Ratchet supports; ``statement`` mode cannot run multi-statement transactions).
PGBOUNCER_MODES = ("transaction", "session", "true")


def take_url_parameter(url: str, name: str) -> tuple[str, str | None]:
    """``url`` without its query parameter ``name`` (unchanged when it has none), and that
    parameter's value (the last one given), stripped and in lower case (None: not set)."""
    parsed = make_url(url)
    value = parsed.query.get(name)
    if value is None:
        return url, None
    stripped = parsed.difference_update_query([name]).render_as_string(hide_password=False)
    return stripped, (value if isinstance(value, str) else value[-1]).strip().lower()


def split_pgbouncer(url: str) -> tuple[str, str | None]:
    """``url`` without its ``pgbouncer`` query parameter, and that parameter's pool mode
    (None: not set).

    :raises ConfigurationError: a value other than ``transaction``, ``session`` or ``true``.
    """
    url, mode = take_url_parameter(url, PGBOUNCER_PARAMETER)
    if mode is None:
        return url, None
    if mode not in PGBOUNCER_MODES:
        raise ConfigurationError(
            f"pgbouncer={mode!r} in the store URL: use pgbouncer=transaction (PgBouncer's "
            "pool_mode = transaction) or pgbouncer=session; statement pooling cannot run "
            "Ratchet's transactions (see docs/deployment.md#pgbouncer)"
        )
    return url, "transaction" if mode == "true" else mode


#: ``ratchet.sql.affinity.affinity_allows`` for the queue row ``q``, the node's tags in the
#: text array ``:ntags``: no affinity, or no affinity row that the node's tags violate.
#: ``affinity`` is in the claim index (revision 0011), so a job without affinity is accepted from
#: the index entry. ``OFFSET 0`` keeps the planner from turning the EXISTS into a hashed subplan
#: that reads the whole affinity table on every claim: it stays a primary-key look-up, made only
#: for jobs that have affinity rows.
AFFINITY_ALLOWS = (
    "(q.affinity = 0 OR NOT EXISTS (SELECT 1 FROM scheduler_job_affinity a"
    " WHERE a.job_id = q.job_id AND (a.required = 1) <> (a.tag = ANY(CAST(:ntags AS text[])))"
    " OFFSET 0))"
)


def _candidates() -> str:
    """The ``cand`` CTE's query: per priority level (a ``VALUES`` list, highest first) the
    ``:cand`` oldest due PENDING jobs, read by a ``LATERAL`` subquery whose index range scan
    runs once per level. One subquery instead of a ``UNION ALL`` branch per level: the claim
    is planned at every execution (a plan cached while the queue was empty would scan it
    once the queue is long), and the planner weighs every index of the queue table for each
    reference to it: five branches took half as long again to plan (0.71 against 0.48 ms)."""
    levels = ", ".join(f"({int(level)})" for level in sorted(JobPriority, reverse=True))
    # Literal status: the planner matches the partial claim index (priority,
    # scheduled_time, job_id) WHERE status = 'PENDING'; the level is the scan's first key.
    return (
        f"SELECT c.job_id, c.priority, c.scheduled_time FROM (VALUES {levels}) AS lv(level)"
        " CROSS JOIN LATERAL (SELECT job_id, priority, scheduled_time FROM scheduler_job_queue q"
        f" WHERE status = '{JobStatus.PENDING.value}' AND priority = lv.level"
        f" AND scheduled_time <= :now AND {AFFINITY_ALLOWS}"
        " ORDER BY scheduled_time, job_id LIMIT :cand) c"
    )


def claim_parameters(
    node_id: str,
    limit: int,
    now: datetime,
    boost: timedelta,
    node_tags: frozenset[str] = frozenset(),
    margin: int = 0,
) -> dict[str, Any]:
    """The bound parameters of :func:`claim_statement` (``boost`` only when the boost is on;
    ``margin``: candidates read beyond :data:`CANDIDATES_PER_CLAIMED` per job wanted)."""
    params: dict[str, Any] = {
        "now": to_micros(now),
        "lim": limit,
        "cand": limit * CANDIDATES_PER_CLAIMED + margin,
        "node": node_id,
        "ntags": sorted(node_tags),
    }
    boost_us = boost // timedelta(microseconds=1)
    if boost_us > 0:
        params["boost"] = boost_us
    return params


#: The URL query parameter that turns the claim lock off (``?serialize_claims=off``).
SERIALIZE_CLAIMS_PARAMETER = "serialize_claims"
_SWITCH = {"on": True, "true": True, "1": True, "off": False, "false": False, "0": False}


def split_serialize_claims(url: str) -> tuple[str, bool]:
    """``url`` without its ``serialize_claims`` query parameter, and whether claims are
    serialized (on unless the parameter turns them off).

    :raises ConfigurationError: a value other than on/off, true/false or 1/0.
    """
    url, value = take_url_parameter(url, SERIALIZE_CLAIMS_PARAMETER)
    if value is None:
        return url, True
    if value not in _SWITCH:
        raise ConfigurationError(
            f"serialize_claims={value!r} in the store URL: use serialize_claims=on (the"
            " default: claims take turns) or serialize_claims=off (see docs/deployment.md)"
        )
    return url, _SWITCH[value]


#: Candidates read per priority level for each job a claim wants. Twice as many: a claimer
#: racing another one skips the rows the other holds (``SKIP LOCKED``) and still finds its
#: batch among the next ones instead of coming back short or empty.
CANDIDATES_PER_CLAIMED = 2

#: Candidates read per priority level beyond those, for the claimers of many nodes at once:
#: with ``k`` other claims in flight, each holding up to its batch, the oldest ``2 * lim``
#: candidates may all be held and a claim would come back empty while jobs wait. Reading a
#: wider window costs index entries only (the lock loop stops once ``lim`` rows are locked,
#: visiting only the rows it takes or skips). See ``PostgresClaim.contention_margin``.
CONTENTION_MARGIN = 32

#: Key of the transaction-level advisory lock that serializes the claims of every node on one
#: database (ASCII "ratchetC"), when :attr:`PostgresClaim.serialized` is on.
CLAIM_LOCK_KEY = 0x7261746368657443


def _gate() -> str:
    """The CTEs that decide whether a node may claim now (:data:`GATE_PARAMETERS`): ``probe``
    reads the node's state and whether a takeover is possible (a TIMED_OUT job of another
    incarnation, past the grace or of a node that is no longer live, inside the takeover
    window, under the takeover limit), ``gate`` opens for an ALIVE node with no takeover to make
    first, or for a node without a row when ``:without_row`` allows it."""
    live = ", ".join(f"'{state.value}'" for state in LIVE_NODE_STATES)
    return f"""probe AS MATERIALIZED (
    SELECT (SELECT n.state FROM scheduler_node n WHERE n.node_id = :node) AS state,
           EXISTS (
               SELECT 1 FROM scheduler_job_queue t
               WHERE t.status = '{JobStatus.TIMED_OUT.value}' AND t.picked_by <> :node
                 AND t.takeovers < :p_takeovers AND t.timed_out_at > :p_window
                 AND (t.timed_out_at <= :p_grace OR t.picked_by NOT IN (
                      SELECT n.node_id FROM scheduler_node n WHERE n.state IN ({live})))
           ) AS eligible
), gate AS (
    SELECT COALESCE((state = '{NodeState.ALIVE.value}' AND NOT eligible)
                    OR (state IS NULL AND CAST(:without_row AS BOOLEAN)), FALSE) AS open
    FROM probe
), """


#: The parameters :func:`claim_statement` takes beyond :func:`claim_parameters` when gated.
GATE_PARAMETERS = ("p_takeovers", "p_window", "p_grace", "without_row")


@cache
def claim_statement(boosted: bool, gated: bool = False) -> TextClause:
    """The claim as one statement (``boosted``: whether the age boost is on; ``gated``: the
    poll's probe of the node's state folded in, :func:`_gate`).

    ``cand``: per priority level the ``:cand`` oldest due PENDING jobs (``:lim`` times
    :data:`CANDIDATES_PER_CLAIMED`; an index-only range scan each, :func:`_candidates`); together
    they hold the true top ``:lim`` because the boost never reorders jobs of one level.
    ``picked``: the candidates sorted by effective priority, scheduled time and id, then
    fetched by primary key and locked one at a time in that order (``FOR UPDATE SKIP LOCKED`` in
    a lateral subquery), skipping rows other claimers hold, until ``:lim`` are locked: only the
    rows taken (and those skipped) are visited. ``upd`` marks them RUNNING (epoch + 1) (the
    running attempt is that row: its history row is written when it ends), and the final select
    adds the definitions, in claim order.

    ``upd`` finds its rows by their ids only, as an array as well as by the join (the rows are
    locked and were PENDING when locked, so no status test is needed): given a status test or the
    join alone, a planner that believes the queue nearly empty (statistics from before a burst of
    jobs) walks every PENDING row, and a claim costs as much as the queue is long.

    Gated, it claims only when the gate is open and always returns at least one row: the
    probe's ``state`` and ``eligible`` on every row, the job columns NULL when none was claimed.
    """
    if boosted:
        effective = (
            "c.priority + (CAST(:now AS BIGINT) - c.scheduled_time) / CAST(:boost AS BIGINT)"
        )
    else:
        effective = "c.priority"
    flow_effects = has_flow_effects(schema.job.alias("j")).compile(dialect=_PG)
    pending = JobStatus.PENDING.value
    running = JobStatus.RUNNING.value
    gate = _gate() if gated else ""
    opened = "\n    WHERE (SELECT open FROM gate)" if gated else ""
    sql = f"""
WITH {gate}cand AS (
    {_candidates()}
), ordered AS (
    SELECT c.job_id, {effective} AS eff, c.scheduled_time
    FROM cand c
), picked AS (
    SELECT o.job_id, o.eff
    FROM (SELECT * FROM ordered ORDER BY eff DESC, scheduled_time, job_id) o
    CROSS JOIN LATERAL (
        SELECT 1 FROM scheduler_job_queue q
        WHERE q.job_id = o.job_id AND q.status = '{pending}' AND q.scheduled_time <= :now
        FOR UPDATE SKIP LOCKED
    ) locked{opened}
    LIMIT :lim
), upd AS (
    UPDATE scheduler_job_queue q
    SET status = '{running}', picked_by = :node, picked_at = :now, epoch = q.epoch + 1,
        start_by = NULL
    FROM picked p
    WHERE q.job_id = p.job_id AND q.job_id = ANY(ARRAY(SELECT job_id FROM picked))
    RETURNING q.job_id, q.priority, q.scheduled_time, q.epoch, q.attempts, p.eff
)"""
    claimed = f"""SELECT u.job_id, u.priority, u.scheduled_time, u.epoch, u.attempts,
       j.target, j.payload, j.max_retries, j.backoff_policy, j.backoff_ms, j.timeout_ms,
       j.params, j.tags, j.executor, j.resource_name, j.caller_principal, j.trace_context,
       ({flow_effects}) AS flow_effects, u.eff
FROM upd u JOIN scheduler_job j ON j.job_id = u.job_id"""
    if gated:
        sql += f"""
SELECT g.state, g.eligible, c.*
FROM probe g LEFT JOIN ({claimed}) c ON TRUE
ORDER BY c.eff DESC, c.scheduled_time, c.job_id
"""
    else:
        sql += f"""
{claimed}
ORDER BY u.eff DESC, u.scheduled_time, u.job_id
"""
    return compact_statement(sql)


#: The longest statement whose parse psycopg caches (``psycopg._queries``): a longer one is
#: split into its parameters again on every execution.
PSYCOPG_CACHED_LENGTH = 4096


def compact_statement(sql: str) -> TextClause:
    """``sql`` without its indentation and blank lines, so that a hot statement stays short
    enough for psycopg to cache its parse (:data:`PSYCOPG_CACHED_LENGTH`). Lines are kept, so
    the text reads the same in the server's logs."""
    return text("\n".join(line.strip() for line in sql.splitlines() if line.strip()))


def _cast_type(column_type: Any) -> str:
    """The type a JSON value is cast to: strings as ``text``, so that a value too long for
    its column fails the insert (an explicit cast to ``varchar(n)`` would cut it short)."""
    if isinstance(column_type, String):
        return "TEXT"
    return str(column_type.compile(dialect=_PG))


def _json_rows(placeholder: str, columns: Sequence[tuple[str, str]]) -> str:
    """The rows given at ``placeholder`` as a JSON array of arrays (one per row, values in
    ``columns`` order, each ``(name, SQL type)``), read as ``jsonb`` so that each value is one
    indexed look-up. (Arrays, not objects: no key per value to write and to parse.)"""
    values = ", ".join(
        f"CAST(e ->> {i} AS {sql_type}) AS {name}" for i, (name, sql_type) in enumerate(columns)
    )
    return f"SELECT {values} FROM jsonb_array_elements(CAST({placeholder} AS jsonb)) AS e"


def _recordset(param: str, columns: Sequence[tuple[Table, str]]) -> str:
    """:func:`_json_rows` of table ``columns`` from the driver parameter ``param``, each value
    cast to its column's type (:func:`_cast_type`)."""
    return _json_rows(f"%({param})s", [(c, _cast_type(table.c[c].type)) for table, c in columns])


#: One JSON array per job (:func:`~ratchet.sql.hotpaths.job_records`): the job row, then the
#: queue row's own columns.
JOB_RECORD = (
    *((schema.job, c) for c in JOB_COLUMNS),
    *((schema.job_queue, c) for c in RECORD_QUEUE_COLUMNS),
)

#: Counts every new job starts at; any other column a record may leave out is NULL.
_ZERO_FIELDS = frozenset({"affinity", "backoff_ms"})

#: The places in a job record that a batch's records leave out when every job of the batch has
#: the same value there (:data:`_ZERO_FIELDS` 0, any other nullable column NULL): the value of
#: each such place, by place. The server's parse of a record costs about as much per value as
#: per row, and most jobs leave most options unset.
_SPARSE_FIELDS = {
    place: 0 if name in _ZERO_FIELDS else None
    for place, (table, name) in enumerate(JOB_RECORD)
    if name in _ZERO_FIELDS or table.c[name].nullable
}


#: The fewest jobs whose records leave out shared values. Each combination of values left out
#: is a statement of its own, prepared on every connection that runs it; a single submission
#: would make one per combination of options for a saving of microseconds in a round trip of
#: hundreds, so smaller batches send every value (a handful of statements in all).
SPARSE_FROM = 16


def _record_select(left_out: tuple[int, ...]) -> str:
    """The job records' ``SELECT`` (:func:`_json_rows` of :data:`JOB_RECORD`) when each record
    leaves out the places ``left_out`` (the others move up): those columns take their
    common value (:data:`_SPARSE_FIELDS`), an idempotency key left out is its job's own id."""
    values: list[str] = []
    kept = 0
    for place, (table, name) in enumerate(JOB_RECORD):
        sql_type = _cast_type(table.c[name].type)
        if place not in left_out:
            values.append(f"CAST(e ->> {kept} AS {sql_type}) AS {name}")
            kept += 1
        elif place == _KEY:
            values.append(f"CAST(CAST(e ->> 0 AS UUID) AS TEXT) AS {name}")
        elif _SPARSE_FIELDS[place] == 0:
            values.append(f"0 AS {name}")
        else:
            values.append(f"CAST(NULL AS {sql_type}) AS {name}")
    return f"SELECT {', '.join(values)} FROM jsonb_array_elements(CAST(%(rows)s AS jsonb)) AS e"


@cache
def insert_statement(
    tags: bool, affinity: bool = False, own_keys: bool = False, left_out: tuple[int, ...] = ()
) -> str:
    """Insert a batch of jobs in one statement (driver SQL, ``%(name)s`` parameters).

    ``rows`` (one JSON array per job) is parsed once. The keys jobs were given go in first, with
    ``ON CONFLICT DO NOTHING``; a job keyed by its own id (the default) has no key row, its job
    row's primary key holds the key. Only the jobs whose key is their own or went in are
    inserted into the job, tag and queue tables. The statement itself is the queue insert, so
    its row count is the number of jobs inserted and it returns no rows to process. (JSON,
    because psycopg builds text arrays in Python, which costs more than the database's JSON
    parser.)

    ``own_keys``: every job is keyed by its own id, so the statement inserts no key and needs
    no filter. ``left_out``: the places of :data:`JOB_RECORD` the records leave out
    (:func:`_record_select`).
    """
    queue_values = ", ".join("0" if c in ("attempts", "epoch") else c for c in QUEUE_COLUMNS)
    parts = [f"r AS MATERIALIZED ({_record_select(left_out)})"]
    if own_keys:
        fresh = ""
    else:
        own_key = "idempotency_key = CAST(job_id AS TEXT)"
        fresh = " WHERE job_id IN (SELECT job_id FROM idem UNION ALL SELECT job_id FROM own)"
        parts += [
            # A key given (or kept from an earlier submission) may be taken already: skipped.
            "idem AS (INSERT INTO scheduler_idempotency_key (idempotency_key, job_id, created_at)"
            f" SELECT idempotency_key, job_id, CAST(%(now)s AS BIGINT) FROM r WHERE NOT {own_key}"
            " ON CONFLICT DO NOTHING RETURNING job_id)",
            f"own AS (SELECT job_id FROM r WHERE {own_key})",
        ]
    parts.append(
        f"j AS (INSERT INTO scheduler_job ({', '.join(JOB_COLUMNS)})"
        f" SELECT {', '.join(JOB_COLUMNS)} FROM r{fresh})"
    )
    if tags:
        tag_columns = [(schema.job_tag, "job_id"), (schema.job_tag, "tag")]
        parts.append(
            "t AS (INSERT INTO scheduler_job_tag (job_id, tag)"
            f" SELECT job_id, tag FROM ({_recordset('tags', tag_columns)}) t{fresh})"
        )
    if affinity:
        aff_columns = [(schema.job_affinity, c) for c in AFFINITY_COLUMNS]
        parts.append(
            f"a AS (INSERT INTO scheduler_job_affinity ({', '.join(AFFINITY_COLUMNS)})"
            f" SELECT {', '.join(AFFINITY_COLUMNS)} FROM ({_recordset('aff', aff_columns)}) a"
            f"{fresh})"
        )
    return (
        "WITH "
        + ",\n".join(parts)
        + f"\nINSERT INTO scheduler_job_queue ({', '.join(QUEUE_COLUMNS)})"
        + f" SELECT {queue_values} FROM r{fresh}"
    )


@cache
def _named(statement: str) -> NamedStatement:
    """``statement`` as a :class:`~ratchet_postgres.named_statement.NamedStatement`."""
    return NamedStatement(statement)


def _json_records(rows: Sequence[tuple[Any, ...]]) -> str:
    """``rows`` as a JSON array of arrays."""
    return _JSON.encode(rows)


_JSON = json.JSONEncoder(separators=(",", ":"))

#: Jobs per statement when a submission is sent in pieces. Pipelined, the client encodes (and,
#: through :meth:`PostgresStore.insert_job_chunks`, builds) one chunk while the server inserts
#: the one before; smaller chunks overlap more but cost a statement each.
INSERT_CHUNK = 250


def _uuid_text(value: uuid.UUID) -> str:
    """``value`` as the 32 hex digits PostgreSQL's ``uuid`` input reads (``str()`` of a UUID
    is a Python-level call that slices and joins them with dashes, a microsecond per job)."""
    return f"{value.int:032x}"


def _insert_params(jobs: Sequence[NewJob], now: datetime) -> tuple[str, dict[str, Any]]:
    """The statement (:func:`insert_statement`) that inserts ``jobs``, and its parameters."""
    records, tag_rows, aff_rows = job_records(jobs, now, _uuid_text)
    own_keys = all(r[_KEY] == _own_key(r[_ID]) for r in records)
    size = len(records)
    left_out: tuple[int, ...] = ()
    if size >= SPARSE_FROM:
        columns = list(zip(*records, strict=True))  # no record holds a bool, which 0 counts
        left_out = tuple(
            place for place, value in _SPARSE_FIELDS.items() if columns[place].count(value) == size
        )
        if own_keys:
            left_out = tuple(sorted((*left_out, _KEY)))
        if left_out:
            kept = (c for place, c in enumerate(columns) if place not in left_out)
            records = list(zip(*kept, strict=True))
    params: dict[str, Any] = {"now": to_micros(now), "rows": _json_records(records)}
    if tag_rows:
        params["tags"] = _json_records(tag_rows)
    if aff_rows:
        params["aff"] = _json_records(aff_rows)
    return insert_statement(bool(tag_rows), bool(aff_rows), own_keys, left_out), params


_ID, _KEY = JOB_COLUMNS.index("job_id"), JOB_COLUMNS.index("idempotency_key")


def _own_key(hex_id: str) -> str:
    """The default idempotency key of the job whose id is ``hex_id`` (:func:`_uuid_text`):
    ``str()`` of its ``UUID``, built from the hex digits at a fraction of that call's cost."""
    return f"{hex_id[:8]}-{hex_id[8:12]}-{hex_id[12:16]}-{hex_id[16:20]}-{hex_id[20:]}"


class _Replay:
    """The chunks of a one-shot iterable, kept as they are drawn: a retried transaction sends
    the same jobs again (each checked once, as :meth:`SqlStore.insert_jobs` checks them)."""

    def __init__(self, chunks: Iterable[Sequence[NewJob]]) -> None:
        self._source = iter(chunks)
        self._drawn: list[Sequence[NewJob]] = []

    def __iter__(self) -> Iterator[Sequence[NewJob]]:
        yield from self._drawn
        for chunk in self._source:
            for job in chunk:
                check_transition(None, job.status)
            self._drawn.append(chunk)
            yield chunk

    def jobs(self) -> list[NewJob]:
        """Every job drawn so far."""
        return [job for chunk in self._drawn for job in chunk]


#: The values of one outcome in the outcome statement's rows, in order, with their SQL types
#: (:meth:`PostgresOutcomes.write` builds each row in this order).
OUTCOME_RECORD = (
    ("job_id", "UUID"),
    ("epoch", "INTEGER"),
    ("kind", "TEXT"),
    ("terminal_status", "TEXT"),
    ("added", "INTEGER"),
    ("error", "TEXT"),
    ("traceback", "TEXT"),
    ("result", "TEXT"),
    ("finished_at", "BIGINT"),
    ("pending_at", "BIGINT"),
)


@cache
def record_statement() -> TextClause:
    """Apply a batch of planned outcomes in one statement (the generic write's statement set).

    An outcome applies only while its job is still RUNNING (or TIMED_OUT) under this node and
    its epoch (the fence). ``gone``: the terminal ones, whose queue rows are deleted under the
    fence in the same step (the delete returns what the rest needs, so their rows are not
    locked first in a pass of their own); their jobs end (a row each in ``scheduler_job_end``). ``owned``: the others, locked under
    the fence, which go back to PENDING with their error (if any) as the job's last error.
    Every accepted attempt's row is written, ended, with the start its live row kept. What
    each writes (terminal status, attempts added, due time) comes planned with it. The ids
    returned are the accepted ones. ``:outcomes`` holds one JSON array per outcome
    (:data:`OUTCOME_RECORD`), read as the insert reads its rows.
    """
    owned_statuses = ", ".join(f"'{status}'" for status in OWNED)
    fence = f"q.picked_by = :node AND q.status IN ({owned_statuses}) AND q.epoch = o.epoch"
    columns = (
        "q.job_id, q.attempts, q.picked_at, o.epoch, o.kind, o.terminal_status, o.added,"
        " o.error, o.traceback, o.result, o.finished_at, o.pending_at"
    )
    pending = JobStatus.PENDING.value
    return compact_statement(
        f"""
WITH o AS (
    {_json_rows(":outcomes", OUTCOME_RECORD)}
), gone AS (
    DELETE FROM scheduler_job_queue q USING o
    WHERE q.job_id = o.job_id AND o.terminal_status IS NOT NULL AND {fence}
    RETURNING {columns}
), owned AS (
    SELECT {columns}
    FROM scheduler_job_queue q JOIN o ON o.job_id = q.job_id
    WHERE o.terminal_status IS NULL AND {fence}
    FOR UPDATE OF q
), ended AS (
    INSERT INTO scheduler_job_end
        (job_id, terminal_status, terminal_error, result, terminated_at, attempts)
    SELECT job_id, terminal_status, error, result, finished_at, attempts + added
    FROM gone
), back AS (
    UPDATE scheduler_job_queue q
    SET status = '{pending}', scheduled_time = w.pending_at, attempts = w.attempts + w.added,
        last_error = COALESCE(w.error, q.last_error),
        picked_by = NULL, picked_at = NULL, timed_out_at = NULL
    FROM owned w
    WHERE q.job_id = w.job_id
), accepted AS (
    SELECT * FROM gone UNION ALL SELECT * FROM owned
), ended_attempts AS (
    INSERT INTO scheduler_job_execution
        (job_id, attempt_no, epoch, node_id, started_at, finished_at, outcome, error, traceback)
    SELECT job_id, attempts + 1, epoch, :node, picked_at, finished_at, kind, error, traceback
    FROM accepted
)
SELECT job_id FROM accepted
"""
    )


def _claimed_jobs(rows: Sequence[Any], now: datetime) -> list[ClaimedJob]:
    """The jobs of the claim statement's rows (:func:`~ratchet.sql.claimed.plain_rows`; queue
    and definition columns in one row)."""
    due = _Converted(from_micros)  # the jobs of one submission share their due time
    return [
        claimed_job(r, r, now, epoch=r.epoch, scheduled_time=due[r.scheduled_time]) for r in rows
    ]


class _Converted(dict[Any, Any]):
    """``convert(key)`` for each key looked up, computed once per distinct key (a plain dict
    look-up after the first): a batch's rows repeat a few values many times."""

    def __init__(self, convert: Callable[[Any], Any]) -> None:
        super().__init__()
        self._convert = convert

    def __missing__(self, key: Any) -> Any:
        value = self[key] = self._convert(key)
        return value


class PostgresClaim(ClaimStatements):
    """The claim as one statement (:func:`claim_statement`)."""

    contention_margin = CONTENTION_MARGIN
    """Candidates read per priority level beyond twice the batch (:data:`CONTENTION_MARGIN`)."""

    serialized = True
    """Whether each claim first takes the claim lock (:data:`CLAIM_LOCK_KEY`, held until it
    commits), so that claims run one after another and each sees the rows the one before it
    claimed as claimed: none then comes back short because others held its candidates."""

    def _lock(self, conn: Connection) -> None:
        """Take the claim lock in ``conn``'s transaction when claims are serialized."""
        if self.serialized:
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": CLAIM_LOCK_KEY})

    def claim(
        self,
        conn: Connection,
        node_id: str,
        limit: int,
        now: datetime,
        boost: timedelta,
        node_tags: frozenset[str] = frozenset(),
    ) -> list[ClaimedJob]:
        params = claim_parameters(node_id, limit, now, boost, node_tags, self.contention_margin)
        self._lock(conn)
        rows = conn.execute(claim_statement("boost" in params), params).all()
        return _claimed_jobs(plain_rows(rows), now)

    gates_claims = True

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
        params = claim_parameters(node_id, limit, now, boost, node_tags, self.contention_margin)
        params.update((name, gate[name]) for name in GATE_PARAMETERS)
        self._lock(conn)
        rows = plain_rows(
            conn.execute(claim_statement("boost" in params, gated=True), params).all()
        )
        first = rows[0]  # the probe's row: one even when nothing was claimed
        claimed = _claimed_jobs([r for r in rows if r.job_id is not None], now)
        return GatedClaim(first.state, bool(first.eligible), claimed)

    def driver_gated_claim(
        self,
        node_id: str,
        limit: int,
        now: datetime,
        boost: timedelta,
        node_tags: frozenset[str],
        gate: Mapping[str, Any],
        dialect: Dialect,
    ) -> Callable[[Any], GatedClaim]:
        """:meth:`gated_claim` on a bare psycopg connection: the same statement and
        parameters, its rows read as named tuples of the columns it returns."""
        params = claim_parameters(node_id, limit, now, boost, node_tags, self.contention_margin)
        params.update((name, gate[name]) for name in GATE_PARAMETERS)
        statement = _named_claim("boost" in params, gated=True, serialized=self.serialized)

        def work(driver: Any) -> GatedClaim:
            rows = _named_rows(statement, driver, params)
            first = rows[0]  # the probe's row: one even when nothing was claimed
            claimed = _claimed_jobs([r for r in rows if r.job_id is not None], now)
            return GatedClaim(first.state, bool(first.eligible), claimed)

        return work

    def driver_claim(
        self,
        node_id: str,
        limit: int,
        now: datetime,
        boost: timedelta,
        node_tags: frozenset[str],
        dialect: Dialect,
    ) -> Callable[[Any], list[ClaimedJob]]:
        """:meth:`claim` on a bare psycopg connection: the same statement and parameters, one
        round trip that commits on its own."""
        params = claim_parameters(node_id, limit, now, boost, node_tags, self.contention_margin)
        statement = _named_claim("boost" in params, gated=False, serialized=self.serialized)

        def work(driver: Any) -> list[ClaimedJob]:
            return _claimed_jobs(_named_rows(statement, driver, params), now)

        return work


@cache
def _named_claim(boosted: bool, *, gated: bool, serialized: bool = False) -> NamedStatement:
    """:func:`claim_statement` as a driver statement, planned at every call (and run after
    the claim lock when ``serialized``)."""
    sql = str(claim_statement(boosted, gated=gated).compile(dialect=_PSYCOPG))
    lock = CLAIM_LOCK_KEY if serialized else None
    return NamedStatement(sql, planned_per_call=True, serialized_by=lock)


def _named_rows(statement: NamedStatement, driver: Any, params: dict[str, Any]) -> list[Any]:
    """The rows of ``statement`` run on ``driver``, as named tuples of its columns."""
    found = statement.fetch(driver, params)
    make = _ROW_MAKERS.get(statement)
    if make is None:
        assert statement.columns is not None  # known once it has run
        make = _ROW_MAKERS[statement] = row_maker(statement.columns)
    return list(map(make, found))


_PSYCOPG = postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]

#: The named-tuple maker of each driver statement's rows (a statement's columns are fixed).
_ROW_MAKERS: dict[NamedStatement, Callable[[Iterable[Any]], Any]] = {}


class PostgresInsert(InsertStatements):
    """A batch insert as one statement per :data:`INSERT_CHUNK` jobs (:func:`insert_statement`),
    the chunks pipelined."""

    driver_insert_commits = True  # a NamedStatement commits on its own on an idle connection

    def insert(
        self, conn: Connection, fresh: Sequence[NewJob], now: datetime
    ) -> dict[str, uuid.UUID]:
        """One round trip for the whole batch (the generic insert needs four or more), plus a
        look-up of the holders when a key was taken. A batch of more than :data:`INSERT_CHUNK`
        jobs goes as several statements in one pipeline (one transaction), so the client
        encodes a chunk while the server inserts the one before."""
        if len(fresh) > INSERT_CHUNK:
            _, sent, went_in = self.send(conn, iter_chunks(fresh, INSERT_CHUNK), now, {})
        else:
            sent = fresh
            statement, params = _insert_params(fresh, now)
            went_in = conn.exec_driver_sql(statement, params).rowcount
        return self.holders_after(conn, sent, went_in)

    def driver_insert(
        self, fresh: Sequence[NewJob], now: datetime, dialect: Dialect
    ) -> Callable[[Any], int | None] | None:
        """:func:`insert_statement` as one autocommit statement, prepared by name on each
        connection (:class:`~ratchet_postgres.named_statement.NamedStatement`), for a batch of
        one chunk at most (a larger one is sent in pipelined chunks by :meth:`insert`); it
        returns the number of jobs that went in."""
        if len(fresh) > INSERT_CHUNK:
            return None
        statement, params = _insert_params(fresh, now)
        named = _named(statement)

        def work(driver: Any) -> int:
            return named.execute(driver, params)

        return work

    def send(
        self,
        conn: Connection,
        chunks: Iterable[Sequence[NewJob]],
        now: datetime,
        first: dict[str, NewJob],
    ) -> tuple[list[NewJob], list[NewJob], int]:
        """Send one insert per chunk through psycopg's pipeline mode without waiting for the
        server in between; in a transaction of its own on an autocommit connection, else in
        the caller's. Each chunk sends its jobs that are the first of their key (recorded in
        ``first``). Returns every job drawn, the jobs sent and how many went in. Errors are
        raised as SQLAlchemy would raise them."""
        raw: Any = conn.connection.driver_connection  # a psycopg.Connection
        jobs: list[NewJob] = []
        fresh: list[NewJob] = []
        cursors: list[Any] = []
        statement = None
        try:
            with raw.pipeline(), raw.transaction() if raw.autocommit else nullcontext():
                for chunk in chunks:
                    jobs.extend(chunk)
                    new = first_of_each_key(chunk, first)
                    if not new:
                        continue
                    fresh.extend(new)
                    statement, params = _insert_params(new, now)
                    cursor = raw.cursor()
                    cursor.execute(statement, params)
                    cursors.append(cursor)
            went_in = sum(c.rowcount for c in cursors)
        except psycopg.Error as exc:
            disconnected = conn.dialect.is_disconnect(exc, raw, None)
            if disconnected:
                conn.invalidate()
            raise DBAPIError.instance(
                statement,
                None,
                exc,
                psycopg.Error,
                dialect=conn.dialect,
                connection_invalidated=disconnected,
            ) from exc
        finally:
            for cursor in cursors:
                cursor.close()
        return jobs, fresh, went_in

    def insert_chunks(
        self, conn: Connection, chunks: Iterable[Sequence[NewJob]], now: datetime
    ) -> list[InsertResult]:
        """The results of inserting ``chunks`` as one batch, each chunk sent as it is drawn."""
        first: dict[str, NewJob] = {}
        jobs, fresh, went_in = self.send(conn, chunks, now, first)
        return insert_results(jobs, first, self.holders_after(conn, fresh, went_in))


class PostgresOutcomes(OutcomeStatements):
    """The fenced outcome write as one statement (:func:`record_statement`)."""

    def write(
        self, conn: Connection, node_id: str, planned: Sequence[PlannedOutcome]
    ) -> Collection[uuid.UUID]:
        """One round trip for the whole batch (the generic write needs one per outcome and
        table)."""
        params = _outcome_params(node_id, planned)
        return set(conn.execute(record_statement(), params).scalars())

    def driver_write(
        self, node_id: str, planned: Sequence[PlannedOutcome], dialect: Dialect
    ) -> Callable[[Any], Collection[uuid.UUID]]:
        """:meth:`write`'s statement on a bare psycopg connection."""
        params = _outcome_params(node_id, planned)

        def work(driver: Any) -> Collection[uuid.UUID]:
            rows = _named_record().fetch(driver, params)
            return [row[0] for row in rows]  # one row per written job

        return work


def _outcome_params(node_id: str, planned: Sequence[PlannedOutcome]) -> dict[str, Any]:
    """The parameters of :func:`record_statement` for ``planned``: one JSON array each."""
    pending_micros = _Converted(to_micros)  # most outcomes of a batch are due back at one time
    records = [
        (  # in OUTCOME_RECORD's order
            _uuid_text(p.outcome.job_id),
            p.outcome.epoch,
            p.outcome.kind,  # a str enum: encoded as its value
            p.terminal_status,
            p.attempts_added,
            p.outcome.error,
            p.outcome.traceback,
            p.outcome.result,
            to_micros(p.outcome.finished_at),
            pending_micros[p.pending_at],
        )
        for p in planned
    ]
    return {"outcomes": _JSON.encode(records), "node": node_id}


@cache
def _named_record() -> NamedStatement:
    """:func:`record_statement` as a driver statement, planned at every call."""
    return NamedStatement(str(record_statement().compile(dialect=_PSYCOPG)), planned_per_call=True)


class PostgresStore(SqlStore):
    """:class:`~ratchet.sql.store.SqlStore` on PostgreSQL with one-statement hot paths.

    ``serialize_claims`` (or ``?serialize_claims=on|off`` in the URL; on by default): every
    claim takes one advisory lock first, so the claims of many nodes take turns instead of
    racing for the same oldest jobs (:attr:`PostgresClaim.serialized`).
    """

    atomic_insert = True
    atomic_record = True
    insert_chunk_size = INSERT_CHUNK

    def __init__(
        self,
        url: str,
        dialect: PostgresDialect | None = None,
        *,
        serialize_claims: bool | None = None,
        **engine_options: Any,
    ) -> None:
        dialect = dialect or PostgresDialect()
        opened_with = normalize_url(url)
        url, self.pgbouncer = split_pgbouncer(opened_with)
        """PgBouncer's pool mode when the URL says PgBouncer is in between (None: direct)."""
        url, serialized_in_url = split_serialize_claims(url)
        if self.pgbouncer == "transaction":
            # A server connection serves one transaction, then other clients: statements
            # prepared on it by name would be missing (or somebody else's) on the next one.
            options = {"prepare_threshold": None, **engine_options.get("connect_args", {})}
            engine_options["connect_args"] = options
        if "connect_args" in engine_options:  # merge into the defaults instead of replacing them
            defaults = dialect.engine_kwargs(url).get("connect_args", {})
            engine_options["connect_args"] = {**defaults, **engine_options["connect_args"]}
        super().__init__(url, dialect, **engine_options)
        # The argument wins over the URL's parameter; both unset: on.
        self.pg_claim.serialized = (
            serialized_in_url if serialize_claims is None else serialize_claims
        )
        # Keep the switches in the URL others reopen this store from (child processes, more
        # nodes, the coordinator's check): they must connect by the same rules.
        self.url = opened_with

    def make_hot_paths(self) -> HotPaths:
        self.pg_insert = PostgresInsert(self.dialect)
        self.pg_claim = PostgresClaim(self.dialect)
        return HotPaths(self.pg_claim, self.pg_insert, PostgresOutcomes(self.dialect))

    def insert_job_chunks(
        self, chunks: Iterable[Sequence[NewJob]], *, now: datetime
    ) -> list[InsertResult]:
        """:meth:`insert_jobs` of ``chunks``, each sent as soon as it is built (pipelined, in
        one transaction): the server inserts one chunk while the caller builds the next."""
        replay = _Replay(chunks)
        try:
            return self._run(
                lambda conn: self.pg_insert.insert_chunks(conn, iter(replay), now),
                autocommit=True,
            )
        except DBAPIError as exc:
            self._raise_duplicate(exc, replay.jobs())
            raise
