"""A worker's side of the metrics port (:mod:`ratchet.metrics`): measuring and sampling.

- :class:`Meter` turns what the producer and the completer did into measurements and hands them
  to the ``ratchet_metrics_observed`` hook, one batch per poll or outcome write. While no plugin
  implements the hook, :attr:`Meter.enabled` is False and the parts skip it all.
- :class:`MetricsSampler`, a maintenance task, samples this worker's gauges and running totals,
  and, while it holds the cluster's sampling lease, the database-wide gauges; then calls
  ``ratchet_metrics_sampled``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

from ratchet import metrics as m
from ratchet.domain.breaker import BreakerState
from ratchet.domain.lifecycle import JobPriority
from ratchet.domain.model import AttemptKey, ClaimedJob, Outcome, OutcomeKind, attempt_key
from ratchet.metrics import Measurement, MetricsSample
from ratchet.ports import (
    BreakerStates,
    CountingCoordinator,
    PermitStore,
    QueueGaugeStore,
    RecurringStore,
)

if TYPE_CHECKING:
    from ratchet.engine.host import WorkerHost
    from ratchet.plugins import Plugins

log = logging.getLogger("ratchet.worker")

T = TypeVar("T")

OBSERVED = "ratchet_metrics_observed"
SAMPLED = "ratchet_metrics_sampled"
SAMPLING_LEASE = "ratchet-metrics-sampler"
"""The ``scheduler_lock`` lease held by the worker that samples the cluster gauges."""

_PRIORITY = {p: p.name.lower() for p in JobPriority}
_COMPLETED = {
    OutcomeKind.SUCCEEDED: "succeeded",
    OutcomeKind.RETRY: "retried",
    OutcomeKind.DEAD: "dead_lettered",
    OutcomeKind.RESCHEDULE: "rescheduled",
}
_BREAKER_STATES = (BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN)
_ALONE = {name: (name,) for name in _PRIORITY.values()}
_UNKNOWN = (m.OTHER, m.OTHER)
"""The labels of an outcome whose claim this meter did not see (enabled in between)."""
_REMEMBERED = 100_000
"""At most this many claimed jobs' labels wait for their outcome (a bound, not a policy)."""


def priority_label(priority: int) -> str:
    """The ``priority`` label value of a priority ordinal (``normal``...)."""
    try:
        return _PRIORITY[JobPriority(priority)]
    except ValueError:
        return str(priority)


class Meter:
    """The measurements of one worker's producer and completer."""

    def __init__(self, plugins: Plugins) -> None:
        self.plugins = plugins
        self._jobs: dict[AttemptKey, tuple[str, str]] = {}
        self._targets: dict[str, tuple[str]] = {}
        """One ``(target,)`` label tuple per target (made once, not per job)."""

    @property
    def enabled(self) -> bool:
        """Whether a plugin implements ``ratchet_metrics_observed`` now."""
        return self.plugins.has_observers(OBSERVED)

    def send(self, measurements: Sequence[Measurement]) -> None:
        if measurements:
            self.plugins.notify(OBSERVED, measurements=measurements)

    def polled(self, claimed: Sequence[ClaimedJob], seconds: float) -> None:
        """A poll that took ``seconds`` claimed ``claimed`` (call only when :attr:`enabled`).

        Counters are summed per label set before they are sent (a batch of one target is one
        increment); histogram observations are sent one by one.
        """
        new, waits = tuple.__new__, m.SCHEDULE_TO_START
        out = [Measurement(m.STORE_OPERATION_SECONDS, ("acquire_work",), seconds)]
        jobs = self._jobs
        if len(jobs) + len(claimed) > _REMEMBERED:
            jobs.clear()  # outcomes never written (fenced before they ran): forget them all
        started: dict[tuple[str, str], int] = {}
        for job in claimed:
            priority = _PRIORITY.get(job.priority) or priority_label(job.priority)
            labels = (job.target, priority)
            jobs[job.key] = labels
            started[labels] = started.get(labels, 0) + 1
            waited = (job.claimed_at - job.scheduled_time).total_seconds()
            alone = _ALONE.get(priority) or (priority,)
            out.append(new(Measurement, (waits, alone, waited if waited > 0 else 0.0)))
        out.extend(Measurement(m.JOBS_STARTED, labels, n) for labels, n in started.items())
        self.send(out)

    def written(
        self,
        outcomes: Sequence[Outcome],
        fenced: set[uuid.UUID],
        timed_out: set[AttemptKey],
        seconds: float,
    ) -> None:
        """An outcome write of ``outcomes`` took ``seconds`` and refused ``fenced``; the attempts
        in ``timed_out`` ran past their deadline (call only when :attr:`enabled`)."""
        new, runs = tuple.__new__, m.RUN_DURATION
        out = [
            Measurement(m.OUTCOME_BATCH_SIZE, (), len(outcomes)),
            Measurement(m.OUTCOME_WRITE_SECONDS, (), seconds),
            Measurement(m.STORE_OPERATION_SECONDS, ("record_outcomes",), seconds),
        ]
        jobs, targets = self._jobs, self._targets
        counts: dict[tuple[OutcomeKind, bool, str, str], int] = {}
        for o in outcomes:
            key = attempt_key(o.job_id, o.epoch)
            target, priority = jobs.pop(key, _UNKNOWN)
            if fenced and o.job_id in fenced:
                continue
            tally = (o.kind, bool(timed_out) and key in timed_out, target, priority)
            counts[tally] = counts.get(tally, 0) + 1
            alone = targets.get(target)
            if alone is None:
                if len(targets) >= _REMEMBERED:
                    targets.clear()
                alone = targets[target] = (target,)
            run = (o.finished_at - o.started_at).total_seconds()
            out.append(new(Measurement, (runs, alone, run)))
        for (kind, timed, target, priority), n in counts.items():
            tp = (target, priority)
            out.append(Measurement(m.JOBS_COMPLETED, (target, _COMPLETED[kind]), n))
            if kind is OutcomeKind.SUCCEEDED:
                out.append(Measurement(m.JOBS_SUCCEEDED, tp, n))
            elif kind is OutcomeKind.RESCHEDULE:
                out.append(Measurement(m.JOBS_RESCHEDULED, tp, n))
            else:
                out.append(Measurement(m.JOBS_FAILED, tp, n))
                if timed:
                    out.append(Measurement(m.JOBS_TIMED_OUT, tp, n))
                metric = m.JOBS_RETRIED if kind is OutcomeKind.RETRY else m.JOBS_DEAD_LETTERED
                out.append(Measurement(metric, tp, n))
        self.send(out)


class MetricsSampler:
    """Samples gauges every ``interval`` for the ``ratchet_metrics_sampled`` hook.

    Only a worker with a plugin on that hook samples. Of those, the one that holds the
    ``ratchet-metrics-sampler`` lease (``RecurringStore.try_lock``, renewed every round, lasting
    three rounds) also samples the cluster: queue depth, the oldest due job, heartbeat ages,
    permits. If it dies, another takes the lease over once it expires.
    """

    name = "metrics-sampler"

    def __init__(self, interval: timedelta) -> None:
        self.interval = interval
        self._leader = False

    def run_once(self, worker: WorkerHost) -> None:
        plugins = worker.app.plugins
        if not plugins.has_observers(SAMPLED):
            self._release(worker)
            return
        now = worker.app.now()
        timings: list[Measurement] = []
        cluster = self._cluster(worker, now, timings) if self._lease(worker, now) else None
        sample = MetricsSample(worker.node_id, now, tuple(self.local(worker)), cluster)
        plugins.notify(SAMPLED, sample=sample)
        if timings and plugins.has_observers(OBSERVED):
            plugins.notify(OBSERVED, measurements=timings)

    def stop(self, worker: WorkerHost) -> None:
        """Give the lease up (a worker that drains), so another node samples at once."""
        self._release(worker)

    # ------------------------------------------------------------------ this worker
    @staticmethod
    def local(worker: WorkerHost) -> list[Measurement]:
        """This worker's gauges and running totals."""
        stats, live = worker.stats, worker.liveness.stats
        free = worker.slots.free()
        out = [
            Measurement(m.SLOTS, ("busy",), worker.slots.capacity() - free),
            Measurement(m.SLOTS, ("free",), free),
            Measurement(m.CLAIMS, (), stats.polls),
            Measurement(m.CLAIMED_JOBS, (), stats.claimed),
            Measurement(m.STORE_ERRORS, (), stats.store_errors),
            Measurement(m.WAKEUPS_RECEIVED, (), stats.wakeups_received),
            Measurement(m.HINT_CLAIMS, ("made",), worker.hints.claims_made),
            Measurement(m.HINT_CLAIMS, ("skipped",), worker.hints.claims_skipped),
            Measurement(m.HINT_CLAIMS, ("reported",), stats.claims_reported),
            Measurement(m.TAKEOVERS, (), live.taken_over),
            Measurement(m.FENCED_WRITES, (), stats.fenced_out),
        ]
        published = _published(worker)
        if published is not None:
            out.append(Measurement(m.WAKEUPS_PUBLISHED, (), published))
        resilience = worker.app.resilience
        if isinstance(resilience, BreakerStates):
            for service, state in sorted(resilience.states().items()):
                if state is not BreakerState.DISABLED:
                    out.extend(
                        Measurement(m.BREAKER_STATE, (service, s.lower()), float(s == state))
                        for s in _BREAKER_STATES
                    )
        return out

    # ------------------------------------------------------------------ the cluster
    def _lease(self, worker: WorkerHost, now: datetime) -> bool:
        leases = worker.store.capability(RecurringStore)  # type: ignore[type-abstract]
        if leases is None or worker.draining:
            return False
        try:
            held = leases.try_lock(SAMPLING_LEASE, worker.node_id, now=now, lease=3 * self.interval)
        except Exception as exc:
            log.warning("metrics: could not renew the sampling lease: %s", exc)
            held = False
        if held != self._leader:
            log.info("metrics: %s the cluster gauges", "sampling" if held else "no longer sampling")
        self._leader = held
        return held

    def _release(self, worker: WorkerHost) -> None:
        if not self._leader:
            return
        self._leader = False
        leases = worker.store.capability(RecurringStore)  # type: ignore[type-abstract]
        if leases is not None:
            try:
                leases.release_lock(SAMPLING_LEASE, worker.node_id)
            except Exception as exc:
                log.warning("metrics: could not release the sampling lease: %s", exc)

    def _cluster(
        self, worker: WorkerHost, now: datetime, timings: list[Measurement]
    ) -> tuple[Measurement, ...] | None:
        """The database-wide gauges (None when the store could not answer)."""
        store = worker.store
        out = [Measurement(m.CLUSTER_SAMPLER, (), 1)]
        try:
            gauges = store.capability(QueueGaugeStore)  # type: ignore[type-abstract]
            if gauges is not None:
                queue = _timed(timings, "queue_gauges", lambda: gauges.queue_gauges(now=now))
                out.extend(
                    Measurement(m.QUEUE_DEPTH, (status, priority_label(priority)), n)
                    for (status, priority), n in sorted(queue.depths.items())
                )
                oldest = queue.oldest_due
                age = 0.0 if oldest is None else (now - oldest).total_seconds()
                out.append(Measurement(m.OLDEST_PENDING_AGE, (), max(0.0, age)))
            nodes = _timed(timings, "list_nodes", store.list_nodes)
            out.extend(
                Measurement(
                    m.HEARTBEAT_AGE,
                    (n.node_id, n.state.lower()),
                    max(0.0, (now - n.heartbeat_at).total_seconds()),
                )
                for n in nodes
            )
            permits = store.capability(PermitStore)  # type: ignore[type-abstract]
            if permits is not None:
                limits = _timed(timings, "list_resource_limits", permits.list_resource_limits)
                held = _timed(timings, "list_permits", permits.list_permits)
                in_use: dict[str, int] = {limit.name: 0 for limit in limits}
                for permit in held:
                    in_use[permit.resource_name] = in_use.get(permit.resource_name, 0) + 1
                out.extend(Measurement(m.PERMITS_IN_USE, (r,), n) for r, n in in_use.items())
                out.extend(
                    Measurement(m.PERMITS_LIMIT, (limit.name,), limit.max_concurrent)
                    for limit in limits
                )
        except Exception as exc:
            log.warning("metrics: could not sample the cluster gauges: %s", exc)
            return None
        return tuple(out)


def _timed(timings: list[Measurement], operation: str, call: Callable[[], T]) -> T:
    started = time.perf_counter()
    try:
        return call()
    finally:
        seconds = time.perf_counter() - started
        timings.append(Measurement(m.STORE_OPERATION_SECONDS, (operation,), seconds))


def _published(worker: WorkerHost) -> int | None:
    """Hints the app's coordinator published, if it counts them."""
    coordinator = worker.app.coordinator
    if isinstance(coordinator, CountingCoordinator):
        return coordinator.stats().published
    return None
