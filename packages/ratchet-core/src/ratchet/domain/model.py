"""Values that cross the store boundary (frozen dataclasses, no behaviour beyond checks)."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Generic, NoReturn, TypeVar

from ratchet.domain.affinity import NO_AFFINITY, Affinity
from ratchet.domain.lifecycle import JobPriority, JobStatus
from ratchet.domain.options import BackoffPolicy, validate_option_text
from ratchet.domain.quick_init import quick_init
from ratchet.domain.takeover import TakeoverPolicy
from ratchet.domain.text import is_storable_text, storable_text
from ratchet.domain.workflow import FlowEffect

T = TypeVar("T")


@quick_init
@dataclass(frozen=True)
class NewJob:
    """A job about to be inserted. ``status`` is PENDING (or WAITING for signal jobs)."""

    job_id: uuid.UUID
    target: str
    payload: str
    priority: JobPriority
    max_retries: int
    backoff: BackoffPolicy
    backoff_delay: timedelta
    timeout: timedelta | None
    scheduled_time: datetime
    created_at: datetime
    idempotency_key: str
    business_key: str | None = None
    tags: tuple[str, ...] = ()
    params: Mapping[str, str] = field(default_factory=dict)
    executor: str | None = None
    status: JobStatus = JobStatus.PENDING
    resource_name: str | None = None
    """The resource whose permit the job needs to execute (None: none)."""
    recurring_master_id: uuid.UUID | None = None
    """The recurring master this job is an occurrence of (None: not a recurring fire)."""
    stall_timeout: timedelta | None = None
    """No progress for this long makes a RUNNING job TIMED_OUT (None: the watcher's default,
    applied only once the job reports progress)."""
    trace_context: str | None = None
    """The trace the submission ran in (W3C ``traceparent`` / ``tracestate`` as a JSON object,
    at most :data:`MAX_TRACE_CONTEXT` characters); None: submitted without tracing."""
    caller_principal: str | None = None
    """Who submitted the job (stored once, never changed; None: anonymous)."""
    affinity: Affinity = NO_AFFINITY
    """The node tags a node must have (and must not have) to run the job."""
    schedule_to_start: timedelta | None = None
    """A job not started this long after it is due fails (T14; None: no deadline)."""
    takeover_policy: TakeoverPolicy | None = None
    """What a takeover of a stalled attempt does (None: resume from the last checkpoint)."""

    @property
    def keyed_by_id(self) -> bool:
        """Whether the job's idempotency key is its own id (a builder's default key). Such a
        key is held by the job's row itself (its primary key), so a plain submission writes no
        key row for it, and the key lasts as long as the job."""
        return is_own_id_key(self.idempotency_key, self.job_id)


def is_own_id_key(key: str, job_id: uuid.UUID) -> bool:
    """Whether ``key`` is the own key of the job ``job_id``: its id as ``str()`` writes it."""
    return key == str(job_id)


def own_id(key: str) -> uuid.UUID | None:
    """The id of the job that ``key`` would be the own key of (:attr:`NewJob.keyed_by_id`):
    ``key`` read as a UUID in its canonical form; None when it is not one."""
    try:
        job_id = uuid.UUID(key)
    except ValueError:
        return None
    return job_id if is_own_id_key(key, job_id) else None


#: The longest trace context a job stores (a traceparent and a full 512-character tracestate fit).
MAX_TRACE_CONTEXT = 1024


AttemptKey = tuple[int, int]
"""A job under one epoch as the worker's tables of running attempts key it (:func:`attempt_key`)."""


def attempt_key(job_id: uuid.UUID, epoch: int) -> AttemptKey:
    """A job under one epoch as the worker's tables of running attempts key it: a tuple of
    ints hashes in C, where a ``UUID`` hashes through a Python call (and each job is looked up
    in those tables a dozen times)."""
    return (job_id.int, epoch)


@quick_init
@dataclass(frozen=True)
class ClaimedJob:
    """A job this node now owns (status RUNNING) under ``epoch``."""

    job_id: uuid.UUID
    epoch: int
    attempt: int
    """1-based number of the attempt about to run."""
    target: str
    payload: str
    priority: JobPriority
    max_retries: int
    backoff: BackoffPolicy
    backoff_delay: timedelta
    timeout: timedelta | None
    scheduled_time: datetime
    claimed_at: datetime
    params: Mapping[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    executor: str | None = None
    resource_name: str | None = None
    takeovers: int = 0
    """How many times the job was taken over from a stalled or dead node (0: a fresh claim)."""
    flow_effects: bool = True
    """False when the store knows that this job's end triggers nothing else (no callback, no
    dependent, no batch or workflow role): its outcome then needs no follow-up lookup."""
    trace_context: str | None = None
    """As :attr:`NewJob.trace_context`: the trace that submitted the job."""
    caller_principal: str | None = None
    """Who submitted the job (the principal its execution is authorized for)."""

    def __post_init__(self) -> None:
        # Set at construction: the cached property's own first read takes a lock.
        self.__dict__["key"] = attempt_key(self.job_id, self.epoch)

    @cached_property
    def key(self) -> AttemptKey:
        """This claim's :func:`attempt_key`."""
        return attempt_key(self.job_id, self.epoch)


class OutcomeKind(enum.StrEnum):
    """How an attempt ended, as the store records it."""

    SUCCEEDED = "SUCCEEDED"
    """RUNNING -> SUCCEEDED, result stored."""
    RETRY = "RETRY"
    """RUNNING -> PENDING at ``retry_at``; the failure counts as an attempt."""
    DEAD = "DEAD"
    """RUNNING -> FAILED (the DLQ); the failure counts as an attempt."""
    RESCHEDULE = "RESCHEDULE"
    """RUNNING -> PENDING at ``retry_at`` without consuming a retry (breaker open, no permit)."""


@quick_init
@dataclass(frozen=True)
class Outcome:
    """The end of one attempt, written by the owner node under its epoch (fenced)."""

    job_id: uuid.UUID
    epoch: int
    attempt: int
    kind: OutcomeKind
    started_at: datetime
    finished_at: datetime
    result: str | None = None
    error: str | None = None
    retry_at: datetime | None = None
    flow_effects: bool = True
    """As :attr:`ClaimedJob.flow_effects` (True when unknown: the store then looks)."""
    traceback: str | None = None
    """Where the attempt's error was raised (bounded; failures only)."""

    def __post_init__(self) -> None:
        # Whatever a job raised or returned, the outcome must be writable on every store.
        if self.error is not None and not is_storable_text(self.error):
            object.__setattr__(self, "error", storable_text(self.error))
        if self.traceback is not None and not is_storable_text(self.traceback):
            object.__setattr__(self, "traceback", storable_text(self.traceback))
        if self.result is not None and not is_storable_text(self.result):
            object.__setattr__(self, "result", storable_text(self.result))


@dataclass(frozen=True)
class OutcomeWrite:
    """What one outcome write did: the outcomes it refused, and what must follow its commit."""

    fenced: tuple[uuid.UUID, ...] = ()
    """Jobs whose outcome was fenced out (no longer RUNNING under that node and epoch)."""
    effects: tuple[FlowEffect, ...] = ()
    """The after-commit effects of the outcomes that applied (callbacks, flow events, wakeups),
    in the order the write produced them."""


@dataclass(frozen=True)
class FlowWrite(Generic[T]):
    """The answer of a store call that may end jobs (``value``), and what must follow its
    commit (``effects``: what the ends it caused trigger in flows)."""

    value: T
    effects: tuple[FlowEffect, ...] = ()

    def __bool__(self) -> NoReturn:
        # ``if store.cancel_job(...)`` must not silently hold for a False answer.
        raise TypeError("a FlowWrite has no truth value: read its .value")


@dataclass(frozen=True)
class JobRecord:
    """Everything known about one job, live or terminal."""

    job_id: uuid.UUID
    status: JobStatus
    target: str
    payload: str
    priority: JobPriority
    max_retries: int
    attempts: int
    """Failed attempts so far (see :attr:`attempts_started` for the attempts made)."""
    backoff: BackoffPolicy
    backoff_delay: timedelta
    timeout: timedelta | None
    scheduled_time: datetime | None
    created_at: datetime
    idempotency_key: str
    business_key: str | None
    tags: tuple[str, ...]
    params: Mapping[str, str]
    epoch: int
    picked_by: str | None
    picked_at: datetime | None
    paused_from: JobStatus | None
    last_error: str | None
    result: str | None
    terminated_at: datetime | None
    superseded_by: uuid.UUID | None
    executor: str | None
    resource_name: str | None = None
    recurring_master_id: uuid.UUID | None = None
    stall_timeout: timedelta | None = None
    """As :attr:`NewJob.stall_timeout`."""
    caller_principal: str | None = None
    """Who submitted the job (None: anonymous)."""
    encryption_key_id: str | None = None
    """The key the stored arguments are sealed with (None: stored in plain JSON)."""
    affinity: Affinity = NO_AFFINITY
    """As :attr:`NewJob.affinity`."""
    schedule_to_start: timedelta | None = None
    """As :attr:`NewJob.schedule_to_start`."""
    takeover_policy: TakeoverPolicy | None = None
    """As :attr:`NewJob.takeover_policy`."""

    @property
    def attempts_started(self) -> int:
        """Attempts begun so far, a running one included: the ``JobContext.attempt`` of the
        job's latest run (0: it never ran). This is what the CLI and the demo call "attempts".

        ``attempts`` counts the failed ones only; a run handed back without counting (a drain,
        a reschedule for an open breaker or a missing permit) is not a new attempt.
        """
        ran_now = self.status in (JobStatus.SUCCEEDED, JobStatus.RUNNING, JobStatus.TIMED_OUT)
        return self.attempts + (1 if ran_now else 0)


@dataclass(frozen=True)
class AttemptRecord:
    """One row of the attempt history."""

    job_id: uuid.UUID
    attempt: int
    epoch: int
    node_id: str
    started_at: datetime
    finished_at: datetime | None
    outcome: str
    error: str | None
    traceback: str | None = None
    """Where the attempt's error was raised, when it failed (newest frames kept)."""


@dataclass(frozen=True)
class JobFilter:
    """Which jobs a bulk operation or listing applies to. Empty fields match everything."""

    statuses: tuple[JobStatus, ...] = ()
    tag: str | None = None
    target: str | None = None
    created_before: datetime | None = None
    caller_principal: str | None = None
    """Only jobs submitted by this principal (an authorization policy narrows listings with it;
    ``""`` matches no job)."""

    def __post_init__(self) -> None:
        if self.tag is not None:
            validate_option_text(self.tag, "tag")
        if self.target is not None:
            validate_option_text(self.target, "target")


@dataclass(frozen=True)
class NodeRecord:
    """A worker process as registered in ``scheduler_node``."""

    node_id: str
    started_at: datetime
    heartbeat_at: datetime
    state: str
    node_name: str | None = None
    """Stable across restarts (the configured name, else the host); None for legacy rows."""
    host: str | None = None
    pid: int | None = None
    slots: int | None = None
    tags: frozenset[str] = frozenset()
    """The node tags it declared (see :mod:`ratchet.domain.affinity`)."""
    breakers: Mapping[str, str] = field(default_factory=dict)
    """Its circuit breakers that were not closed at its last heartbeat: service name to
    ``OPEN`` or ``HALF_OPEN`` (empty: all closed)."""
