"""The completer: writes attempt outcomes in batches and reports what they did.

Job tasks hand their outcomes over with :meth:`Completer.put`; one writer thread takes what has
queued (up to ``completion_batch``) and records it in one fenced transaction. A write of fewer
outcomes than half a claim, while other runs are in flight, first waits a window sized by how long
the jobs run (:func:`~ratchet.domain.batching.gather_window`; none for jobs under 25 ms), so the
runs of one claim that end close together are written together. A database outage
is waited out with backoff (nothing is lost: the jobs stay RUNNING here until written); an
outcome the store refuses for any other reason is isolated and its job failed with
:class:`~ratchet.domain.errors.OutcomeNotStorable`, so one bad outcome never holds up the rest.
After each write it updates the worker's stats, emits the outcome events, runs the workflow
effects and frees the slots.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ratchet.domain.batching import gather_window
from ratchet.domain.errors import OutcomeNotStorable, StoreUnavailable
from ratchet.domain.model import AttemptKey, Outcome, OutcomeKind, attempt_key
from ratchet.domain.text import describe_error
from ratchet.domain.workflow import FlowEffect
from ratchet.engine.context import log_about
from ratchet.engine.sanitizing import sanitized_error
from ratchet.engine.workflows import after_flow_write
from ratchet.events import EventKind, JobEvent
from ratchet.named_thread import NamedThread

if TYPE_CHECKING:
    from ratchet.engine.host import WorkerHost

log = logging.getLogger("ratchet.worker")


class Completer:
    """The batched outcome writer of one worker."""

    def __init__(
        self,
        worker: WorkerHost,
        batch_limit: int,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.worker = worker
        self._batch_limit = batch_limit
        self._sleep = sleep
        self._queue: queue.SimpleQueue[Outcome | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.timeouts: dict[AttemptKey, dict[str, Any]] = {}
        """Timing of attempts that timed out, for their TIMED_OUT event (by job and epoch)."""

    def start(self) -> None:
        self._thread = NamedThread(target=self._write_loop, name="ratchet-writer")
        self._thread.start()

    def put(self, outcome: Outcome) -> None:
        """Queue ``outcome`` for the next batch (its slot stays taken until it is written)."""
        self._queue.put(outcome)

    def stop(self, deadline: float) -> None:
        """Write what is queued (a bounded effort past ``deadline``, monotonic) and stop."""
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout=max(1.0, deadline - time.monotonic()))
        self.flush()

    def flush(self) -> None:
        """Write what is queued now, on this thread (one attempt through an outage)."""
        self._flush_remaining()

    def _write_loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            self._write(self.take_batch(first), retry_forever=True)

    def take_batch(self, first: Outcome) -> list[Outcome]:
        """``first`` and what queued behind it, up to the batch limit. A batch of fewer than
        half a claim, while other runs are in flight, waits the batching window once and takes
        what queued meanwhile. A stop request ends the batch at once (and stays queued)."""
        batch = [first]
        if self._drain_into(batch):
            return batch
        slots = self.worker.slots
        self._observe_run_times(batch)
        if len(batch) < slots.wake_at and slots.in_flight():
            window = gather_window(slots.run_times.mean)
            if window > 0:
                self._sleep(window)  # a batching window: runs in flight may end within it
                self._drain_into(batch)
        return batch

    def _drain_into(self, batch: list[Outcome]) -> bool:
        """Move queued outcomes into ``batch`` up to the limit; True at a stop request."""
        while len(batch) < self._batch_limit:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return False
            if item is None:
                self._queue.put(None)
                return True
            batch.append(item)
        return False

    def _observe_run_times(self, batch: list[Outcome]) -> None:
        """Feed the run times of (at most about eight of) ``batch`` to the slots' mean."""
        step = max(1, len(batch) // 8)
        self.worker.slots.run_times.observe(
            [(o.finished_at - o.started_at).total_seconds() for o in batch[::step]]
        )

    def _flush_remaining(self) -> None:
        batch = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                batch.append(item)
        if batch:
            self._write(batch, retry_forever=False)

    def record(self, outcomes: list[Outcome]) -> list[uuid.UUID]:
        """Write outcomes now (one transaction) and emit their events; returns fenced ids."""
        worker = self.worker
        if len({o.job_id.int for o in outcomes}) < len(outcomes):
            # Two attempts of one job (a zombie's and the current one): fenced ids would be
            # ambiguous, so a job's second outcome goes in a separate write.
            first: dict[uuid.UUID, Outcome] = {}
            rest: list[Outcome] = []
            for o in outcomes:
                if o.job_id in first:
                    rest.append(o)
                else:
                    first[o.job_id] = o
            return self.record(list(first.values())) + self.record(rest)
        app = worker.app
        started = time.perf_counter()
        written = worker.store.record_outcomes(
            worker.node_id, outcomes, now=app.now(), resolve=app.resolver
        )
        fenced = list(written.fenced)
        if worker.meter.enabled:
            timed_out = {attempt_key(o.job_id, o.epoch) for o in outcomes} & self.timeouts.keys()
            worker.meter.written(outcomes, set(fenced), timed_out, time.perf_counter() - started)
        self.report(outcomes, set(fenced), written.effects)
        return fenced

    def _write(self, batch: list[Outcome], *, retry_forever: bool) -> None:
        """Record ``batch``: through database outages with backoff (until stopping, unless
        ``retry_forever``); an outcome the store refuses for any other reason is isolated and
        its job failed with a storable error, so it never holds up the rest."""
        worker = self.worker
        delay = 0.05
        pending = batch
        while pending:
            try:
                self.record(pending)
                worker.outages.succeeded()
                break
            except StoreUnavailable as exc:
                worker.outages.failed(exc)
            except Exception as exc:
                pending = self._write_one_by_one(pending, exc)
                if not pending:
                    break
            if not retry_forever:
                log.error(
                    "could not record %d outcome(s); the watcher will recover their jobs",
                    len(pending),
                )
                break
            time.sleep(delay)  # waiting out a database outage, not synchronising
            delay = min(delay * 2, 5.0)
        if worker.slots.written(len(batch)):
            worker.producer.wake()  # the written runs' slots are free now

    def _write_one_by_one(self, batch: list[Outcome], error: Exception) -> list[Outcome]:
        """After a batch write failed with ``error`` (not an outage): write each outcome on its
        own; one the store refuses becomes a dead-lettering failure that names the refusal.
        Returns what is left to write once the database is reachable again."""
        worker = self.worker
        log.error(
            "writing %d outcome(s) failed (%s); writing them one at a time to isolate the "
            "outcome the store refuses",
            len(batch),
            sanitized_error(worker.app, error),
        )
        for index, outcome in enumerate(batch):
            try:
                self.record([outcome])
                continue
            except StoreUnavailable as exc:
                worker.outages.failed(exc)
                return batch[index:]
            except Exception as exc:
                refused = self._refused_outcome(outcome, exc)
            try:
                self.record([refused])
            except StoreUnavailable as exc:
                worker.outages.failed(exc)
                return [refused, *batch[index + 1 :]]
            except Exception as exc:
                worker.stats.store_errors += 1
                log_about(
                    log,
                    logging.ERROR,
                    (outcome.job_id, outcome.attempt, worker.node_id),
                    "job %s: the store refused even the failure that replaced its outcome (%s); "
                    "the job stays RUNNING here until the watcher recovers it",
                    outcome.job_id,
                    sanitized_error(worker.app, exc),
                )
        return []

    def _refused_outcome(self, outcome: Outcome, exc: Exception) -> Outcome:
        """The dead-lettering failure that replaces an outcome the store refused."""
        worker = self.worker
        worker.stats.store_errors += 1
        error = OutcomeNotStorable(
            f"the {outcome.kind.value} outcome of attempt {outcome.attempt} could not be "
            f"stored ({sanitized_error(worker.app, exc)}); the job was failed instead"
        )
        log_about(
            log,
            logging.ERROR,
            (outcome.job_id, outcome.attempt, worker.node_id),
            "job %s: %s",
            outcome.job_id,
            error,
        )
        return Outcome(
            outcome.job_id,
            outcome.epoch,
            outcome.attempt,
            OutcomeKind.DEAD,
            outcome.started_at,
            outcome.finished_at,
            error=describe_error(error),
            flow_effects=outcome.flow_effects,
        )

    def report(
        self, outcomes: list[Outcome], fenced: set[uuid.UUID], effects: Sequence[FlowEffect] = ()
    ) -> None:
        """Account for written ``outcomes`` (``fenced``: those refused): stats, logs, events,
        retry wake-ups and the workflow ``effects`` the write returned."""
        worker = self.worker
        stats = worker.stats
        stats.outcome_batches += 1
        observed = worker.app.observed()  # build events only if somebody listens
        debug = log.isEnabledFor(logging.DEBUG)
        for o in outcomes:
            timeout = self.timeouts.pop(attempt_key(o.job_id, o.epoch), None)
            if fenced and o.job_id in fenced:
                stats.fenced_out += 1
                stats.by_job[o.job_id] = "FENCED_OUT"
                log_about(  # fatal for this run, logged once (its write is never retried)
                    log,
                    logging.ERROR,
                    (o.job_id, o.attempt, worker.node_id),
                    "fatal: FencedOut: job %s epoch %d: this node no longer owns it (canceled, "
                    "recovered or taken over); its outcome %s was discarded",
                    o.job_id,
                    o.epoch,
                    o.kind.value,
                )
                if observed:
                    worker.app.emit(
                        JobEvent(EventKind.FENCED_OUT, o.job_id, o.finished_at, worker.node_id)
                    )
                continue
            stats.by_job[o.job_id] = o.kind.value
            if debug:
                log_about(
                    log,
                    logging.DEBUG,
                    (o.job_id, o.attempt, worker.node_id),
                    "job %s attempt %d: %s in %.3f s%s",
                    o.job_id,
                    o.attempt,
                    o.kind.value,
                    (o.finished_at - o.started_at).total_seconds(),
                    f" ({o.error})" if o.error else "",
                )
            if o.kind is OutcomeKind.SUCCEEDED:
                stats.succeeded += 1
            elif o.kind is OutcomeKind.RESCHEDULE:
                stats.rescheduled += 1
            else:
                if timeout is not None:
                    stats.timed_out += 1
                if o.kind is OutcomeKind.RETRY:
                    stats.retried += 1
                else:
                    stats.dead_lettered += 1
            if o.retry_at is not None and o.kind in (OutcomeKind.RETRY, OutcomeKind.RESCHEDULE):
                worker.producer.wake_at(o.retry_at)
            if observed:
                for event in self._outcome_events(o, timeout):
                    worker.app.emit(event)
        after_flow_write(worker, effects)  # callbacks, chain/batch events, wakeups

    def _outcome_events(self, o: Outcome, timeout: dict[str, Any] | None) -> list[JobEvent]:
        """The events of one written outcome, in the order listeners see them."""
        worker = self.worker
        data: dict[str, Any] = {"attempt": o.attempt, "error": o.error}

        def event(kind: EventKind, payload: dict[str, Any]) -> JobEvent:
            return JobEvent(kind, o.job_id, o.finished_at, worker.node_id, payload)

        if o.kind is OutcomeKind.SUCCEEDED:
            return [event(EventKind.COMPLETED, data)]
        if o.kind is OutcomeKind.RESCHEDULE:
            return [event(EventKind.RESCHEDULED, data)]
        events = [event(EventKind.TIMED_OUT, timeout)] if timeout is not None else []
        events.append(event(EventKind.FAILED, data))
        if o.kind is OutcomeKind.RETRY:
            events.append(event(EventKind.RETRYING, {**data, "retry_at": o.retry_at}))
        else:
            events.append(event(EventKind.DEAD_LETTERED, data))
        return events
