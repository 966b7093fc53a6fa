"""The cyclic garbage collector paused for bulk submissions and restored after."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from ratchet.engine.collector import (
    BULK_PAUSE_MIN_JOBS,
    collection_paused,
    freeze_startup_heap,
    paused_for,
)


@pytest.fixture(autouse=True)
def _collector_on_after() -> Iterator[None]:
    yield
    assert gc.isenabled(), "a test left the cyclic garbage collector switched off"


def test_the_collector_is_off_inside_and_on_after() -> None:
    with collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_error_inside_still_switches_it_back_on() -> None:
    with pytest.raises(ZeroDivisionError), collection_paused():
        1 / 0  # noqa: B018
    assert gc.isenabled()


def test_nested_pauses_end_with_the_outermost() -> None:
    with collection_paused():
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_the_caller_switched_off_stays_off() -> None:
    gc.disable()
    try:
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_overlapping_pauses_in_two_threads_end_with_the_last_one() -> None:
    inside, release, done = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def other() -> None:
        with collection_paused():
            inside.set()
            release.wait(10)
        seen.append(gc.isenabled())
        done.set()

    thread = threading.Thread(target=other)
    with collection_paused():
        thread.start()
        assert inside.wait(10)
    # This thread's pause ended first: the other one still holds the collector off.
    assert not gc.isenabled()
    release.set()
    assert done.wait(10)
    thread.join(10)
    assert seen == [True]
    assert gc.isenabled()


def test_only_submissions_of_the_bulk_size_pause_and_only_when_enabled() -> None:
    with paused_for(BULK_PAUSE_MIN_JOBS - 1, True):
        assert gc.isenabled()
    with paused_for(BULK_PAUSE_MIN_JOBS, False):
        assert gc.isenabled()
    with paused_for(BULK_PAUSE_MIN_JOBS, True):
        assert not gc.isenabled()


def test_freezing_the_startup_heap_moves_the_live_objects_out_of_the_scans() -> None:
    kept = [object() for _ in range(10)], {"a": []}
    try:
        frozen = freeze_startup_heap()
        # Other threads may free frozen objects meanwhile; nothing new is frozen.
        assert 0 < gc.get_freeze_count() <= frozen
        assert not any(kept[1] is o for o in gc.get_objects())  # a frozen container
    finally:
        gc.unfreeze()
