"""Logging of failing store calls that are retried: once per run of failures, not per call."""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from ratchet.domain.errors import StoreUnavailable
from ratchet.domain.text import describe_error

log = logging.getLogger("ratchet.worker")


class ErrorCounter(Protocol):
    store_errors: int


class OutageLog:
    """Counts failing store calls and logs the first of each run of failures.

    "database unavailable" is said only for :class:`StoreUnavailable`; any other error is
    named as what it is.
    """

    def __init__(self, stats: ErrorCounter) -> None:
        self._lock = threading.Lock()
        self._logged = False
        self.stats = stats

    def failed(self, exc: Exception) -> None:
        with self._lock:
            self.stats.store_errors += 1
            first = not self._logged
            self._logged = True
        if not first:
            log.debug("still failing: %s", exc)
        elif isinstance(exc, StoreUnavailable):
            log.error("%s; retrying with backoff", exc)
        else:
            log.error("store call failed (%s); retrying with backoff", describe_error(exc))

    def succeeded(self) -> None:
        if self._logged:
            with self._lock:
                was, self._logged = self._logged, False
            if was:
                log.warning("database reachable again")
