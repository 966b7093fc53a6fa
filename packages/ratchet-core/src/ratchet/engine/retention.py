"""Retention and the dead-letter queue: ``app.retention``, ``app.dlq`` and the scheduled
clean-ups a worker runs (docs/retention.md).

The decisions (what is due, batch sizes, schedules) come from :mod:`ratchet.domain.retention`;
the rows move through the store's :class:`~ratchet.ports.RetentionStore`. A scheduled clean-up
runs on one node at a time: the node that takes its cluster lease does the work on a thread of
its own (never on the maintenance thread, which the watcher and heartbeats share), renews the
lease after every batch, and then keeps it until the next fire time, so the other nodes skip
that fire.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ratchet.domain.errors import ConfigurationError, InvalidJobOptions
from ratchet.domain.joblog import JobLogLine
from ratchet.domain.lifecycle import JobPriority, JobStatus
from ratchet.domain.model import AttemptRecord, JobRecord
from ratchet.domain.retention import (
    DeadLetterFilter,
    PageCursor,
    PruneReport,
    RetentionSettings,
    check_replay_limit,
    cutoff,
    due_prunes,
    next_batch_size,
    next_run,
    pause_after,
)
from ratchet.events import EventKind, JobEvent
from ratchet.named_thread import NamedThread
from ratchet.ports import JobLogStore, RetentionStore, WakeupHint

if TYPE_CHECKING:
    from ratchet.engine.host import AppHost, WorkerHost

log = logging.getLogger("ratchet.retention")

RETENTION_LOCK = "ratchet-retention"
DLQ_PURGE_LOCK = "ratchet-dlq-purge"
ADMIN_NODE = "operator"
"""The lease owner of runs started by hand (``ratchet prune``) rather than by a worker."""

StopCheck = Callable[[], bool]


def retention_store(app: AppHost) -> RetentionStore:
    """The app's store as a :class:`RetentionStore`.

    :raises ConfigurationError: the store has no retention support.
    """
    store = app.store.capability(RetentionStore)  # type: ignore[type-abstract]
    if store is None:
        raise ConfigurationError(
            f"the {app.store.capabilities.dialect} store does not support retention"
        )
    return store


def drain_batches(
    step: Callable[[int], int],
    settings: RetentionSettings,
    *,
    should_stop: StopCheck = lambda: False,
    renew: StopCheck = lambda: True,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[int, int, bool]:
    """Call ``step(size)`` (one removal transaction) until it removes nothing; sizes adapt to
    ``settings.batch_target``. Returns ``(removed, batches, complete)``: not complete when
    ``should_stop`` said so or ``renew`` (the lease) failed between two batches."""
    size = settings.batch_size
    removed = batches = 0
    while True:
        if should_stop() or not renew():
            return removed, batches, False
        started = clock()
        count = step(size)
        elapsed = timedelta(seconds=clock() - started)
        batches += 1
        removed += count
        if count < size:
            return removed, batches, True
        size = next_batch_size(
            size,
            elapsed,
            settings.batch_target,
            settings.min_batch_size,
            settings.max_batch_size,
        )
        pause = pause_after(elapsed, settings).total_seconds()
        if pause > 0:
            sleep(pause)


class RetentionApi:
    """``app.retention``: run retention now, purge tombstones, read the archive and job logs."""

    def __init__(self, app: AppHost) -> None:
        self._app = app

    @property
    def settings(self) -> RetentionSettings:
        return self._app.config.retention

    def run(
        self,
        *,
        dry_run: bool = False,
        node_id: str = ADMIN_NODE,
        should_stop: StopCheck = lambda: False,
        renew: StopCheck = lambda: True,
    ) -> PruneReport:
        """Remove every ended job whose retention period passed (SUCCEEDED, CANCELED; archived
        first when ``settings.archive``) and the job log lines older than ``job_log_days``, in
        batches. ``dry_run`` counts instead and changes nothing. Does not take the lease: the
        scheduled task does (see :class:`ScheduledCleanup`)."""
        store = retention_store(self._app)
        settings = self.settings
        now = self._app.now()
        removed: dict[str, int] = {}
        batches = 0
        complete = True
        for due in due_prunes(settings, now):
            if dry_run:
                removed[due.status.value] = store.count_prunable(due.status, due.before)
                continue

            def step(
                size: int, status: JobStatus = due.status, before: datetime = due.before
            ) -> int:
                return store.prune_jobs(
                    status,
                    before,
                    limit=size,
                    archive=settings.archive,
                    now=self._app.now(),
                    node_id=node_id,
                )

            count, n, done = drain_batches(step, settings, should_stop=should_stop, renew=renew)
            removed[due.status.value] = count
            batches += n
            complete = complete and done
        logs_before = cutoff(now, settings.job_log_days)
        logs = self._app.store.capability(JobLogStore)  # type: ignore[type-abstract]
        if logs_before is not None and logs is not None and not dry_run and complete:
            count, n, done = drain_batches(
                lambda size: logs.purge_job_logs(logs_before, limit=size),
                settings,
                should_stop=should_stop,
                renew=renew,
            )
            removed["job_logs"] = count
            batches += n
            complete = complete and done
        archived = (
            0
            if dry_run or not settings.archive
            else sum(removed.get(s.value, 0) for s in (JobStatus.SUCCEEDED, JobStatus.CANCELED))
        )
        report = PruneReport(removed, archived, batches, dry_run, complete)
        if report.total and not dry_run:
            log.info("retention removed %s in %d batch(es)", removed, batches)
        return report

    def purge_tombstones(self, older_than_days: int, *, dry_run: bool = False) -> int:
        """Delete the idempotency keys older than ``older_than_days`` whose job is not live (a
        resubmission with such a key then creates a new job); return how many (or, dry, would).

        :raises InvalidJobOptions: ``older_than_days`` is negative.
        """
        if isinstance(older_than_days, bool) or older_than_days < 0:
            raise InvalidJobOptions(f"older_than_days must be >= 0, got {older_than_days!r}")
        store = retention_store(self._app)
        before = self._app.now() - timedelta(days=older_than_days)
        if dry_run:
            return store.count_tombstones(before)
        removed, _, _ = drain_batches(
            lambda size: store.purge_tombstones(before, limit=size), self.settings
        )
        if removed:
            log.info("purged %d idempotency key(s) older than %d days", removed, older_than_days)
        return removed

    def purge_own_id_keys(self, *, dry_run: bool = False) -> int:
        """Delete the idempotency-key rows whose key is their job's own id, whatever their age
        (rows written before a job's own id held its key: they guard nothing, since only the
        builder that made such a key could send it again, and it names the same job); return
        how many (or, dry, would). Reads the whole key table in batches of the retention
        ``batch_size``. Run it once every node runs a version whose builders keep their job's
        id: an older node's builder submitted twice looks its key up in these rows."""
        store = retention_store(self._app)
        size = self.settings.batch_size
        found, after = store.purge_own_id_keys(None, limit=size, dry_run=dry_run)
        while after is not None:
            more, after = store.purge_own_id_keys(after, limit=size, dry_run=dry_run)
            found += more
        if found and not dry_run:
            log.info("purged %d idempotency key row(s) of jobs keyed by their own ids", found)
        return found

    def archived_job(self, job_id: uuid.UUID) -> dict[str, Any] | None:
        """The archive row of a removed job (None: not archived)."""
        return retention_store(self._app).archived_job(job_id)

    def job_logs(self, job_id: uuid.UUID, *, limit: int = 10_000) -> list[JobLogLine]:
        """The lines a job wrote through ``context.logger()``, attempt by attempt."""
        logs = self._app.store.capability(JobLogStore)  # type: ignore[type-abstract]
        return [] if logs is None else logs.job_logs(job_id, limit=limit)


@dataclass(frozen=True)
class DeadLetterPage:
    """One page of the dead-letter queue, most recently failed first."""

    jobs: list[JobRecord]
    next: str | None
    """The cursor of the following page (None: this was the last one)."""


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter with its attempt history and log."""

    job: JobRecord
    attempts: list[AttemptRecord]
    logs: list[JobLogLine] = field(default_factory=list)


class DeadLetterQueue:
    """``app.dlq``: the FAILED jobs. List, show, replay, purge."""

    def __init__(self, app: AppHost) -> None:
        self._app = app

    def list(
        self, flt: DeadLetterFilter | None = None, *, limit: int = 50, cursor: str | None = None
    ) -> DeadLetterPage:
        """A page of dead letters matching ``flt``; pass ``page.next`` as ``cursor`` for more.

        :raises InvalidJobOptions: ``limit`` outside 1..10000 or a malformed cursor.
        """
        if isinstance(limit, bool) or not 1 <= limit <= 10_000:
            raise InvalidJobOptions(f"limit must be within 1..10000, got {limit!r}")
        after = PageCursor.decode(cursor) if cursor else None
        jobs = retention_store(self._app).list_dead_letters(
            flt or DeadLetterFilter(), limit=limit, after=after
        )
        following = None
        if len(jobs) == limit:
            last = jobs[-1]
            assert last.terminated_at is not None
            following = PageCursor(last.terminated_at, last.job_id).encode()
        return DeadLetterPage(jobs, following)

    def count(self, flt: DeadLetterFilter | None = None) -> int:
        """How many dead letters match ``flt``."""
        return retention_store(self._app).count_dead_letters(flt or DeadLetterFilter())

    def show(self, job_id: uuid.UUID) -> DeadLetter | None:
        """The dead letter ``job_id`` with its attempts and log (None: not a dead letter)."""
        job = self._app.get_job(job_id)
        if job is None or job.status is not JobStatus.FAILED:
            return None
        logs = RetentionApi(self._app).job_logs(job_id)
        return DeadLetter(job, self._app.attempts(job_id), logs)

    def replay(self, job_id: uuid.UUID) -> bool:
        """Move one dead letter back to PENDING (attempts reset); False if it is not one."""
        return self._app.retry_job(job_id)

    def replay_matching(self, flt: DeadLetterFilter | None = None, limit: int = 100) -> int:
        """Move up to ``limit`` (1..1000) matching dead letters back to PENDING, oldest failure
        first, all or nothing; returns how many.

        :raises InvalidJobOptions: ``limit`` outside 1..1000.
        :raises DuplicateBusinessKeyError: a live job holds one's business key (none moved).
        """
        check_replay_limit(limit)
        app = self._app
        count = retention_store(app).replay_dead_letters(
            flt or DeadLetterFilter(), limit, now=app.now()
        )
        if count:
            app.coordinator.notify_new_work(
                WakeupHint(JobPriority.NORMAL, app.node_name, jobs=count)
            )
            app.emit(JobEvent(EventKind.BULK_RETRIED, None, app.now(), data={"count": count}))
        return count

    def purge(
        self,
        flt: DeadLetterFilter | None = None,
        *,
        dry_run: bool = False,
        should_stop: StopCheck = lambda: False,
        renew: StopCheck = lambda: True,
    ) -> int:
        """Remove the matching dead letters (with their history), in batches; return how many
        (or, ``dry_run``, how many would go). A dead letter another job still refers to stays."""
        store = retention_store(self._app)
        flt = flt or DeadLetterFilter()
        if dry_run:
            return store.count_dead_letters(flt)
        removed, _, _ = drain_batches(
            lambda size: store.purge_dead_letters(flt, limit=size, now=self._app.now()),
            self._app.config.retention,
            should_stop=should_stop,
            renew=renew,
        )
        if removed:
            log.info("purged %d dead letter(s)", removed)
        return removed

    def purge_older_than(self, days: int, **kwargs: Any) -> int:
        """:meth:`purge` of the dead letters that failed more than ``days`` days ago."""
        if isinstance(days, bool) or days < 0:
            raise InvalidJobOptions(f"days must be >= 0, got {days!r}")
        before = self._app.now() - timedelta(days=days)
        return self.purge(DeadLetterFilter(failed_before=before), **kwargs)


CleanupAction = Callable[["WorkerHost", StopCheck, StopCheck], object]
"""``(worker, should_stop, renew)``: one run of a scheduled clean-up."""


class ScheduledCleanup:
    """A worker's periodic task that runs ``action`` at the fire times of a Quartz schedule,
    on one node of the cluster at a time (the holder of the lease ``lock``)."""

    def __init__(
        self,
        name: str,
        lock: str,
        schedule: str,
        zone: str,
        action: CleanupAction,
        *,
        lease: timedelta,
        interval: timedelta = timedelta(seconds=30),
    ) -> None:
        self.name = name
        self.lock = lock
        self.schedule = schedule
        self.zone = zone
        self.action = action
        self.lease = lease
        self.interval = interval
        """How often the task looks whether a fire time passed."""
        self.next_fire: datetime | None = None
        """The fire time this node waits for (None until the first look)."""
        self.runs = 0
        """Runs this node did."""
        self.thread: threading.Thread | None = None
        self._warned = False

    def run_once(self, worker: WorkerHost) -> None:
        now = worker.app.now()
        if self.next_fire is None:
            self.next_fire = next_run(self.schedule, self.zone, now)
            return
        if now < self.next_fire or (self.thread is not None and self.thread.is_alive()):
            return
        store = worker.store.capability(RetentionStore)  # type: ignore[type-abstract]
        if store is None:
            if not self._warned:
                self._warned = True
                log.warning("%s: the store has no retention support; nothing is removed", self.name)
            return
        if not store.try_lock(self.lock, worker.node_id, now=now, lease=self.lease):
            return  # another node runs this fire (or ran it): look again later
        self.thread = NamedThread(
            target=self._run, args=(worker, store), name=f"ratchet-{self.name}"
        )
        self.thread.start()

    def join(self, timeout: float | None = None) -> None:
        """Wait for a run in progress (tests, shutdown)."""
        if self.thread is not None:
            self.thread.join(timeout)

    def _run(self, worker: WorkerHost, store: RetentionStore) -> None:
        node = worker.node_id
        lost = False

        def renew() -> bool:
            nonlocal lost
            try:
                ok = store.try_lock(self.lock, node, now=worker.app.now(), lease=self.lease)
            except Exception:
                ok = False
            lost = lost or not ok
            return ok

        try:
            self.action(worker, lambda: worker.draining, renew)
            self.runs += 1
        except Exception as exc:
            log.warning("%s failed: %s (the next fire tries again)", self.name, exc)
        now = worker.app.now()
        self.next_fire = next_run(self.schedule, self.zone, now)
        if lost or worker.draining:
            return
        try:
            if self.next_fire is None:
                store.release_lock(self.lock, node)
            else:
                # Hold the lease until the next fire time: the other nodes skip this one.
                store.try_lock(self.lock, node, now=now, lease=self.next_fire - now)
        except Exception as exc:
            log.debug("%s: lease not kept (%s)", self.name, exc)


def retention_tasks(app: AppHost) -> list[ScheduledCleanup]:
    """The scheduled clean-ups a worker of ``app`` runs (none when disabled)."""
    settings = app.config.retention
    tasks = []
    if settings.enabled:

        def prune(worker: WorkerHost, should_stop: StopCheck, renew: StopCheck) -> object:
            return RetentionApi(app).run(
                node_id=worker.node_id, should_stop=should_stop, renew=renew
            )

        tasks.append(
            ScheduledCleanup(
                "retention",
                RETENTION_LOCK,
                settings.schedule,
                settings.zone,
                prune,
                lease=settings.lease,
            )
        )
    if settings.dlq_purge_enabled and settings.dlq_purge_days is not None:
        days = settings.dlq_purge_days

        def purge(worker: WorkerHost, should_stop: StopCheck, renew: StopCheck) -> object:
            return DeadLetterQueue(app).purge_older_than(days, should_stop=should_stop, renew=renew)

        tasks.append(
            ScheduledCleanup(
                "dlq-purge",
                DLQ_PURGE_LOCK,
                settings.dlq_purge_schedule,
                settings.zone,
                purge,
                lease=settings.lease,
            )
        )
    return tasks


class RetentionMixin:
    """``app.retention`` and ``app.dlq`` of :class:`~ratchet.Ratchet`."""

    @property
    def retention(self) -> RetentionApi:
        """Retention now, tombstones, the archive and job logs."""
        return RetentionApi(self)  # type: ignore[arg-type]

    @property
    def dlq(self) -> DeadLetterQueue:
        """The dead-letter queue (FAILED jobs)."""
        return DeadLetterQueue(self)  # type: ignore[arg-type]
