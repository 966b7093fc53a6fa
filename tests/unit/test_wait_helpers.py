"""The test kit's polling helpers: they wait for a condition another thread makes true, and
give up at their deadline."""

from __future__ import annotations

import threading
import time

import pytest

from ratchet.testing import assert_eventually, wait_until


def test_wait_until_returns_once_another_thread_makes_the_condition_true() -> None:
    flag = threading.Event()
    setter = threading.Timer(0.05, flag.set)
    setter.start()
    started = time.monotonic()
    assert wait_until(flag.is_set, timeout=10, interval=0.005)
    assert time.monotonic() - started < 5  # returned when set, not at the deadline
    setter.join()


def test_wait_until_gives_up_at_its_deadline() -> None:
    checks: list[float] = []
    started = time.monotonic()
    assert not wait_until(lambda: checks.append(time.monotonic()), timeout=0.05, interval=0.01)
    assert time.monotonic() - started >= 0.05
    assert checks[-1] - started >= 0.05  # checked once more at the deadline
    assert len(checks) >= 2


def test_assert_eventually_names_what_it_waited_for() -> None:
    with pytest.raises(AssertionError, match=r"after 0\.02 s waiting for the job to finish"):
        assert_eventually(lambda: False, 0.02, "the job to finish")


def test_assert_eventually_passes_when_the_condition_holds() -> None:
    values = iter([0, 0, 1])
    assert_eventually(lambda: next(values), 5, interval=0.001)
