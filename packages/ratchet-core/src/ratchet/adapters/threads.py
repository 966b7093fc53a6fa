"""Built-in plugin: the bounded thread-pool executor provider (the default)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from ratchet import hookimpl

T = TypeVar("T")


class ThreadExecutorProvider:
    """Runs attempts on a fixed pool of threads named ``ratchet-job-N``."""

    name = "threads"

    def __init__(self, max_workers: int) -> None:
        self.max_workers = max_workers
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="ratchet-job")

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        return self._pool.submit(fn)

    def shutdown(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=True)


@hookimpl
def ratchet_register_executor_providers(registry: Any) -> None:
    registry.add("threads", ThreadExecutorProvider)
