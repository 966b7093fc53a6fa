"""The metrics port: what a worker measures, as plain values an exporter turns into its format.

Two observer hooks carry them (see ``docs/observability.md``):

- ``ratchet_metrics_observed(measurements)``: counter increments and histogram observations,
  in one batch per poll and per outcome write (never one hook call per job);
- ``ratchet_metrics_sampled(sample)``: gauges and running totals, sampled every
  ``WorkerConfig.metrics_interval`` on the maintenance thread. The gauges that need database
  queries are sampled by one node of the cluster at a time (the holder of a lease), the others
  send ``cluster=None``.

Everything a metric is (name, type, labels, help, buckets) is in :data:`CATALOGUE`, so an
exporter needs nothing else. Nothing here is computed unless a plugin implements a hook.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple


class MetricType(enum.StrEnum):
    """How a metric's values combine."""

    COUNTER = "counter"
    """Only goes up. A measurement adds to it; a sampled one is the running total."""
    GAUGE = "gauge"
    """A value now (sampled)."""
    HISTOGRAM = "histogram"
    """Observations counted into ``buckets`` (upper bounds, ascending)."""


@dataclass(frozen=True, eq=False)
class Metric:
    """One metric of the catalogue. Counter names end in ``_total``, durations in ``_seconds``.

    Compared and hashed by identity (each is one object of :data:`CATALOGUE`): exporters key
    their series by it on every measurement.
    """

    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    scope: str = "worker"
    """``worker``: this process's own; ``cluster``: sampled once per cluster (lease holder)."""


class Measurement(NamedTuple):
    """One value of ``metric`` for ``labels`` (in the order of ``metric.labels``)."""

    metric: Metric
    labels: tuple[str, ...]
    value: float


@dataclass(frozen=True)
class MetricsSample:
    """What one worker sampled at ``at``.

    ``local``: this worker's gauges and running totals (counters that only go up, as totals
    since the worker started). ``cluster``: the database-wide gauges, or None when another node
    holds the sampling lease (or the store cannot answer): export nothing for them then, so that
    summing over the scraped workers never counts a queue twice.
    """

    node_id: str
    at: datetime
    local: tuple[Measurement, ...]
    cluster: tuple[Measurement, ...] | None


_C, _G, _H = MetricType.COUNTER, MetricType.GAUGE, MetricType.HISTOGRAM
_TP = ("target", "priority")
#: Seconds: from a millisecond to ten minutes.
DURATION_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
    600,
)
#: Seconds of a store call: a tenth of a millisecond to ten seconds.
STORE_BUCKETS = (
    0.0001,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    10,
)
BATCH_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000)

JOBS_STARTED = Metric(
    "ratchet_jobs_started_total", _C, "Attempts started (claimed or taken over).", _TP
)
JOBS_COMPLETED = Metric(
    "ratchet_jobs_completed_total",
    _C,
    "Attempts whose outcome was written, by outcome: succeeded, retried, dead_lettered, "
    "rescheduled.",
    ("target", "outcome"),
)
JOBS_SUCCEEDED = Metric("ratchet_jobs_succeeded_total", _C, "Attempts that succeeded.", _TP)
JOBS_FAILED = Metric(
    "ratchet_jobs_failed_total", _C, "Attempts that failed (a retry or the DLQ follows).", _TP
)
JOBS_RETRIED = Metric("ratchet_jobs_retried_total", _C, "Failed attempts that will retry.", _TP)
JOBS_DEAD_LETTERED = Metric(
    "ratchet_jobs_dead_lettered_total", _C, "Failed attempts that ended the job (the DLQ).", _TP
)
JOBS_TIMED_OUT = Metric(
    "ratchet_jobs_timed_out_total",
    _C,
    "Attempts that ran past their deadline or were stopped.",
    _TP,
)
JOBS_RESCHEDULED = Metric(
    "ratchet_jobs_rescheduled_total",
    _C,
    "Attempts rescheduled without using a retry (breaker open, no permit).",
    _TP,
)
JOBS_CANCELED = Metric(
    "ratchet_jobs_canceled_total", _C, "Jobs canceled by this process (from the events)."
)
RUN_DURATION = Metric(
    "ratchet_job_run_duration_seconds",
    _H,
    "Wall time of an attempt, from its start to its end.",
    ("target",),
    DURATION_BUCKETS,
)
SCHEDULE_TO_START = Metric(
    "ratchet_job_schedule_to_start_seconds",
    _H,
    "From the time a job was due to the claim that started it.",
    ("priority",),
    DURATION_BUCKETS,
)
CLAIMS = Metric("ratchet_claims_total", _C, "Polls that asked the store for work.")
CLAIMED_JOBS = Metric("ratchet_claimed_jobs_total", _C, "Jobs those polls claimed.")
OUTCOME_BATCH_SIZE = Metric(
    "ratchet_outcome_write_batch_size",
    _H,
    "Outcomes written per fenced outcome write.",
    (),
    BATCH_BUCKETS,
)
OUTCOME_WRITE_SECONDS = Metric(
    "ratchet_outcome_write_seconds",
    _H,
    "Latency of one fenced outcome write (one transaction).",
    (),
    STORE_BUCKETS,
)
STORE_OPERATION_SECONDS = Metric(
    "ratchet_store_operation_seconds",
    _H,
    "Latency of the worker's store calls by operation: acquire_work (the poll: takeovers, "
    "reserved jobs, claim), record_outcomes, and the sampler's queries.",
    ("operation",),
    STORE_BUCKETS,
)
STORE_ERRORS = Metric(
    "ratchet_store_transient_errors_total",
    _C,
    "Store calls of the poller and the writer that failed and were retried.",
)
WAKEUPS_PUBLISHED = Metric(
    "ratchet_wakeups_published_total",
    _C,
    "Wake-up hints this process's coordinator published (broker coordinators only).",
)
WAKEUPS_RECEIVED = Metric("ratchet_wakeups_received_total", _C, "Wake-up hints this worker got.")
HINT_CLAIMS = Metric(
    "ratchet_hint_claims_total",
    _C,
    "Claims this worker planned for other processes' wake-up hints, by what became of them:"
    " made, skipped (another node reported the jobs claimed) or reported (its own claim took"
    " what it saw and told the others).",
    ("decision",),
)
TAKEOVERS = Metric("ratchet_takeovers_total", _C, "Stalled jobs of other nodes taken over here.")
FENCED_WRITES = Metric(
    "ratchet_fenced_writes_total",
    _C,
    "Outcome and progress writes refused because the node no longer owned the job.",
)
SLOTS = Metric("ratchet_worker_slots", _G, "This worker's slots, busy or free.", ("state",))
BREAKER_STATE = Metric(
    "ratchet_circuit_breaker_state",
    _G,
    "1 for the state each circuit breaker of this process is in (closed, open, half_open), from "
    "its last change.",
    ("service", "state"),
)
QUEUE_DEPTH = Metric(
    "ratchet_queue_depth",
    _G,
    "Live jobs by status and priority.",
    ("status", "priority"),
    scope="cluster",
)
OLDEST_PENDING_AGE = Metric(
    "ratchet_oldest_pending_age_seconds",
    _G,
    "How long the oldest due PENDING job has been due (0: none waits).",
    scope="cluster",
)
HEARTBEAT_AGE = Metric(
    "ratchet_node_heartbeat_age_seconds",
    _G,
    "Seconds since each registered node's last heartbeat.",
    ("node", "state"),
    scope="cluster",
)
PERMITS_IN_USE = Metric(
    "ratchet_resource_permits_in_use",
    _G,
    "Resource permits held now, by resource.",
    ("resource",),
    scope="cluster",
)
PERMITS_LIMIT = Metric(
    "ratchet_resource_permits_limit",
    _G,
    "The limit of each resource.",
    ("resource",),
    scope="cluster",
)
CLUSTER_SAMPLER = Metric(
    "ratchet_cluster_sampler",
    _G,
    "1 on the worker that sampled the cluster gauges (the lease holder), else absent.",
    scope="cluster",
)

CATALOGUE: tuple[Metric, ...] = (
    JOBS_STARTED,
    JOBS_COMPLETED,
    JOBS_SUCCEEDED,
    JOBS_FAILED,
    JOBS_RETRIED,
    JOBS_DEAD_LETTERED,
    JOBS_TIMED_OUT,
    JOBS_RESCHEDULED,
    JOBS_CANCELED,
    RUN_DURATION,
    SCHEDULE_TO_START,
    CLAIMS,
    CLAIMED_JOBS,
    OUTCOME_BATCH_SIZE,
    OUTCOME_WRITE_SECONDS,
    STORE_OPERATION_SECONDS,
    STORE_ERRORS,
    WAKEUPS_PUBLISHED,
    WAKEUPS_RECEIVED,
    HINT_CLAIMS,
    TAKEOVERS,
    FENCED_WRITES,
    SLOTS,
    BREAKER_STATE,
    QUEUE_DEPTH,
    OLDEST_PENDING_AGE,
    HEARTBEAT_AGE,
    PERMITS_IN_USE,
    PERMITS_LIMIT,
    CLUSTER_SAMPLER,
)

OTHER = "other"
"""The label value of every target beyond the configured set or the cap."""


class TargetLabels:
    """Keeps the ``target`` label bounded.

    With ``allowed``, exactly those targets keep their name. Without, the first ``cap`` distinct
    targets seen keep theirs. Every other target becomes :data:`OTHER`. Thread-safe.
    """

    def __init__(self, allowed: Iterable[str] | None = None, cap: int = 100) -> None:
        if cap < 0:
            raise ValueError(f"the target label cap must be 0 or more, got {cap}")
        self._allowed = None if allowed is None else frozenset(allowed)
        self._cap = cap
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, target: str) -> str:
        """The label value for ``target``."""
        if self._allowed is not None:
            return target if target in self._allowed else OTHER
        if target in self._seen:
            return target
        with self._lock:
            if len(self._seen) < self._cap:
                self._seen.add(target)
                return target
        return OTHER
