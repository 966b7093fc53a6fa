"""Cluster liveness and the stalled-job watcher, as pure rules (docs/clustering.md).

The watcher state machine (docs/clustering.md, rows T1-T14) decided in one place: the SQL store
applies these rules as conditional updates, and the tests use the same functions as their oracle.
No I/O and no clock reads: ``now`` is always a parameter.

Deadlines (our names):

- ``queued_stall`` (D_q): a job reserved by a node (QUEUED) that has not started it goes back to
  PENDING, claimable by anyone.
- ``running_stall`` (D1): a RUNNING job without progress becomes TIMED_OUT. Only for jobs that
  report progress (any checkpoint or touch) or have their own ``with_stall_timeout``.
- ``timed_out_grace`` (D2): the owner alone may revive a TIMED_OUT job; after it, another node
  incarnation may take it over (at once when the owner node is dead).
- ``takeover_window`` (D3): how long a takeover-eligible job waits for a taker before it fails
  through its retry policy.
- ``dead_after`` (Dn): a node whose heartbeat is older is marked DEAD.
"""

from __future__ import annotations

import enum
import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ratchet.domain.errors import ConfigurationError, RatchetError
from ratchet.domain.lifecycle import JobStatus
from ratchet.domain.takeover import TakeoverPolicy, missed_start
from ratchet.domain.workflow import FlowEffect


class NodeState(enum.StrEnum):
    """The state of one node incarnation in ``scheduler_node``."""

    ALIVE = "ALIVE"
    """Heart-beating, claiming and taking over."""
    DRAINING = "DRAINING"
    """Shutting down: runs what it has, claims and takes over nothing."""
    DEAD = "DEAD"
    """Declared dead (silent past ``dead_after``, drained, or replaced by a newer incarnation).
    Its jobs may be taken over at once; its own writes are refused."""


#: States whose owner still counts as alive (its jobs are not orphaned).
LIVE_NODE_STATES: tuple[NodeState, ...] = (NodeState.ALIVE, NodeState.DRAINING)


@dataclass(frozen=True)
class WatcherSettings:
    """Deadlines and caps of the watcher (defaults in docs/clustering.md)."""

    queued_stall: timedelta = timedelta(seconds=60)
    running_stall: timedelta = timedelta(seconds=60)
    timed_out_grace: timedelta = timedelta(seconds=60)
    takeover_window: timedelta = timedelta(seconds=120)
    max_takeovers: int = 3
    dead_after: timedelta = timedelta(seconds=30)
    dead_node_retention: timedelta = timedelta(hours=1)
    """How long DEAD node rows stay visible (``list_nodes``) before they are deleted."""

    def __post_init__(self) -> None:
        for name in (
            "queued_stall",
            "running_stall",
            "timed_out_grace",
            "takeover_window",
            "dead_after",
        ):
            value = getattr(self, name)
            if not isinstance(value, timedelta) or value <= timedelta(0):
                raise ConfigurationError(
                    f"watcher {name} must be a positive timedelta, got {value!r}"
                )
        if isinstance(self.max_takeovers, bool) or not isinstance(self.max_takeovers, int):
            raise ConfigurationError(f"max_takeovers must be an int, got {self.max_takeovers!r}")
        if self.max_takeovers < 0:
            raise ConfigurationError(f"max_takeovers must be >= 0, got {self.max_takeovers}")
        if self.dead_node_retention < timedelta(0):
            raise ConfigurationError("dead_node_retention must not be negative")


@dataclass(frozen=True)
class NodeInfo:
    """What a node incarnation registers about itself."""

    node_id: str
    """This incarnation (unique: name, pid and a random suffix)."""
    node_name: str
    """Stable across restarts: the configured name, else the host name."""
    host: str
    pid: int
    slots: int
    """Execution slots: RUNNING + TIMED_OUT jobs it may own at once."""
    prefetch: int = 0
    """QUEUED (reserved, not started) jobs it may hold besides."""
    tags: frozenset[str] = frozenset()
    """Its node tags: it claims and takes over only jobs whose affinity they satisfy."""


@dataclass(frozen=True)
class JobLiveness:
    """The watcher's view of one live job (a row of ``scheduler_job_queue`` plus its options)."""

    job_id: uuid.UUID
    status: JobStatus
    epoch: int
    picked_by: str | None
    picked_at: datetime | None
    last_progress_at: datetime | None
    timed_out_at: datetime | None
    takeovers: int
    attempts: int
    stall_timeout: timedelta | None = None
    takeover_policy: TakeoverPolicy | None = None
    """None: :attr:`TakeoverPolicy.RESUME`."""
    start_by: datetime | None = None
    """When a job that never started must start (T14; None: no deadline)."""

    @property
    def last_activity(self) -> datetime | None:
        """The later of the grant of ownership (claim, start, takeover) and the last progress."""
        if self.last_progress_at is None:
            return self.picked_at
        if self.picked_at is None or self.last_progress_at > self.picked_at:
            return self.last_progress_at
        return self.picked_at

    @property
    def watched_for_stall(self) -> bool:
        """Whether the running-stall rule applies (it reports progress or has a stall timeout)."""
        return self.stall_timeout is not None or self.last_progress_at is not None


class WatcherAction(enum.StrEnum):
    """What the watcher does to one job now."""

    NONE = "NONE"
    REVOKE = "REVOKE"
    """T4 / T13: a reserved QUEUED job goes back to PENDING (queue stall, or its node is dead)."""
    STALL = "STALL"
    """T6: RUNNING without progress past its stall deadline -> TIMED_OUT (``timed_out_at = now``)."""
    ORPHAN = "ORPHAN"
    """T13: RUNNING on a dead node -> TIMED_OUT, eligible for takeover at once."""
    EXPIRE = "EXPIRE"
    """T9: TIMED_OUT and nobody took it over in the window (or the takeover cap is reached, or
    its takeover policy is FAIL and it became eligible) -> FAILED through the retry policy (a
    retry while retries remain, else the DLQ)."""
    MISSED_START = "MISSED_START"
    """T14: PENDING, never started, and past its schedule-to-start deadline -> FAILED (the DLQ:
    no retry, it never ran)."""


def stall_limit(job: JobLiveness, settings: WatcherSettings) -> timedelta:
    """The running-stall deadline of ``job``: its own stall timeout, else D1."""
    return job.stall_timeout if job.stall_timeout is not None else settings.running_stall


def classify(
    job: JobLiveness, now: datetime, settings: WatcherSettings, *, owner_alive: bool
) -> WatcherAction:
    """The watcher transition that applies to ``job`` at ``now`` (docs/clustering.md, the T rows)."""
    if job.status is JobStatus.QUEUED and job.picked_by is not None:
        if not owner_alive:
            return WatcherAction.REVOKE
        if job.picked_at is not None and now - job.picked_at >= settings.queued_stall:
            return WatcherAction.REVOKE
        return WatcherAction.NONE
    if job.status is JobStatus.RUNNING:
        if not owner_alive:
            return WatcherAction.ORPHAN
        activity = job.last_activity
        if (
            job.watched_for_stall
            and activity is not None
            and now - activity >= stall_limit(job, settings)
        ):
            return WatcherAction.STALL
        return WatcherAction.NONE
    if job.status is JobStatus.TIMED_OUT and job.timed_out_at is not None:
        waited = now - job.timed_out_at
        if waited >= settings.timed_out_grace + settings.takeover_window:
            return WatcherAction.EXPIRE
        if waited >= settings.timed_out_grace and (
            job.takeovers >= settings.max_takeovers or job.takeover_policy is TakeoverPolicy.FAIL
        ):
            return WatcherAction.EXPIRE
    if job.status is JobStatus.PENDING and missed_start(job.start_by, now):
        return WatcherAction.MISSED_START
    return WatcherAction.NONE


def takeover_eligible(
    job: JobLiveness,
    now: datetime,
    settings: WatcherSettings,
    *,
    owner_alive: bool,
    taker: str,
) -> bool:
    """T8: whether node incarnation ``taker`` may take ``job`` over now.

    TIMED_OUT past the grace (at once when its owner is dead), inside the takeover window, under
    the takeover cap, and owned by another incarnation. Free slots are the caller's business.
    """
    if job.status is not JobStatus.TIMED_OUT or job.timed_out_at is None:
        return False
    if job.takeover_policy is TakeoverPolicy.FAIL:
        return False
    if job.picked_by == taker or job.takeovers >= settings.max_takeovers:
        return False
    waited = now - job.timed_out_at
    if waited >= settings.timed_out_grace + settings.takeover_window:
        return False
    return waited >= settings.timed_out_grace or not owner_alive


def orphaned_timed_out_at(now: datetime, settings: WatcherSettings) -> datetime:
    """``timed_out_at`` given to a job whose owner died or drained: eligible for takeover now."""
    return now - settings.timed_out_grace


@dataclass(frozen=True)
class StalledJob:
    """A TIMED_OUT job the watcher fails (T9); the engine decides retry or DLQ."""

    job_id: uuid.UUID
    epoch: int
    attempt: int
    """The 1-based attempt that stalled."""
    owner: str
    started_at: datetime
    timed_out_at: datetime
    takeovers: int
    max_retries: int
    backoff: str
    backoff_ms: int
    reason: str


class JobStalledError(RatchetError):
    """The attempt stalled (no progress, or its node died) and no node took it over in time."""


@dataclass(frozen=True)
class Checkpoint:
    """The last checkpoint a job wrote: where a resumed run starts."""

    step: int
    data: Any
    """JSON-decoded."""
    epoch: int
    """The epoch of the run that wrote it."""
    at: datetime


def check_checkpoint(previous: Checkpoint | None, epoch: int, step: int, data: Any) -> str:
    """Validate a checkpoint write and return its data as JSON text.

    :raises ValueError: ``step`` is negative or not an int, goes backwards within one epoch, or
        ``data`` is not JSON-serializable.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"checkpoint step must be a non-negative int, got {step!r}")
    if previous is not None and previous.epoch == epoch and step < previous.step:
        raise ValueError(
            f"checkpoint step went backwards within epoch {epoch}: {previous.step} -> {step}"
        )
    try:
        return json.dumps(data, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"checkpoint data must be JSON-serializable: {exc}") from exc


def heartbeat_delay(base: timedelta, dead_after: timedelta, utilisation: float) -> timedelta:
    """The next heartbeat delay: ``base`` under full load, up to twice that when idle, never
    more than a third of ``dead_after``.

    An idle node has nothing to lose if it is declared dead late, so it beats less often and
    spares the database (a fleet of idle workers); a busy node beats at the configured rate so
    that a slow beat still leaves a margin before ``dead_after``.
    """
    load = min(1.0, max(0.0, utilisation))
    delay = base * (2.0 - load)
    return min(delay, dead_after / 3)


@dataclass(frozen=True)
class AcquiredWork:
    """What one poll of a node obtained, in the order it must start them."""

    state: NodeState | None
    """The node's state when it polled (None: it has no row); only ALIVE obtains work."""
    taken: tuple[Any, ...] = ()
    """TIMED_OUT jobs of other incarnations taken over (T8), epoch + 1."""
    started: tuple[Any, ...] = ()
    """This node's reserved QUEUED jobs now RUNNING (T3)."""
    claimed: tuple[Any, ...] = ()
    """New PENDING jobs claimed straight to RUNNING (T1)."""

    @property
    def jobs(self) -> list[Any]:
        return [*self.taken, *self.started, *self.claimed]


@dataclass(frozen=True)
class WatcherReport:
    """What one watcher pass did (every count is what *this* pass changed)."""

    dead_nodes: tuple[str, ...] = ()
    """Node incarnations this pass marked DEAD."""
    revoked: int = 0
    """Reserved QUEUED jobs put back to PENDING (T4, T13)."""
    orphaned: int = 0
    """RUNNING jobs of dead nodes made TIMED_OUT and eligible at once (T13)."""
    stalled: int = 0
    """RUNNING jobs without progress made TIMED_OUT (T6)."""
    expired: tuple[Any, ...] = ()
    """The outcomes recorded for TIMED_OUT jobs nobody took over (T9)."""
    removed_nodes: int = 0
    """DEAD node rows deleted after ``dead_node_retention``."""
    missed_start: tuple[uuid.UUID, ...] = ()
    """Jobs failed because they did not start by their schedule-to-start deadline (T14)."""
    effects: tuple[FlowEffect, ...] = ()
    """What the expired jobs' ends trigger in flows, to apply after commit (callbacks, chain
    and branch events, wakeups)."""

    @property
    def changed(self) -> bool:
        return bool(
            self.dead_nodes
            or self.revoked
            or self.orphaned
            or self.stalled
            or self.expired
            or self.missed_start
        )
