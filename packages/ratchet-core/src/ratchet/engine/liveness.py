"""Cluster liveness on a worker: incarnations, heartbeats, the watcher, takeovers, progress, drain.

Attached to every :class:`~ratchet.engine.worker.Worker` whose store has the
:class:`~ratchet.ports.WatcherStore` capability (docs/clustering.md, "Liveness, takeover and
recovery"):

- **Incarnations.** Each worker process registers a new incarnation (``node_id`` = name, pid
  and a random suffix) under a stable ``node_name``. On start it marks its previous
  incarnations on the same host DEAD at once (same pid, or a pid that no longer exists), so
  their jobs are taken over without waiting for ``orphan_grace``.
- **Heartbeats** on their own thread, more often under load (:func:`heartbeat_delay`). A node
  that finds its own row DEAD stops claiming, asks its running attempts to stop (their writes
  are refused anyway) and continues as a new incarnation.
- **The watcher** (:class:`WatcherTask`, a periodic task): one idempotent store pass.
- **Acquisition** (:meth:`Liveness.acquire`): takeovers first, then reserved jobs, then new
  claims, never beyond the free slots (plus ``prefetch`` reservations).
- **Progress** (:class:`ProgressChannel`): fenced ``checkpoint`` / ``touch`` writes for
  :class:`~ratchet.engine.context.JobContext`; a refused write raises ``FencedOut`` once
  logged as fatal, counted, and the run's outcome is discarded.
- **Drain**: DRAINING, cancellation requested, a bounded wait (the worker's), then every job
  still owned is handed back (QUEUED -> PENDING, RUNNING -> takeover-eligible at once).
"""

from __future__ import annotations

import collections
import json
import logging
import os
import random
import socket
import threading
import time
import uuid
from dataclasses import replace as dc_replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ratchet.domain.breaker import published_breakers
from ratchet.domain.errors import FencedOut, UnknownPluginError
from ratchet.domain.model import AttemptKey, ClaimedJob, Outcome, OutcomeKind
from ratchet.domain.options import BackoffPolicy
from ratchet.domain.retry import decide_retry
from ratchet.domain.text import describe_error, storable_text
from ratchet.domain.watcher import (
    Checkpoint,
    JobStalledError,
    NodeInfo,
    NodeState,
    StalledJob,
    WatcherReport,
    heartbeat_delay,
)
from ratchet.engine.context import ProgressReporter, log_about
from ratchet.engine.stats import LivenessStats
from ratchet.events import EventKind, JobEvent
from ratchet.named_thread import NamedThread
from ratchet.ports import BreakerStates, WatcherStore
from ratchet.targets import TargetRef

if TYPE_CHECKING:
    from ratchet.engine.host import WorkerHost
    from ratchet.engine.running import Attempt

log = logging.getLogger("ratchet.watcher")

DRAIN_REASON = "the worker is draining"
DEAD_REASON = "this node was declared dead"
FENCED_REASON = "this node no longer owns the job (fenced out)"
#: A node clock this far from the database clock is logged and exposed in the stats.
CLOCK_SKEW_BOUND = timedelta(seconds=1)
#: Check the clock skew on every n-th heartbeat.
SKEW_EVERY = 10


#: Node ids of the incarnations running in this process now (several workers, of one app or of
#: several, may share a process and so a pid). Process-wide by nature: on start, a worker marks
#: the earlier incarnations with its pid dead, except these.
_LOCAL: set[str] = set()
_LOCAL_LOCK = threading.Lock()


def host_name() -> str:
    """This machine's name (at most 60 characters, storable on every database)."""
    return storable_text(socket.gethostname())[:60]


def new_node_id(name: str | None = None) -> str:
    """``name-pid-random``: a new incarnation of a node named ``name`` (default: the host)."""
    return f"{(name or host_name())[:60]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def pid_alive(pid: int | None) -> bool:
    """Whether process ``pid`` exists on this host (unknown counts as alive)."""
    if pid is None or pid <= 0 or os.name == "nt":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def watcher_store(store: Any) -> WatcherStore | None:
    """The store's watcher capability, or None."""
    capability = getattr(store, "capability", None)
    if capability is None:
        return None
    found = capability(WatcherStore)
    return found if isinstance(found, WatcherStore) else None


class ProgressChannel:
    """Fenced progress writes of one attempt (the ``progress`` of its JobContext)."""

    def __init__(self, liveness: Liveness, job: ClaimedJob, node_id: str) -> None:
        self.liveness = liveness
        self.job = job
        self.node_id = node_id
        self.fenced: FencedOut | None = None
        self.reported = False
        """Its refusal was logged and counted (once per attempt)."""
        self._checkpoint: Checkpoint | None = None
        self._loaded = False

    def checkpoint(self, step: int, data: Any) -> None:
        self._write(step, data)

    def touch(self) -> None:
        self._write(None, None)

    def last_checkpoint(self) -> Checkpoint | None:
        if not self._loaded:
            self._checkpoint = self.liveness.store.last_checkpoint(self.job.job_id)
            self._loaded = True
        return self._checkpoint

    def _write(self, step: int | None, data: Any) -> None:
        job = self.job
        if self.fenced is not None:
            raise FencedOut(job.job_id, job.epoch, self.node_id)
        now = self.liveness.worker.app.now()
        try:
            revived = self.liveness.store.record_progress(
                self.node_id, job.job_id, job.epoch, now=now, step=step, data=data
            )
        except FencedOut as exc:
            self.fenced = exc
            self.liveness.fenced(self, exc)
            raise
        if step is not None:
            stored = json.loads(json.dumps(data))  # what a resumed run will read
            self._checkpoint = Checkpoint(step, stored, job.epoch, now)
            self._loaded = True
        if revived:
            self.liveness.revived(job)


class Liveness:
    """A worker's incarnation, heartbeats, watcher, takeover-first acquisition and drain."""

    def __init__(self, worker: WorkerHost, store: WatcherStore) -> None:
        self.worker = worker
        self.store = store
        self.settings = worker.config.watcher_settings()
        self.node_name = worker.app.config.node_name or host_name()
        self.host = host_name()
        self.pid = os.getpid()
        self.state = NodeState.ALIVE
        self.stats = LivenessStats()
        self.previous_ids: list[str] = []
        """Incarnations of this process that were declared dead (newest last)."""
        self._switch = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._owners: dict[AttemptKey, str] = {}
        self._reserved: collections.deque[ClaimedJob] = collections.deque()
        self._skewed = False
        self._lock = threading.Lock()
        self._last_ok: datetime | None = None
        self._healthy_since: datetime | None = None
        self._registered = False

    # ------------------------------------------------------------------ identity
    @property
    def node_id(self) -> str:
        return self.worker.node_id

    def info(self) -> NodeInfo:
        """What this incarnation registers."""
        return NodeInfo(
            node_id=self.node_id,
            node_name=self.node_name,
            host=self.host,
            pid=self.pid,
            slots=self.worker.config.concurrency,
            prefetch=self.worker.config.prefetch,
            tags=self.worker.config.tags,
        )

    def register(self) -> list[str]:
        """Register this incarnation; mark previous incarnations of this node on this host DEAD
        at once (same pid, or a pid gone) and run a watcher pass. Returns those marked."""
        now = self.worker.app.now()
        others = self.store.register_incarnation(self.info(), now=now)
        self._registered = True
        self._beat_ok(self.worker.app.now())
        with _LOCAL_LOCK:
            _LOCAL.add(self.node_id)
            local = set(_LOCAL)
        previous = [
            n.node_id
            for n in others
            if n.node_id not in local and (n.pid == self.pid or not pid_alive(n.pid))
        ]
        marked = self.store.declare_dead(previous, now=now) if previous else []
        if marked:
            self.stats.nodes_declared_dead += len(marked)
            log.warning(
                "node %s: previous incarnation(s) %s declared dead; their jobs are recovered now",
                self.node_id,
                ", ".join(marked),
            )
            self.watch_once()
        self._check_skew(now)
        return marked

    def start(self) -> None:
        """Register, then heartbeat on a thread of its own until :meth:`stop`."""
        self.register()
        self._thread = NamedThread(target=self._beat_loop, name="ratchet-liveness")
        self._thread.start()

    def stop(self) -> None:
        """Stop heart-beating (the worker deregisters afterwards)."""
        self._stop.set()
        with _LOCAL_LOCK:
            _LOCAL.discard(self.node_id)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    # ------------------------------------------------------------------ heartbeats
    def _beat_loop(self) -> None:
        config = self.worker.config
        delay = heartbeat_delay(config.heartbeat_interval, config.orphan_grace, 1.0)
        while not self._stop.wait(timeout=delay.total_seconds()):
            try:
                self.beat()
            except Exception as exc:
                self.worker.outages.failed(exc)
            delay = heartbeat_delay(
                config.heartbeat_interval, config.orphan_grace, self.worker.slots.utilisation()
            )

    def beat(self) -> bool:
        """One heartbeat; a node found DEAD continues as a new incarnation (not while draining).
        Returns whether this incarnation was still alive."""
        now = self.worker.app.now()
        started = time.monotonic()
        alive = self.store.beat(self.node_id, now=now, breakers=self._breakers())
        took = time.monotonic() - started
        self.stats.beats += 1
        if alive:
            self._beat_ok(self.worker.app.now())
        if took > self.settings.dead_after.total_seconds() / 3:
            log.warning(
                "node %s: a heartbeat took %.2f s (the node is declared dead after %s of "
                "silence); the database is overloaded or this process is starved",
                self.node_id,
                took,
                self.settings.dead_after,
            )
        if not alive and self.state is NodeState.ALIVE:
            self.restart_incarnation()
        elif self.stats.beats % SKEW_EVERY == 0:
            self._check_skew(now)
        return alive

    def _breakers(self) -> dict[str, str] | None:
        """The breakers this node publishes with its heartbeat (None: its resilience strategy
        cannot list them, or listing failed: logged, the heartbeat goes on)."""
        resilience = self.worker.app.resilience
        if not isinstance(resilience, BreakerStates):
            return None
        try:
            return published_breakers(resilience.states())
        except Exception:
            log.warning("node %s: could not read its circuit breakers", self.node_id, exc_info=True)
            return None

    def _beat_ok(self, at: datetime) -> None:
        """A heartbeat (or registration) was written at ``at``."""
        if self._last_ok is None or at - self._last_ok > self.settings.dead_after / 2:
            self._healthy_since = at  # after a gap: healthy again from now on
        self._last_ok = at

    def judging(self) -> bool:
        """Whether this node may judge silence now (declare silent nodes dead, make RUNNING jobs
        without progress TIMED_OUT): its own heartbeats have been written without a gap longer
        than ``orphan_grace / 2`` for at least ``orphan_grace``.

        A database stall (or a pause of this process) silences everybody at once; without this
        guard the first watcher to run afterwards would declare the whole cluster dead and take
        every running job over.
        """
        if self._last_ok is None or self._healthy_since is None:
            return False
        now = self.worker.app.now()
        dead_after = self.settings.dead_after
        return now - self._last_ok <= dead_after / 2 and now - self._healthy_since >= dead_after

    def _check_skew(self, now: datetime) -> None:
        """Compare this node's clock with the database's (multi-host stores only: SQLite shares
        the machine's clock and reports whole seconds)."""
        store: Any = self.store
        if not store.capabilities.multi_host:
            return
        try:
            started = time.monotonic()
            database = store.database_time()
            rtt = timedelta(seconds=time.monotonic() - started)
        except Exception:
            return
        skew = max(timedelta(0), abs(database - now) - rtt)
        self.stats.clock_skew = skew
        skewed = skew > CLOCK_SKEW_BOUND
        if skewed and not self._skewed:
            log.warning(
                "node %s: its clock differs from the database's by %.3f s (bound %.0f s); "
                "deadlines are measured with the nodes' clocks",
                self.node_id,
                skew.total_seconds(),
                CLOCK_SKEW_BOUND.total_seconds(),
            )
        self._skewed = skewed

    def restart_incarnation(self) -> str:
        """This incarnation was declared DEAD: stop claiming, ask its attempts to stop (their
        writes are refused), and register as a new incarnation. Returns the new node id."""
        worker = self.worker
        with self._switch:
            old = worker.node_id
            new = new_node_id(self.node_name)
            self._reserved.clear()
            attempts = worker.slots.attempts()
            now = worker.app.now()
            for attempt in attempts:
                attempt.cancellation.request(DEAD_REASON, now)
            self.store.register_incarnation(dc_replace(self.info(), node_id=new), now=now)
            self._last_ok = None  # it was silent: healthy again only after orphan_grace
            self._beat_ok(worker.app.now())
            with _LOCAL_LOCK:
                _LOCAL.discard(old)
                _LOCAL.add(new)
            self.previous_ids.append(old)
            self.stats.restarts += 1
            worker.node_id = new
        log.error(
            "fatal: node %s was declared dead (silent past %s); its %d running job(s) are "
            "fenced out and will be taken over; continuing as new incarnation %s",
            old,
            self.settings.dead_after,
            len(attempts),
            worker.node_id,
        )
        return worker.node_id

    # ------------------------------------------------------------------ the watcher
    def decide(self, stalled: StalledJob) -> Outcome:
        """T9 through the retry policy: a retry while retries remain, else the DLQ."""
        app = self.worker.app
        now = app.now()
        exc = JobStalledError(
            f"job {stalled.job_id} attempt {stalled.attempt} stalled on node {stalled.owner} "
            f"(TIMED_OUT since {stalled.timed_out_at.isoformat()}): {stalled.reason}"
        )
        decision = decide_retry(
            attempt=stalled.attempt,
            max_retries=stalled.max_retries,
            exc=exc,
            now=now,
            backoff=BackoffPolicy(stalled.backoff),
            backoff_base=timedelta(milliseconds=stalled.backoff_ms),
            policy=app.retry_policy,
        )
        return Outcome(
            stalled.job_id,
            stalled.epoch,
            stalled.attempt,
            OutcomeKind.RETRY if decision.retry else OutcomeKind.DEAD,
            stalled.started_at,
            now,
            error=describe_error(exc),
            retry_at=decision.retry_at,
        )

    def watch_once(self) -> WatcherReport:
        """One watcher pass (idempotent), with its events and logs."""
        worker = self.worker
        report = self.store.watch(
            now=worker.app.now(),
            settings=self.settings,
            decide=self.decide,
            judge_silence=self.judging(),
            resolve=worker.app.resolver,
        )
        stats = self.stats
        stats.watcher_passes += 1
        stats.nodes_declared_dead += len(report.dead_nodes)
        stats.revoked += report.revoked
        stats.stalled += report.stalled
        stats.orphaned += report.orphaned
        stats.expired += len(report.expired)
        now = worker.app.now()
        for node in report.dead_nodes:
            log.warning(
                "node %s declared dead (no heartbeat for %s)", node, self.settings.dead_after
            )
            worker.app.emit(JobEvent(EventKind.NODE_DEAD, None, now, self.node_id, {"node": node}))
        if report.stalled or report.orphaned or report.revoked:
            log.warning(
                "watcher: %d job(s) stalled, %d orphaned by dead nodes, %d reservation(s) revoked",
                report.stalled,
                report.orphaned,
                report.revoked,
            )
            data = {
                "stalled": report.stalled,
                "orphaned": report.orphaned,
                "revoked": report.revoked,
            }
            worker.app.emit(JobEvent(EventKind.STALLED, None, now, self.node_id, data))
        for job_id in report.missed_start:
            log.warning("job %s failed: it did not start by its schedule-to-start deadline", job_id)
            worker.app.emit(
                JobEvent(
                    EventKind.DEAD_LETTERED, job_id, now, self.node_id, {"reason": "missed_start"}
                )
            )
        stats.missed_start += len(report.missed_start)
        if report.expired or report.effects:
            if report.expired:
                log.warning(
                    "watcher: %d TIMED_OUT job(s) nobody took over failed", len(report.expired)
                )
            worker.completer.report(list(report.expired), set(), report.effects)
        if report.changed:
            worker.producer.wake()
        return report

    # ------------------------------------------------------------------ acquiring work
    def supports(self, target: str, executor: str | None) -> bool:
        """Whether this node can run a job (T8's ``supports(Y)``): its class policy allows the
        target and, if the job names an executor, that executor's plugin is installed here.
        Jobs this node cannot run are left to the nodes that can."""
        app = self.worker.app
        try:
            ref = TargetRef.parse(target)
        except Exception:
            return False
        if not app.class_policy.is_allowed(ref.module, ref.qualname):
            return False
        if executor is None:
            return True
        try:
            app.plugins.executor_factory(executor)
        except UnknownPluginError:
            return False
        return True

    def acquire(self, want: int) -> list[ClaimedJob]:
        """Up to ``want`` jobs to start now: takeovers first, then reserved jobs, then new
        claims; then refill the reservations up to ``prefetch``."""
        worker = self.worker
        with self._switch:
            if self.state is not NodeState.ALIVE or worker.draining:
                return []
            node = worker.node_id
            now = worker.app.now()
            local = worker.slots.local_job_ids()
            reserved = [self._reserved.popleft() for _ in range(min(want, len(self._reserved)))]
            work = self.store.acquire_work(
                node,
                want,
                now=now,
                settings=self.settings,
                boost_interval=worker.app.config.boost_interval,
                reserved=reserved,
                exclude=local,
                supports=self.supports,
                without_row=not self._registered,  # a worker polled without start()
                node_tags=worker.config.tags,
            )
            if work.state is not NodeState.ALIVE and not (
                work.state is None and not self._registered
            ):
                self._reserved.extendleft(reversed(reserved))
                return []  # declared dead (or draining): no claims; the next beat restarts it
            taken, started, claimed = list(work.taken), list(work.started), list(work.claimed)
            # Takeovers go first: the reservations they left no slot for were not tried and
            # are still this node's (QUEUED here); they start on a later poll.
            untried = reserved[max(0, want - len(taken)) :]
            self._reserved.extendleft(reversed(untried))
            for job in taken:
                self.stats.taken_over += 1
                log_about(
                    log,
                    logging.WARNING,
                    (job.job_id, job.attempt, node),
                    "job %s taken over (epoch %d, takeover %d)",
                    job.job_id,
                    job.epoch,
                    job.takeovers,
                )
                worker.app.emit(
                    JobEvent(
                        EventKind.TAKEN_OVER,
                        job.job_id,
                        now,
                        node,
                        {"epoch": job.epoch, "takeovers": job.takeovers},
                    )
                )
            rest = want - len(taken) - len(started)
            if len(claimed) == rest:
                self._refill(node, now)
            jobs = taken + started + claimed
            with self._lock:
                for job in jobs:
                    self._owners[job.key] = node
            return jobs

    def refill(self) -> None:
        """Top the reservations up to ``prefetch`` (the poller calls it while every slot is
        busy, so that reserved jobs are ready when one frees)."""
        with self._switch:
            if self.state is NodeState.ALIVE and not self.worker.draining:
                self._refill(self.worker.node_id, self.worker.app.now())

    def _refill(self, node: str, now: datetime) -> None:
        prefetch = self.worker.config.prefetch
        if prefetch and len(self._reserved) < prefetch:
            self._reserved.extend(
                self.store.reserve(
                    node,
                    prefetch - len(self._reserved),
                    now=now,
                    boost_interval=self.worker.app.config.boost_interval,
                    node_tags=self.worker.config.tags,
                )
            )

    @property
    def reserved(self) -> int:
        """Jobs reserved (QUEUED) here and not started yet."""
        return len(self._reserved)

    # ------------------------------------------------------------------ progress and fencing
    def channel(self, job: ClaimedJob) -> ProgressChannel:
        """A progress channel for ``job``'s attempt (bound into its JobContext), writing as the
        node that claimed it."""
        # One dict read: atomic, so no lock (the poller writes the owners before the attempt).
        node = self._owners.get(job.key, self.worker.node_id)
        return ProgressChannel(self, job, node)

    def fenced(self, channel: ProgressChannel, exc: FencedOut) -> None:
        """A progress write was refused: log it as fatal once, count it, stop the local run."""
        job = channel.job
        with self._lock:
            if channel.reported:
                return
            channel.reported = True
        worker = self.worker
        self.stats.fenced_progress += 1
        worker.stats.fenced_out += 1
        worker.stats.by_job[job.job_id] = "FENCED_OUT"
        log_about(
            log,
            logging.ERROR,
            (job.job_id, job.attempt, channel.node_id),
            "fatal: FencedOut: job %s epoch %d: node %s no longer owns it (taken over, canceled "
            "or ended); this run is stopped and its outcome discarded",
            job.job_id,
            job.epoch,
            channel.node_id,
        )
        now = worker.app.now()
        worker.request_cancellation(job.job_id, FENCED_REASON, job.epoch)
        worker.app.emit(JobEvent(EventKind.FENCED_OUT, job.job_id, now, channel.node_id))

    def revived(self, job: ClaimedJob) -> None:
        self.stats.revived += 1
        log_about(
            log,
            logging.WARNING,
            (job.job_id, job.attempt, self.node_id),
            "job %s epoch %d: progress revived it from TIMED_OUT",
            job.job_id,
            job.epoch,
        )
        self.worker.app.emit(
            JobEvent(
                EventKind.REVIVED,
                job.job_id,
                self.worker.app.now(),
                self.node_id,
                {"epoch": job.epoch},
            )
        )

    def finish(
        self,
        job: ClaimedJob,
        attempt: Attempt,
        outcome: Outcome | None,
        channel: ProgressReporter | None = None,
    ) -> Outcome | None:
        """The attempt returned: its outcome, or None when it must not be written (its progress
        ``channel`` was fenced out, or it stopped on the drain's request and is handed back
        instead)."""
        key = job.key
        self._owners.pop(key, None)  # one dict operation: atomic
        if isinstance(channel, ProgressChannel) and channel.fenced is not None:
            return None
        if (
            outcome is not None
            and outcome.kind in (OutcomeKind.RETRY, OutcomeKind.DEAD)
            and self.state is NodeState.DRAINING
            and attempt.cancellation.is_requested()
            and attempt.cancellation.reason == DRAIN_REASON
        ):
            self.worker.completer.timeouts.pop(key, None)
            self.stats.drain_stops += 1
            log_about(
                log,
                logging.INFO,
                (job.job_id, job.attempt, self.worker.node_id),
                "job %s stopped for the drain; it is handed back",
                job.job_id,
            )
            return None
        return outcome

    # ------------------------------------------------------------------ drain
    def begin_drain(self) -> None:
        """DRAINING: no more claims or takeovers; running attempts are asked to stop."""
        worker = self.worker
        with self._switch:
            self.state = NodeState.DRAINING
        now = worker.app.now()
        try:
            self.store.set_draining(worker.node_id, now=now)
        except Exception as exc:
            log.error("drain: could not mark node %s DRAINING: %s", worker.node_id, exc)
        for attempt in worker.slots.attempts():
            attempt.cancellation.request(DRAIN_REASON, now)

    def hand_back(self) -> tuple[int, int]:
        """Hand every job this incarnation still owns back (QUEUED -> PENDING, RUNNING ->
        takeover-eligible at once)."""
        self._reserved.clear()
        queued, running = self.store.hand_back(
            self.worker.node_id, None, now=self.worker.app.now(), settings=self.settings
        )
        self.stats.handed_back += queued + running
        if queued or running:
            log.warning(
                "drain: handed back %d reserved job(s) and %d running job(s) (takeover-eligible "
                "at once)",
                queued,
                running,
            )
        return queued, running

    def readiness(self) -> dict[str, Any]:
        """For a readiness probe: ``ready`` is False while draining or stopped."""
        ready = self.state is NodeState.ALIVE and not self.worker.draining
        return {"ready": ready, "state": self.state.value, "node_id": self.node_id}


class WatcherTask:
    """The watcher as a periodic task (every node runs it; passes are idempotent)."""

    name = "watcher"
    cluster_wide = True
    """Work for the whole cluster: spread over the live nodes (``ClusterShare``)."""

    def __init__(self, interval: timedelta, rng: random.Random | None = None) -> None:
        self._interval = interval
        self._rng = rng or random.Random()
        """Its own generator: the jitter never reads or advances the global ``random`` state
        (which applications and test frameworks such as Hypothesis seed and replay)."""

    @property
    def interval(self) -> timedelta:
        """The configured interval with +-20 % jitter, so nodes do not pass in lockstep."""
        return self._interval * self._rng.uniform(0.8, 1.2)

    @interval.setter
    def interval(self, value: timedelta) -> None:
        self._interval = value

    def run_once(self, worker: WorkerHost) -> None:
        worker.liveness.watch_once()
