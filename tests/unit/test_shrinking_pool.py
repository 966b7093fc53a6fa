"""The store's pool: a resting process keeps one connection even when two of its threads meet."""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

import pytest

from ratchet.sql.pool import ShrinkingQueuePool
from ratchet.testing import assert_eventually


class CountingCreator:
    """Opens in-memory SQLite connections and counts them."""

    def __init__(self) -> None:
        self.opened = 0

    def __call__(self) -> sqlite3.Connection:
        self.opened += 1
        return sqlite3.connect(":memory:", check_same_thread=False)


def _pool(grow_after: float, **kw: Any) -> tuple[ShrinkingQueuePool, CountingCreator]:
    creator = CountingCreator()
    pool = ShrinkingQueuePool(
        creator, pool_size=5, max_overflow=5, pool_grow_after=grow_after, **kw
    )
    return pool, creator


def test_a_checkout_that_meets_the_resting_connection_in_use_waits_for_it() -> None:
    pool, creator = _pool(grow_after=30.0)
    held = pool.connect()
    got: list[Any] = []
    other = threading.Thread(target=lambda: got.append(pool.connect()))
    other.start()
    assert_eventually(lambda: pool.waiting_to_grow == 1, 10, "a checkout waiting", interval=0.001)
    held.close()  # back to the pool: the waiting checkout takes it
    other.join(10)
    assert got and creator.opened == 1
    assert pool.grew_after_wait == 0
    got[0].close()
    pool.dispose()


def test_a_connection_held_past_the_grace_makes_the_pool_grow() -> None:
    pool, creator = _pool(grow_after=0.01)
    held = pool.connect()
    second = pool.connect()  # the first is still out after 10 ms: a second opens
    assert creator.opened == 2 and pool.grew_after_wait == 1
    third = pool.connect()  # past the resting size, growth is immediate
    assert creator.opened == 3 and pool.grew_after_wait == 1
    for conn in (held, second, third):
        conn.close()
    pool.dispose()


def test_no_wait_when_a_connection_is_idle_or_the_wait_is_off() -> None:
    pool, creator = _pool(grow_after=30.0)
    first = pool.connect()
    first.close()
    again = pool.connect()  # the idle one is handed out
    assert creator.opened == 1
    off, off_creator = _pool(grow_after=0.0)
    a, b = off.connect(), off.connect()
    assert off_creator.opened == 2 and off.grew_after_wait == 0
    for conn in (again, a, b):
        conn.close()
    pool.dispose()
    off.dispose()


def test_the_grace_survives_a_recreated_pool() -> None:
    pool, _ = _pool(grow_after=0.2, pool_keep_idle=2)
    fresh = pool.recreate()
    assert isinstance(fresh, ShrinkingQueuePool)
    assert (fresh.grow_after, fresh.keep_idle) == (0.2, 2)


class Refused(Exception):
    """What the server says when its connection limit is reached."""


class RefusingCreator(CountingCreator):
    """Opens one connection, then raises ``error`` for every other."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def __call__(self) -> sqlite3.Connection:
        if self.opened >= 1:
            raise self.error
        return super().__call__()


def _refusing_pool(error: Exception, timeout: float = 30.0) -> ShrinkingQueuePool:
    pool = ShrinkingQueuePool(
        RefusingCreator(error), pool_size=5, max_overflow=5, pool_grow_after=0.0, timeout=timeout
    )
    pool.refused = lambda exc: isinstance(exc, Refused)
    return pool


def test_a_refused_connection_waits_for_one_of_the_pools_own() -> None:
    pool = _refusing_pool(Refused("too many clients already"))
    held = pool.connect()
    got: list[Any] = []
    other = threading.Thread(target=lambda: got.append(pool.connect()))
    other.start()
    assert_eventually(
        lambda: pool.waited_after_refusal == 1, 10, "a refused checkout waiting", interval=0.001
    )
    assert not got
    held.close()  # back to the pool: the refused checkout takes it
    other.join(10)
    assert got
    got[0].close()
    pool.dispose()


def test_other_errors_and_a_refusal_with_nothing_coming_back_are_raised() -> None:
    other_error = _refusing_pool(OSError("network unreachable"))
    held = other_error.connect()
    with pytest.raises(OSError, match="unreachable"):
        other_error.connect()
    assert other_error.waited_after_refusal == 0
    held.close()
    other_error.dispose()

    nothing_back = _refusing_pool(Refused("too many clients already"), timeout=0.05)
    held = nothing_back.connect()
    with pytest.raises(Refused):
        nothing_back.connect()
    assert nothing_back.waited_after_refusal == 1
    held.close()
    nothing_back.dispose()

    always = RefusingCreator(Refused("full"))
    always.opened = 1  # the very first open is refused: the pool has none of its own
    none_open = ShrinkingQueuePool(always, pool_grow_after=0.0)
    none_open.refused = lambda exc: True
    with pytest.raises(Refused):
        none_open.connect()
    assert none_open.waited_after_refusal == 0
    none_open.dispose()


def test_the_refusal_check_survives_a_recreated_pool() -> None:
    pool = _refusing_pool(Refused("full"))
    fresh = pool.recreate()
    assert isinstance(fresh, ShrinkingQueuePool)
    assert fresh.refused(Refused("full")) and not fresh.refused(OSError("other"))
