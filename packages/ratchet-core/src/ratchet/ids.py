"""UUIDv7 job ids: time-ordered, so newer jobs sort after older ones."""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_counter = 0

#: Random bytes are read from the OS this many at a time (one system call per 512 ids instead
#: of one or two per id: the call cost more than the rest of making an id).
_RANDOM_CHUNK = 4096
_random = b""
_offset = 0


def _forget_random() -> None:
    """In a forked child: never hand out random bytes the parent may also use."""
    global _lock, _random, _offset
    _lock = threading.Lock()
    _random, _offset = b"", 0


os.register_at_fork(after_in_child=_forget_random)


def _random_bits(nbytes: int) -> int:
    """``nbytes`` bytes of OS randomness as an int (call with ``_lock`` held)."""
    global _random, _offset
    if _offset + nbytes > len(_random):
        _random, _offset = os.urandom(_RANDOM_CHUNK), 0
    start = _offset
    _offset = start + nbytes
    return int.from_bytes(_random[start : start + nbytes], "big")


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
            _counter = _random_bits(2) & 0x3FF
        counter = _counter
        rand = _random_bits(8) & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= counter << 64
    value |= 0b10 << 62
    value |= rand
    return uuid.UUID(int=value)
