"""Gates: what an attempt must pass before its job's code runs.

A gate lets the attempt proceed or ends it with an outcome, usually a reschedule that consumes
no retry: :class:`CircuitBreakerGate` while the target's breaker is open, :class:`PermitGate`
while its resource is at capacity, :class:`TypeLimitGate` while its execution type is at its rate
or concurrency limit. The list a worker checks is built in
:func:`ratchet.engine.assembly.worker_gates`.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ratchet.domain.breaker import spec_of
from ratchet.domain.errors import StoreUnavailable
from ratchet.domain.model import ClaimedJob, Outcome, OutcomeKind
from ratchet.domain.resources import DEFAULT_RETRY_DELAY
from ratchet.ports import BreakerRegistry, PermitStore, TypeLimitStore

if TYPE_CHECKING:
    from ratchet.engine.host import WorkerHost
    from ratchet.targets import TargetRef

log = logging.getLogger("ratchet.worker")


def reschedule(
    job: ClaimedJob, started: datetime, finished: datetime, at: datetime, why: str
) -> Outcome:
    """An outcome that puts the job back to PENDING at ``at`` without consuming a retry."""
    return Outcome(
        job.job_id,
        job.epoch,
        job.attempt,
        OutcomeKind.RESCHEDULE,
        started,
        finished,
        error=why,
        retry_at=at,
        flow_effects=job.flow_effects,
    )


def breaker_service(worker: WorkerHost, target: str) -> str:
    """The breaker service of a stored ``target``: ``@circuit_breaker(service=...)`` or
    ``module.qualname``.

    The target is imported only if the class policy allows it (a refused target keeps the
    default name and is dead-lettered by the policy check). Its spec is handed to the resilience
    strategy, so the breaker gets the target's profile and exception filters.
    """
    services = worker.runner.services
    service = services.get(target)
    if service is None:
        ref = worker.target_ref(target)
        service = _breaker_service(worker, ref)
        if worker.runner.is_resolved(ref):  # the answer cannot change any more
            services[target] = service
    return service


def _breaker_service(worker: WorkerHost, ref: TargetRef) -> str:
    app = worker.app
    if not app.class_policy.is_allowed(ref.module, ref.qualname):
        return ref.service_name
    try:
        fn = worker.runner.resolve(ref)
    except Exception:
        return ref.service_name  # the execution step reports the real error
    spec = spec_of(fn)
    if spec is None:
        return ref.service_name
    service = spec.service or ref.service_name
    if isinstance(app.resilience, BreakerRegistry):
        app.resilience.configure(service, spec)
    return service


class CircuitBreakerGate:
    """Reschedules the attempt while the target service's breaker is open (no retry consumed)."""

    name = "circuit-breaker"

    def enter(self, worker: WorkerHost, job: ClaimedJob, now: datetime) -> Outcome | None:

        resilience = worker.app.resilience
        service = breaker_service(worker, job.target)
        if resilience.is_available(service):
            return None
        at = now + resilience.retry_delay(service)
        return reschedule(job, now, now, at, f"circuit open for {service}")

    def leave(self, worker: WorkerHost, job: ClaimedJob) -> None:
        return None


class PermitGate:
    """Acquires the job's resource permit before the attempt and releases it afterwards.

    With no permit free the attempt is rescheduled after the resource's retry delay without
    consuming a retry. Release happens in :meth:`leave`, which the worker calls
    whatever the outcome (success, failure, timeout, fencing); the watcher reclaims the permits
    of nodes it declares dead and of nodes that vanished, and :class:`PermitJanitor` repairs
    releases lost to outages.
    """

    name = "resource-permit"

    def __init__(self) -> None:
        self._warned = False

    def _permits(self, worker: WorkerHost) -> PermitStore | None:
        permits = worker.store.capability(PermitStore)  # type: ignore[type-abstract]
        if permits is None and not self._warned:
            self._warned = True
            log.warning("the store has no resource permits: resource limits are not enforced")
        return permits

    def enter(self, worker: WorkerHost, job: ClaimedJob, now: datetime) -> Outcome | None:
        if not job.resource_name:
            return None
        permits = self._permits(worker)
        if permits is None:
            return None
        try:
            decision = permits.acquire_permit(
                job.resource_name, job.job_id, job.epoch, worker.node_id, now=now
            )
        except StoreUnavailable as exc:
            at = now + DEFAULT_RETRY_DELAY
            return reschedule(job, now, now, at, f"resource {job.resource_name!r}: {exc}")
        if decision.granted:
            return None
        if not decision.owned:
            return reschedule(job, now, now, now, "the job is no longer this node's attempt")
        at = now + (decision.retry_delay or DEFAULT_RETRY_DELAY)
        return reschedule(
            job,
            now,
            now,
            at,
            f"resource {job.resource_name!r} at capacity ({decision.in_use}/{decision.limit})",
        )

    def leave(self, worker: WorkerHost, job: ClaimedJob) -> None:
        if not job.resource_name:
            return
        permits = self._permits(worker)
        if permits is not None:
            permits.release_permit(job.job_id, job.epoch)


class TypeLimitGate:
    """Admits the attempt under its execution type's limit (rate per minute, concurrency) and
    marks it ended afterwards; over the limit, the attempt is rescheduled without consuming a
    retry, to when the limit lets it start.

    Which targets have a limit is read from the store at most every :attr:`refresh` and kept:
    an attempt of an unlimited target costs no round trip, and a limit registered or removed
    takes effect on running workers within that time.
    """

    name = "type-limit"
    refresh = timedelta(seconds=5)

    def __init__(self) -> None:
        self._limited: frozenset[str] = frozenset()
        self._read_at: datetime | None = None
        self._lock = threading.Lock()

    def _store(self, worker: WorkerHost) -> TypeLimitStore | None:
        return worker.store.capability(TypeLimitStore)  # type: ignore[type-abstract]

    def limited(self, worker: WorkerHost, now: datetime) -> frozenset[str]:
        """The targets with a limit (re-read once :attr:`refresh` passed)."""
        read_at = self._read_at
        if read_at is not None and now - read_at < self.refresh:
            return self._limited  # fresh: no lock on the path of every attempt
        with self._lock:
            stale = self._read_at is None or now - self._read_at >= self.refresh
            if stale:
                self._read_at = now
        if stale:
            store = self._store(worker)
            try:
                targets = frozenset(
                    limit.target for limit in (store.list_type_limits() if store else [])
                )
            except StoreUnavailable:
                targets = self._limited  # keep the last answer through an outage
            self._limited = targets
        return self._limited

    def enter(self, worker: WorkerHost, job: ClaimedJob, now: datetime) -> Outcome | None:
        if job.target not in self.limited(worker, now):
            return None
        store = self._store(worker)
        if store is None:
            return None
        try:
            decision = store.admit_type(job.target, job.job_id, job.epoch, worker.node_id, now=now)
        except StoreUnavailable as exc:
            return reschedule(job, now, now, now + DEFAULT_RETRY_DELAY, f"type limit: {exc}")
        if decision.admitted:
            return None
        return reschedule(job, now, now, decision.retry_at or now, decision.reason or "limited")

    def leave(self, worker: WorkerHost, job: ClaimedJob) -> None:
        if job.target not in self._limited:
            return
        store = self._store(worker)
        if store is not None:
            try:
                store.release_type(job.job_id, job.epoch)
            except StoreUnavailable:
                log.warning("job %s: could not release its type limit slot", job.job_id)
