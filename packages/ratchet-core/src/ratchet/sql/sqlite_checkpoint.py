"""Checkpoints of a SQLite database's write-ahead log, run on a thread of their own.

In WAL mode a commit appends the pages it changed to the log (the ``-wal`` file); a
*checkpoint* copies them back into the database file and, under ``synchronous=NORMAL``, flushes
both to disk. By default SQLite runs one inside whichever commit finds the log past 1,000
pages, so that commit waits for the copy and the flushes: in a steady stream of single
submissions (about seven pages each), one in about a hundred and forty pays for the others.

A store's :class:`WalCheckpointer` runs them instead on a thread of its own, soon after the log
grows, with ``PRAGMA wal_checkpoint(PASSIVE)``: it waits for no reader and no writer, and
commits go on while it copies (the driver releases the GIL for it). The commit-time checkpoint
stays as a backstop at :data:`BACKSTOP_PAGES`: it does the rest when this thread cannot keep up,
in a process that has none, and it is what lets the log start again from its beginning (a
writer rewinds the log only when a checkpoint took all of it, which a commit-time one does).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading

from ratchet.named_thread import NamedThread

log = logging.getLogger("ratchet.store")

#: ``wal_autocheckpoint`` of a store's connections (SQLite's default is 1,000 pages): with the
#: checkpointer doing the copying, the log reaches this length, about 40 MiB of 4 KiB pages,
#: only when commits outrun it.
BACKSTOP_PAGES = 10_000

#: How soon after the log grew the thread checkpoints it (seconds).
ACTIVE_INTERVAL = 0.05

#: The longest the thread sleeps while the log does not change (seconds): it looks less often
#: the longer nothing is written, from :data:`ACTIVE_INTERVAL` up to this.
IDLE_INTERVAL = 1.0


class WalCheckpointer:
    """Checkpoints the write-ahead log of the SQLite database at ``path`` on a daemon thread
    whenever the log changed since it last looked (:meth:`run_once`).

    :meth:`ensure_running` starts the thread (again, in a forked child); :meth:`stop` ends it
    and closes its connection. A failed checkpoint is logged and retried later, never raised:
    the commit-time backstop keeps the log bounded meanwhile.
    """

    def __init__(
        self,
        path: str,
        *,
        interval: float = ACTIVE_INTERVAL,
        idle_interval: float = IDLE_INTERVAL,
    ) -> None:
        self.path = path
        self.wal_path = f"{path}-wal"
        self.interval = interval
        self.idle_interval = idle_interval
        self.checkpoints = 0
        """How many checkpoints ran (including those that found SQLite busy)."""
        self.failures = 0
        """How many checkpoints failed with an error."""
        self._seen: tuple[int, int] | None = None
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._ran = threading.Condition()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._warned = False

    def ensure_running(self) -> None:
        """Start the thread unless it runs in this process already (cheap when it does)."""
        if self._pid == os.getpid() or self._stopping.is_set():
            return
        if self._pid:
            # A forked child: the parent's thread is gone (its locks may have been held at the
            # fork), and the parent's connection must not be used or closed here.
            self._lock = threading.Lock()
            self._ran = threading.Condition()
            self._connection = None
            self._seen = None
            self._pid = 0
        with self._lock:
            if self._pid == os.getpid() or self._stopping.is_set():
                return
            self._pid = os.getpid()
            self._thread = NamedThread(target=self._loop, name="ratchet-checkpoint")
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread (waiting up to ``timeout`` seconds; 0: not at all, it ends on its
        own) and close its connection."""
        self._stopping.set()
        thread = self._thread
        if timeout > 0 and thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._close_connection()

    def _close_connection(self) -> None:
        # Called by stop() and by the thread as it ends; whichever finds the lock free closes
        # the connection (stop() never waits behind a checkpoint in progress).
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._connection is not None and self._pid == os.getpid():
                self._connection.close()
            self._connection = None
        finally:
            self._lock.release()

    def run_once(self) -> bool:
        """Checkpoint the log if it changed since the last look; whether it did.

        :returns: False when the log is unchanged or absent, or the checkpoint failed (logged).
        """
        try:
            stat = os.stat(self.wal_path)
        except OSError:
            return False
        seen = (stat.st_size, stat.st_mtime_ns)
        if seen == self._seen:
            return False
        try:
            with self._lock:
                if self._stopping.is_set():
                    return False
                connection = self._connection
                if connection is None:
                    connection = self._connection = self._connect()
                connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            self.failures += 1
            if not self._warned:
                self._warned = True
                log.warning(
                    "checkpoint of the SQLite write-ahead log %s failed: %s (commits still "
                    "checkpoint it themselves past %d pages; retrying)",
                    self.wal_path,
                    exc,
                    BACKSTOP_PAGES,
                )
            return False
        self._seen = seen
        with self._ran:
            self.checkpoints += 1
            self._ran.notify_all()
        return True

    def wait_for_checkpoints(self, count: int, timeout: float) -> bool:
        """Wait until :attr:`checkpoints` reaches ``count`` (at most ``timeout`` seconds);
        whether it did."""
        with self._ran:
            return self._ran.wait_for(lambda: self.checkpoints >= count, timeout)

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(
            self.path, timeout=0, isolation_level=None, check_same_thread=False
        )
        connection.execute("PRAGMA synchronous=NORMAL")
        return connection

    def _loop(self) -> None:
        delay = self.interval
        while not self._stopping.wait(delay):
            delay = self.interval if self.run_once() else min(self.idle_interval, delay * 2)
        self._close_connection()
