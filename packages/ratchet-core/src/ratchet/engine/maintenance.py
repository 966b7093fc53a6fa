"""Maintenance: tasks a worker runs periodically on its maintenance thread.

The watcher, the permit janitor, the signal-timeout scan, the cancellation-request poll, the
recurring materializer and the work summary are each a :class:`PeriodicTask`; the list a worker
runs is built in :func:`ratchet.engine.assembly.periodic_tasks`. Those that work for the whole
cluster (``cluster_wide = True``) are spread over the live nodes (:class:`ClusterShare`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from ratchet.domain.watcher import NodeState
from ratchet.ports import PermitStore

if TYPE_CHECKING:
    from ratchet.engine.host import WorkerHost

log = logging.getLogger("ratchet.worker")


class PermitJanitor:
    """Deletes this node's permits whose attempt is no longer running here (lost releases)."""

    name = "permit-janitor"

    def __init__(self, interval: timedelta) -> None:
        self.interval = interval

    def run_once(self, worker: WorkerHost) -> None:
        permits = worker.store.capability(PermitStore)  # type: ignore[type-abstract]
        if permits is None:
            return
        before = worker.app.now()
        # Running attempts, and timed-out ones whose call has not returned yet (they still use
        # the resource, as they still hold their slot).
        keep = [(job.job_id, job.epoch) for job in worker.slots.occupying_jobs()]
        released = permits.release_stale_permits(worker.node_id, keep, before=before)
        if released:
            log.warning("released %d permit(s) of attempts no longer running here", released)


#: How often a node re-reads how many nodes are alive (for :class:`ClusterShare`) once the
#: count holds still.
LIVE_NODES_REFRESH = 60.0
#: How soon it re-reads after a read that found the count changed (a cluster starting up, or a
#: rolling deploy); the gap then doubles with each unchanged read up to the refresh.
LIVE_NODES_SETTLING = 2.0
#: A shared task's wait is at most this many times its mean (the draw is exponential).
SHARE_TAIL_CAP = 4.0


class ClusterShare:
    """Spreads the cluster-wide periodic tasks over the live nodes.

    The watcher, the recurring materializer and the signal-timeout scan do work for the whole
    cluster and are idempotent; every node runs them so that any node may die. With ``n`` live
    nodes each runs such a task after a random wait (exponential, mean ``n`` times its interval,
    so however the nodes' phases line up their runs together form a Poisson stream at one run per
    interval), and the cluster's cost of an idle interval stays that of one node instead of
    growing with the nodes. Alone (or when the count cannot be read) a node keeps the plain
    interval. The count of ALIVE nodes is read from the store again
    :data:`LIVE_NODES_SETTLING` seconds after a read that found it changed, then at doubling
    gaps up to :data:`LIVE_NODES_REFRESH` seconds while it holds still: nodes that start
    together learn of each other within seconds instead of each running the shared tasks as if
    alone for a minute.
    """

    def __init__(
        self,
        store: object,
        *,
        refresh: float = LIVE_NODES_REFRESH,
        settling: float = LIVE_NODES_SETTLING,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._refresh = refresh
        self._rng = rng or random.Random()
        self._clock = clock
        self._settling = min(settling, refresh)
        self._gap = self._settling
        self._last_read: int | None = None
        self._read_at: float | None = None

    def live_nodes(self) -> int:
        """The number of ALIVE nodes at the last read (at least 1)."""
        now = self._clock()
        if self._read_at is None or now - self._read_at >= self._gap:
            self._read_at = now
            list_nodes = getattr(self._store, "list_nodes", None)
            alive: int | None = None
            if list_nodes is not None:
                try:
                    alive = sum(1 for n in list_nodes() if n.state == NodeState.ALIVE.value)
                except Exception as exc:  # keep the last count; the store's outage shows elsewhere
                    log.debug("could not count the live nodes: %s", exc)
            if alive is not None and alive != self._last_read:
                self._last_read = alive
                self._gap = self._settling
            else:
                self._gap = min(self._gap * 2, self._refresh)
        return self.known_live_nodes()

    def known_live_nodes(self) -> int:
        """The number of ALIVE nodes at the last read (at least 1), without reading again."""
        return max(1, self._last_read or 0)

    def wait(self, interval: timedelta) -> float:
        """Seconds until this node's next run of a cluster-wide task of ``interval``."""
        seconds = interval.total_seconds()
        nodes = self.live_nodes()
        if nodes <= 1:
            return seconds
        mean = seconds * nodes
        return min(self._rng.expovariate(1.0 / mean), SHARE_TAIL_CAP * mean)
