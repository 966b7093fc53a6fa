"""Built-in plugin: the ``asyncio`` executor provider (the default for ``async def`` targets).

All coroutine jobs of a worker run as tasks on one event loop thread, so they can share
loop-bound clients. Each running job also holds one slot thread that waits for its task (the
worker's bookkeeping is synchronous). At the deadline the task is cancelled; a coroutine that
swallows the cancellation, or blocks the loop in C code, keeps its slot as a zombie until it
ends. A plain (non-async) target sent here runs on its slot thread like the ``threads``
provider.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

from ratchet import hookimpl
from ratchet.adapters.threads import InterruptiblePool, run_interruptibly
from ratchet.domain.errors import JobTimeoutError
from ratchet.named_thread import NamedThread
from ratchet.ports import AttemptControl, JobCall

if TYPE_CHECKING:
    from ratchet.registry import ExecutorRegistry

T = TypeVar("T")


class TaskCancelled(RuntimeError):
    """The job's task was cancelled by something other than its deadline."""


class AsyncioExecutorProvider:
    """Coroutine jobs on one event loop thread (``ratchet-asyncio``); deadline = task.cancel()."""

    name = "asyncio"

    def __init__(self, max_workers: int) -> None:
        self.max_workers = max_workers
        self._pool = InterruptiblePool(max_workers, "ratchet-aio-slot")
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The provider's event loop (started on first use)."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    try:
                        loop.run_forever()
                    finally:
                        for task in asyncio.all_tasks(loop):
                            task.cancel()  # zombies still running at shutdown
                        loop.run_until_complete(asyncio.sleep(0))
                        loop.close()

                self._thread = NamedThread(target=serve, name="ratchet-asyncio")
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        return self._pool.submit(fn)

    def run(self, call: JobCall, control: AttemptControl) -> Any:
        if not inspect.iscoroutinefunction(call.fn):
            return run_interruptibly(call.invoke, control)
        loop = self.loop
        context = contextvars.copy_context()  # carries the bound JobContext into the task
        done: Future[Any] = Future()
        state: dict[str, Any] = {"task": None, "interrupted": False}

        def start() -> None:
            try:
                coro: Coroutine[Any, Any, Any] = context.run(call.fn, *call.args, **call.kwargs)
                task = loop.create_task(coro, context=context)
            except BaseException as exc:
                done.set_exception(exc)
                return
            state["task"] = task
            task.add_done_callback(settle)

        def settle(task: asyncio.Task[Any]) -> None:
            if task.cancelled():
                if state["interrupted"]:
                    done.set_exception(
                        JobTimeoutError("the job's task was cancelled at its deadline")
                    )
                else:
                    done.set_exception(TaskCancelled("the job's task was cancelled"))
                return
            exc = task.exception()
            if exc is not None:
                done.set_exception(exc)
            else:
                done.set_result(task.result())

        def cancel() -> None:
            task = state["task"]
            if task is not None and not task.done():
                state["interrupted"] = True
                task.cancel("deadline")

        def interrupt() -> None:
            loop.call_soon_threadsafe(cancel)

        with control.watch(interrupt=interrupt):
            loop.call_soon_threadsafe(start)
            return done.result()

    def shutdown(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait)
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None and wait:
                thread.join(timeout=5)


@hookimpl
def ratchet_register_executor_providers(registry: ExecutorRegistry) -> None:
    registry.add("asyncio", AsyncioExecutorProvider)
