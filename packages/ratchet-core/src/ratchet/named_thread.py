"""Threads that carry their name into the operating system.

Python names a thread for itself only (until 3.14); ``top -H``, ``ps -L``, ``pidstat -t`` and a
profiler attached from outside see every thread of a worker as ``ratchet`` or ``python``. A
:class:`NamedThread` also gives the kernel its name (Linux keeps the first 15 bytes), so an
operator can tell the poller from the writer and from the job threads when one of them burns a
core.
"""

from __future__ import annotations

import sys
import threading

#: The longest thread name Linux keeps (16 bytes with the terminating NUL).
OS_NAME_BYTES = 15


def name_os_thread(name: str) -> bool:
    """Give the calling thread ``name`` in the operating system (cut to
    :data:`OS_NAME_BYTES`); False where that is not possible, which is never an error."""
    if not sys.platform.startswith("linux"):
        return False
    short = name.encode("ascii", "replace")[:OS_NAME_BYTES]
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "wb") as comm:
            comm.write(short)
    except OSError:
        return False
    return True


class NamedThread(threading.Thread):
    """A daemon thread (unless told otherwise) that names itself in the operating system
    (:func:`name_os_thread`) before it runs its target."""

    def __init__(self, *args: object, daemon: bool | None = True, **kwargs: object) -> None:
        super().__init__(*args, daemon=daemon, **kwargs)  # type: ignore[arg-type]

    def run(self) -> None:
        name_os_thread(self.name)
        super().run()
