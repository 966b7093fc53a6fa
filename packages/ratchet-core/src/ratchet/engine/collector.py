"""How Ratchet works with Python's cyclic garbage collector.

Reference counting frees almost everything a job allocates; the cyclic collector only matters
for the objects that live long enough to be scanned again and again. Two cases are worth
handling here:

- a **bulk submission** keeps a builder, a job value and a result per job alive for the whole
  call, so the collector promotes thousands of them towards the oldest generation while the
  call runs, and every promotion brings the next full collection of the caller's whole heap
  closer (:func:`collection_paused`);
- a **worker process** keeps its start-up heap (modules, the app, its store) for its whole
  life, and every full collection walked it (:func:`freeze_startup_heap`).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

#: A submission of at least this many jobs pauses automatic collection while it runs (the
#: collector's youngest generation is scanned every 700 new container objects, a few per job).
BULK_PAUSE_MIN_JOBS = 100

_lock = threading.Lock()
_pauses = 0
_enable_after = False


@contextmanager
def collection_paused() -> Iterator[None]:
    """Automatic cyclic collection is off inside the block, and back on after the last
    overlapping block in any thread has ended, unless it was already off when the first began.

    Nothing is skipped: the allocations made inside still count towards the next collection,
    which runs at the first allocation after the block, by then without the short-lived objects
    of the block. Only a thread that switches the collector off itself while a block is open
    would find it switched back on.
    """
    global _pauses, _enable_after
    with _lock:
        if _pauses == 0:
            _enable_after = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _enable_after:
                _enable_after = False
                gc.enable()


def paused_for(jobs: int, enabled: bool) -> AbstractContextManager[None]:
    """:func:`collection_paused` for a submission of ``jobs`` jobs when ``enabled`` (the app's
    ``pause_gc_in_bulk``) and they are at least :data:`BULK_PAUSE_MIN_JOBS`; else nothing."""
    if enabled and jobs >= BULK_PAUSE_MIN_JOBS:
        return collection_paused()
    return nullcontext()


def freeze_startup_heap() -> int:
    """Take every object alive now (imported modules, the app, its store) out of the cyclic
    garbage collector's scans, for a process that exists to run the worker; returns how many.

    A busy worker allocates enough to trigger full collections every few seconds, and each one
    walked the whole start-up heap (about 100,000 objects for an app on PostgreSQL): some 12 %
    of a no-op job's CPU. Frozen objects are still freed by reference counting; only a
    reference cycle among them would never be collected. Start-up garbage is collected first.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
