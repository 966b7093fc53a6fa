"""Built-in plugin: the bounded thread-pool executor provider (the default).

Python cannot kill a thread. At the deadline this provider raises
:class:`~ratchet.domain.errors.JobTimeoutError` inside the job's thread with
``PyThreadState_SetAsyncExc``; it lands at the next bytecode boundary. A thread blocked in C code
(``time.sleep``, a socket read without timeout) does not see it until the call returns: the
worker has then already recorded the timeout and counts the thread as a zombie that occupies its
slot until it returns.

An interrupt is only ever delivered while the job's own call runs: each pool thread arms a guard
around the call and disarms it after, clearing an exception that was sent but not yet raised, so
it can never land in the worker's bookkeeping or in the next job.
"""

from __future__ import annotations

import ctypes
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

from ratchet import hookimpl
from ratchet.domain.errors import JobTimeoutError
from ratchet.named_thread import NamedThread
from ratchet.ports import AttemptControl, JobCall

if TYPE_CHECKING:
    from ratchet.registry import ExecutorRegistry

T = TypeVar("T")

log = logging.getLogger("ratchet.executor")


def _set_async_exc(ident: int, exc: type[BaseException] | None) -> int:
    """Schedule ``exc`` in thread ``ident`` (None clears a pending one); threads affected."""
    arg = ctypes.py_object(exc) if exc is not None else None
    changed = int(ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), arg))
    if changed > 1:  # pragma: no cover - CPython documents this as a must-undo case
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), None)
        return 0
    return changed


class InterruptGuard:
    """Lets a watchdog raise ``JobTimeoutError`` in one thread, only while it is armed."""

    def __init__(self, ident: int) -> None:
        self.ident = ident
        self._lock = threading.Lock()
        self._armed = False
        self._sent = False

    def arm(self) -> None:
        with self._lock:
            self._armed = True
            self._sent = False

    def disarm(self) -> None:
        """Stop accepting interrupts and clear one that was sent but has not landed yet."""
        while True:
            try:
                with self._lock:
                    self._armed = False
                    if self._sent:
                        _set_async_exc(self.ident, None)
                        self._sent = False
                return
            except JobTimeoutError:  # landed while disarming; nothing is pending any more
                continue

    def interrupt(self) -> bool:
        """Raise ``JobTimeoutError`` in the thread if armed; True if sent."""
        with self._lock:
            if not self._armed or self._sent:
                return False
            self._sent = _set_async_exc(self.ident, JobTimeoutError) == 1
            return self._sent

    @property
    def sent(self) -> bool:
        """An interrupt was sent since the guard was last armed."""
        return self._sent


_local = threading.local()


def current_guard() -> InterruptGuard:
    """The interrupt guard of the calling thread."""
    guard: InterruptGuard | None = getattr(_local, "guard", None)
    if guard is None:
        guard = InterruptGuard(threading.get_ident())
        _local.guard = guard
    return guard


def run_interruptibly(fn: Callable[[], T], control: AttemptControl) -> T:
    """Call ``fn`` on this thread; at the deadline, ``JobTimeoutError`` is raised inside it."""
    guard = current_guard()
    guard.arm()
    try:
        with control.watch(interrupt=guard.interrupt):
            return fn()
    except JobTimeoutError as exc:
        if not guard.sent:
            raise  # the call's own, or watch() found the deadline passed: it has its message
        # The interrupt arrives as the bare class: give it the attempt's message, keep the
        # traceback (it shows where the call was when the deadline passed).
        raise JobTimeoutError(timeout_message(control)).with_traceback(exc.__traceback__) from None
    finally:
        guard.disarm()


def timeout_message(control: AttemptControl) -> str:
    """What an interrupted attempt's ``JobTimeoutError`` says: the attempt's own message when
    the control has one (the worker's attempts do), else its deadline."""
    message = getattr(control, "timeout_message", None)
    if callable(message):
        return str(message())
    deadline = control.deadline
    when = f" ({deadline.isoformat()})" if deadline is not None else ""
    return f"the attempt ran past its deadline{when} and was interrupted"


class InterruptiblePool:
    """A bounded pool of daemon threads (a stuck zombie never blocks interpreter exit)."""

    def __init__(self, max_workers: int, name: str) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.max_workers = max_workers
        self.name = name
        self._queue: queue.SimpleQueue[tuple[Future[Any] | None, Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._shutdown = False

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        self._put(future, fn)
        return future

    def dispatch(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` on a pool thread with no future (its errors are logged)."""
        self._put(None, fn)

    def dispatch_many(self, fns: Sequence[Callable[[], object]]) -> None:
        """Run each of ``fns`` on a pool thread with no future, under one lock."""
        with self._lock:
            if self._shutdown:
                raise RuntimeError(f"{self.name} pool is shut down")
            for fn in fns:
                self._queue.put((None, fn))
            self._grow(len(fns))

    def _put(self, future: Future[Any] | None, fn: Callable[[], Any]) -> None:
        with self._lock:
            if self._shutdown:
                raise RuntimeError(f"{self.name} pool is shut down")
            self._queue.put((future, fn))
            self._grow(1)

    def _grow(self, added: int) -> None:
        """``added`` items were queued: idle threads take what they can, new threads (up to
        the bound) the rest. Called under the lock."""
        woken = min(self._idle, added)
        self._idle -= woken
        for _ in range(min(added - woken, self.max_workers - len(self._threads))):
            thread = NamedThread(target=self._work, name=f"{self.name}-{len(self._threads)}")
            self._threads.append(thread)
            thread.start()

    def _work(self) -> None:
        while True:
            try:
                item = self._queue.get()
                if item is None:
                    return
                future, fn = item
                if future is None:
                    try:
                        fn()
                    except BaseException:
                        log.exception("a dispatched task failed")
                elif future.set_running_or_notify_cancel():
                    try:
                        result = fn()
                    except BaseException as exc:
                        future.set_exception(exc)
                    else:
                        future.set_result(result)
                del item, future, fn
                with self._lock:
                    self._idle += 1
            except JobTimeoutError:  # pragma: no cover - the guard clears strays; be safe
                log.warning("a stray job timeout reached idle pool thread; ignored")

    def shutdown(self, wait: bool = True) -> None:
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
            threads = list(self._threads)
        while True:  # cancel what never started
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None and item[0] is not None:
                item[0].cancel()
        for _ in threads:
            self._queue.put(None)
        if wait:
            for thread in threads:
                thread.join()


class ThreadExecutorProvider:
    """Runs attempts on a fixed pool of threads named ``ratchet-job-N``; interrupts at the
    deadline with an asynchronous ``JobTimeoutError``."""

    name = "threads"

    def __init__(self, max_workers: int) -> None:
        self.max_workers = max_workers
        self._pool = InterruptiblePool(max_workers, "ratchet-job")

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        return self._pool.submit(fn)

    def dispatch(self, fn: Callable[[], object]) -> None:
        """Start ``fn`` without a future (the worker's path: it never reads the result)."""
        self._pool.dispatch(fn)

    def dispatch_many(self, fns: Sequence[Callable[[], object]]) -> None:
        self._pool.dispatch_many(fns)

    def run(self, call: JobCall, control: AttemptControl) -> Any:
        return run_interruptibly(call.invoke, control)

    def shutdown(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait)


@hookimpl
def ratchet_register_executor_providers(registry: ExecutorRegistry) -> None:
    registry.add("threads", ThreadExecutorProvider)
