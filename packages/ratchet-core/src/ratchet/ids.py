"""UUIDv7 job ids: time-ordered, so newer jobs sort after older ones."""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_counter = 0

#: Random bits are read from the OS this many bytes at a time and kept as 64-bit numbers
#: (one system call per 512 ids instead of one or two per id: the call cost more than the rest
#: of making an id).
_RANDOM_CHUNK = 4096
_randoms: list[int] = []

_MASK_48 = (1 << 48) - 1
_MASK_62 = (1 << 62) - 1
#: The version (7) and variant (0b10) bits of every id.
_VERSION_AND_VARIANT = (0x7 << 76) | (0b10 << 62)

_UUID = uuid.UUID
_SAFE_UNKNOWN = uuid.SafeUUID.unknown
_new_object = object.__new__
_set_field = object.__setattr__


def _forget_random() -> None:
    """In a forked child: never hand out random bits the parent may also use."""
    global _lock
    _lock = threading.Lock()
    _randoms.clear()


os.register_at_fork(after_in_child=_forget_random)


def _random64() -> int:
    """64 bits of OS randomness (call with ``_lock`` held)."""
    if not _randoms:
        chunk = os.urandom(_RANDOM_CHUNK)
        _randoms.extend(int.from_bytes(chunk[i : i + 8], "big") for i in range(0, _RANDOM_CHUNK, 8))
    return _randoms.pop()


def uuid7() -> uuid.UUID:
    """A new UUIDv7 (RFC 9562), monotonic within this process.

    48 bits of Unix milliseconds, then a 12-bit counter that orders ids made in the same
    millisecond, then 62 random bits.
    """
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            _counter += 1
            if _counter > 0xFFF:
                _last_ms += 1
                _counter = 0
            ms = _last_ms
        else:
            _last_ms = ms
            _counter = _random64() & 0x3FF
        counter = _counter
        rand = _random64() & _MASK_62
    # What uuid.UUID(int=...) stores, without its argument checks: the value is in range.
    job_id = _new_object(_UUID)
    _set_field(
        job_id, "int", ((ms & _MASK_48) << 80) | _VERSION_AND_VARIANT | (counter << 64) | rand
    )
    _set_field(job_id, "is_safe", _SAFE_UNKNOWN)
    return job_id
