"""The thread executor's pool: futures, dispatch without a future, failures, shutdown."""

from __future__ import annotations

import logging
import threading

import pytest

from ratchet.adapters.threads import InterruptiblePool, ThreadExecutorProvider
from ratchet.ports import Dispatcher


def test_submit_returns_the_result_through_a_future() -> None:
    pool = InterruptiblePool(2, "test")
    try:
        assert pool.submit(lambda: 6 * 7).result(timeout=5) == 42
    finally:
        pool.shutdown()


def test_dispatch_runs_the_task_without_a_future() -> None:
    pool = InterruptiblePool(2, "test")
    ran = threading.Event()
    try:
        assert pool.dispatch(ran.set) is None
        assert ran.wait(timeout=5)
    finally:
        pool.shutdown()


def test_a_failing_dispatched_task_is_logged_and_the_thread_lives_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = InterruptiblePool(1, "test")  # one thread: the second task needs it to survive
    done = threading.Event()

    def boom() -> None:
        raise RuntimeError("task exploded")

    try:
        with caplog.at_level(logging.ERROR, logger="ratchet.executor"):
            pool.dispatch(boom)
            pool.dispatch(done.set)
            assert done.wait(timeout=5), "the pool thread died with the failing task"
        failures = [r for r in caplog.records if r.getMessage() == "a dispatched task failed"]
        assert len(failures) == 1
        assert failures[0].exc_info is not None
        assert str(failures[0].exc_info[1]) == "task exploded"
    finally:
        pool.shutdown()


def test_shutdown_cancels_queued_futures_and_drops_queued_dispatches() -> None:
    pool = InterruptiblePool(1, "test")
    release = threading.Event()
    started = threading.Event()

    def block() -> None:
        started.set()
        release.wait(timeout=5)

    ran_late: list[str] = []
    pool.dispatch(block)
    assert started.wait(timeout=5)
    queued = pool.submit(lambda: "never")
    pool.dispatch(lambda: ran_late.append("late"))
    pool.shutdown(wait=False)
    release.set()
    assert queued.cancelled()
    assert ran_late == []
    with pytest.raises(RuntimeError, match="shut down"):
        pool.dispatch(lambda: None)


def test_the_thread_provider_is_a_dispatcher() -> None:
    provider = ThreadExecutorProvider(1)
    try:
        assert isinstance(provider, Dispatcher)
    finally:
        provider.shutdown()


def test_dispatch_many_runs_every_task_concurrently_within_the_bound() -> None:
    pool = InterruptiblePool(3, "test")
    inside = threading.Barrier(3, timeout=5)  # the three must run at the same time
    release, all_done = threading.Event(), threading.Event()
    done: list[int] = []
    lock = threading.Lock()

    def task(i: int) -> None:
        if i < 3:
            inside.wait()
            release.wait(timeout=5)
        with lock:
            done.append(i)
            if len(done) == 6:
                all_done.set()

    try:
        pool.dispatch_many([lambda i=i: task(i) for i in range(5)])
        release.set()
        pool.dispatch_many([lambda: task(5)])
        assert all_done.wait(timeout=5)
        assert sorted(done) == [0, 1, 2, 3, 4, 5]
        assert len(pool._threads) == 3, "never more threads than the bound"
    finally:
        pool.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        pool.dispatch_many([lambda: None])
