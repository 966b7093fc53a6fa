"""``JobContext``: what a running job knows about itself, bound per attempt via contextvars.

Also the attempt's cooperative cancellation (docs/timeouts.md, safe points): each attempt
owns an :class:`AttemptCancellation` (created cleared) that the watchdog or an operator sets;
the job polls it through :meth:`JobContext.is_cancellation_requested` or
:meth:`JobContext.throw_if_cancellation_requested`.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from ratchet.domain.quick_init import quick_init
from ratchet.domain.watcher import Checkpoint

if TYPE_CHECKING:
    from ratchet.engine.joblogger import JobLogger

_current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar(
    "ratchet_job_context", default=None
)


@quick_init
@dataclass(frozen=True)
class JobContext:
    """The running attempt: ids, parameters and tags. Obtain it with :meth:`current`."""

    job_id: uuid.UUID
    attempt: int
    epoch: int
    node_id: str
    scheduled_time: datetime
    params: Mapping[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    cancellation: AttemptCancellation | None = field(default=None, repr=False, compare=False)
    """The attempt's cancellation request (None: not a watched attempt)."""
    progress: ProgressReporter | None = field(default=None, repr=False, compare=False)
    """Where progress and checkpoints go (None: not run by a worker of this process)."""
    signals: Callable[[uuid.UUID], Any] | None = field(default=None, repr=False, compare=False)
    """Reads the signal delivered to a job (None: not run by a worker of this process)."""
    caller_principal: str | None = None
    """Who submitted the job (stored at submit, never changed; None: anonymous)."""
    job_log: JobLogger | None = field(default=None, repr=False, compare=False)
    """Where :meth:`logger` writes (None: lines go to Python logging only)."""

    @staticmethod
    def current() -> JobContext:
        """The context of the job running on this thread.

        :raises RuntimeError: no job is running here.
        """
        ctx = _current.get()
        if ctx is None:
            raise RuntimeError("JobContext.current() called outside a running job")
        return ctx

    @staticmethod
    def current_or_none() -> JobContext | None:
        """The context of the running job, or None outside a job."""
        return _current.get()

    def param(self, key: str, default: str | None = None) -> str | None:
        """A parameter set with ``with_param``."""
        return self.params.get(key, default)

    def signal(self) -> Any:
        """The payload (JSON-native) or :class:`~ratchet.SignalDecision` delivered to this job
        by ``app.deliver_signal``; None if none was delivered."""
        if self.signals is None:
            raise RuntimeError(
                "JobContext.signal() is only available inside a job run by a worker of this process"
            )
        return self.signals(self.job_id)

    def logger(self) -> JobLogger:
        """The job's own logger: its lines are stored with this attempt (bounded, see
        docs/retention.md) and shown by ``ratchet jobs show`` and ``ratchet dlq show``; they
        also go to Python logging as ``ratchet.job``. Writing a line never raises."""
        if self.job_log is not None:
            return self.job_log
        from datetime import UTC
        from datetime import datetime as _datetime

        from ratchet.engine.joblogger import JobLogger

        return JobLogger(None, lambda: _datetime.now(UTC))

    def fencing_token(self) -> tuple[uuid.UUID, int]:
        """``(job_id, epoch)``: pass it to side effects outside the store to fence zombies."""
        return (self.job_id, self.epoch)

    # -- progress and checkpoints (docs/clustering.md, "Liveness, takeover and recovery") ------
    def checkpoint(self, step: int, data: Any = None) -> None:
        """Save where the job is: ``step`` (an int that never goes back within a run) and JSON
        ``data``. A fenced write that counts as progress; a run that resumes after a takeover
        (or a retry) starts from :meth:`last_checkpoint`.

        :raises FencedOut: this node no longer owns the job; stop at once (nothing was written).
        """
        self._reporter().checkpoint(step, data)

    def touch(self) -> None:
        """Report progress without data (a fenced write; keeps a long step from stalling).

        :raises FencedOut: this node no longer owns the job; stop at once.
        """
        self._reporter().touch()

    def last_checkpoint(self) -> Checkpoint | None:
        """The last checkpoint of this job (written by this run or an earlier one), or None."""
        return self._reporter().last_checkpoint()

    def _reporter(self) -> ProgressReporter:
        if self.progress is None:
            raise RuntimeError(
                "progress and checkpoints need a job run by a worker in this process"
            )
        return self.progress

    def deadline(self) -> datetime | None:
        """When the watchdog interrupts this attempt; None where no watched attempt is bound."""
        return self.cancellation.deadline if self.cancellation is not None else None

    def is_cancellation_requested(self) -> bool:
        """True once Ratchet asked this attempt to stop. Cheap: reads a flag, no I/O."""
        return self.cancellation is not None and self.cancellation.is_requested()

    def throw_if_cancellation_requested(self) -> None:
        """Raise :class:`CancellationRequestedException` if a stop was requested.

        Call it between units of work: the attempt then ends as a timeout at a safe point.
        """
        if self.cancellation is not None and self.cancellation.is_requested():
            raise CancellationRequestedException(
                f"job {self.job_id} attempt {self.attempt}: {self.cancellation.reason}",
                context=self,
            )


class ProgressReporter(Protocol):
    """Fenced progress writes of one attempt (the worker's liveness support implements it)."""

    def checkpoint(self, step: int, data: Any) -> None: ...

    def touch(self) -> None: ...

    def last_checkpoint(self) -> Checkpoint | None: ...


class CancellationFlag(Protocol):
    """Where an attempt's request bit lives (a plain flag in process, shared memory across
    processes)."""

    def is_set(self) -> bool: ...

    def set(self) -> None: ...


class AttemptToken:
    """Opaque identity of one attempt; exceptions remember the token they were created under."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<attempt {id(self):#x}>"


class _Flag:
    """The in-process request bit (set under the cancellation's lock, read without it)."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True


class AttemptCancellation:
    """The cancellation request of one attempt: created cleared, set at most once.

    The watchdog sets it at deadline - grace and at the deadline; ``cancel_job(id,
    interrupt=True)`` and a draining worker set it too. Reading it is a flag read.
    """

    __slots__ = ("_deadline", "_flag", "_listeners", "_lock", "reason", "requested_at", "token")

    def __init__(
        self, deadline: datetime | None = None, *, flag: CancellationFlag | None = None
    ) -> None:
        self._deadline = deadline
        self._flag: CancellationFlag = flag if flag is not None else _Flag()
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self.token = AttemptToken()
        self.reason = "cancellation requested"
        self.requested_at: datetime | None = None

    @property
    def deadline(self) -> datetime | None:
        """When the watchdog interrupts the attempt (None: unwatched)."""
        return self._deadline

    def is_requested(self) -> bool:
        """True once a stop was requested."""
        return self._flag.is_set()

    def request(self, reason: str, at: datetime | None = None) -> bool:
        """Set the request; True if this call set it. Listeners run on the caller's thread."""
        with self._lock:
            if self._flag.is_set():
                return False
            self.reason = reason
            self.requested_at = at
            self._flag.set()
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener()
            except Exception:
                logging.getLogger("ratchet.worker").exception("cancellation listener failed")
        return True

    def add_listener(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` when the request is set (now, if it already is); returns a remover."""
        with self._lock:
            already = self._flag.is_set()
            if not already:
                self._listeners.append(listener)
        if already:
            listener()

        def remove() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove


class CancellationRequestedException(Exception):
    """A job stopped because its attempt was asked to stop (raise it at a safe point).

    It counts as a timeout (same retries, backoff, DLQ and ``execution_timed_out`` event, but no
    interrupt) only if it was created *after* the request and *in the attempt that fails with
    it*; both are recorded when it is constructed. One created before the request, or kept from an
    earlier attempt and raised again, is an ordinary failure. It also counts as the ``__cause__``
    or ``__context__`` of another exception. Off the job's thread, build it with
    :meth:`for_context`.
    """

    def __init__(
        self, message: str = "cancellation requested", *, context: JobContext | None = None
    ) -> None:
        super().__init__(message)
        ctx = context if context is not None else _current.get()
        state = ctx.cancellation if ctx is not None else None
        self.attempt_token: AttemptToken | None = state.token if state is not None else None
        """The attempt it was created in (None: outside a watched attempt)."""
        self.created_after_request: bool = state is not None and state.is_requested()
        """Whether the attempt's request was already set when it was created."""

    @classmethod
    def for_context(cls, message: str, ctx: JobContext) -> CancellationRequestedException:
        """Create one for the attempt of ``ctx`` (from any thread, e.g. a helper thread)."""
        return cls(message, context=ctx)

    def counts_for(self, token: AttemptToken) -> bool:
        """Whether it stops attempt ``token`` as a timeout."""
        return self.created_after_request and self.attempt_token is token


def stopped_on_request(exc: BaseException, token: AttemptToken) -> bool:
    """True if ``exc`` or any exception in its cause / context chain (or an exception group)
    is a :class:`CancellationRequestedException` that counts for attempt ``token``."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, CancellationRequestedException) and current.counts_for(token):
            return True
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                pending.append(linked)
    return False


def bind(ctx: JobContext) -> contextvars.Token[JobContext | None]:
    """Make ``ctx`` the current job context until :func:`unbind` is given the token returned
    (the attempt runner's form of :func:`bound`, without a generator per job)."""
    return _current.set(ctx)


def unbind(token: contextvars.Token[JobContext | None]) -> None:
    """Restore the job context that was current before the :func:`bind` that gave ``token``."""
    _current.reset(token)


@contextmanager
def bound(ctx: JobContext) -> Iterator[JobContext]:
    """Bind ``ctx`` as the current job context for the duration of the block."""
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)


_factory_installed = False


class _About(NamedTuple):
    job_id: str
    attempt: int | None
    node_id: str | None


_about_job: contextvars.ContextVar[_About | None] = contextvars.ContextVar(
    "ratchet_about_job", default=None
)


@contextmanager
def about_job(
    job_id: object, attempt: int | None = None, node_id: str | None = None
) -> Iterator[None]:
    """Log records made in this block carry ``job_id``, ``attempt`` and ``node_id`` (for code
    that acts on a job from outside its attempt: the watchdog, the completer, the watcher)."""
    token = _about_job.set(_About(str(job_id), attempt, node_id))
    try:
        yield
    finally:
        _about_job.reset(token)


def install_log_record_factory() -> None:
    """Give every log record ``ratchet_job_id``, ``ratchet_attempt`` and ``ratchet_node_id``
    attributes (None outside a job), and ``ratchet_job``: ``" [job=ID attempt=N]"`` or empty,
    for text log formats.

    The job's own records (made inside its attempt) take them from its :class:`JobContext`;
    records the worker makes about a job elsewhere take them from :func:`about_job`.
    Idempotent; chains to the previous factory.
    """
    global _factory_installed
    if _factory_installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        ctx = _current.get()
        if ctx is not None:
            job_id: str | None = str(ctx.job_id)
            attempt: int | None = ctx.attempt
            node_id: str | None = ctx.node_id
        else:
            about = _about_job.get()
            job_id, attempt, node_id = about if about is not None else (None, None, None)
        record.ratchet_job_id = job_id
        record.ratchet_attempt = attempt
        record.ratchet_node_id = node_id
        if job_id is None:
            record.ratchet_job = ""
        elif attempt is None:
            record.ratchet_job = f" [job={job_id}]"
        else:
            record.ratchet_job = f" [job={job_id} attempt={attempt}]"
        return record

    logging.setLogRecordFactory(factory)
    _factory_installed = True


def log_about(
    logger: logging.Logger,
    level: int,
    job: tuple[object, int | None, str | None],
    msg: str,
    *args: object,
    exc_info: bool = False,
) -> None:
    """Log ``msg % args`` at ``level`` about ``job`` (``(job_id, attempt, node_id)``): the record
    carries those fields as if it were made inside :func:`about_job`."""
    if logger.isEnabledFor(level):
        with about_job(*job):
            logger.log(level, msg, *args, exc_info=exc_info, stacklevel=2)
