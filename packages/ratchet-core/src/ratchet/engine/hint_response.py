"""When a worker claims for a wakeup hint from another process.

Every node of a cluster receives every new-work hint. If each claimed at once, a job submitted to
``n`` idle nodes would cost ``n`` claims, all but one of them empty, and each node would then
poll in burst mode. So a node answers another process's hint at a random moment within a window
that widens with the live nodes (:data:`SPREAD_PER_NODE` per other node by default, at most
:data:`MAX_SPREAD_NODES` times that) and narrows with the jobs announced (``k`` jobs: a ``k``-th
of it, since ``k`` jobs keep up to ``k`` nodes busy). The first node to claim, when its claim
took everything it could see, reports how many jobs it claimed (a hint to
:data:`~ratchet.ports.CLAIMED_TARGET`), and a node that hears the report before its own moment
subtracts those jobs from the ones announced: with none left, it does not claim at all. Hints
from this process (its own submissions) are answered at once, so a process that submits and
works starts its own jobs first.

Counting jobs, not hints, keeps the report safe against a race: a job submitted while the first
node's claim ran is announced by a hint of its own, which the report of that claim does not
cancel. What is never answered (a report that counted jobs no hint announced, a lost message)
waits for the node's next regular poll, as it would without a coordinator.
"""

from __future__ import annotations

import random
import threading

#: Seconds of the answering window per other live node (``WorkerConfig.hint_spread``).
SPREAD_PER_NODE = 0.02

#: The widest answering window, in windows per other node (reached at 51 live nodes).
MAX_SPREAD_NODES = 50

#: The widest answering window, in seconds, at the default spread.
MAX_SPREAD = SPREAD_PER_NODE * MAX_SPREAD_NODES


class HintResponder:
    """One worker's account of the jobs announced by hints and not yet known to be claimed,
    and of when it will claim for them. Times are monotonic seconds, given by the caller."""

    def __init__(
        self,
        *,
        spread_per_node: float = SPREAD_PER_NODE,
        max_spread: float = MAX_SPREAD,
        rng: random.Random | None = None,
    ) -> None:
        if spread_per_node < 0 or max_spread < 0:
            raise ValueError("spread_per_node and max_spread must not be negative")
        self.spread_per_node = spread_per_node
        self.max_spread = max_spread
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._announced = 0
        self._respond_at: float | None = None
        self.claims_made = 0
        """Planned claims that came due with announced jobs left, and were made."""
        self.claims_skipped = 0
        """Planned claims dropped because other nodes reported every announced job claimed."""

    @classmethod
    def spreading(cls, per_node: float) -> HintResponder:
        """A responder whose window grows by ``per_node`` seconds per other live node, up to
        :data:`MAX_SPREAD_NODES` times that (0: every hint answered at once)."""
        return cls(spread_per_node=per_node, max_spread=per_node * MAX_SPREAD_NODES)

    @property
    def announced(self) -> int:
        """Jobs announced by hints and not yet known to be claimed."""
        return self._announced

    @property
    def respond_at(self) -> float | None:
        """When this worker claims for the hints it received (None: no claim planned)."""
        return self._respond_at

    def window(self, live_nodes: int) -> float:
        """Seconds within which this node answers another process's hint among
        ``live_nodes`` nodes: none when it is alone."""
        return min(self.max_spread, self.spread_per_node * max(0, live_nodes - 1))

    def on_new_work(self, jobs: int, now: float, live_nodes: int, *, remote: bool) -> float | None:
        """A hint announced ``jobs`` new jobs: in how many seconds to claim for it (0: at once,
        for this process's own hints or a node alone), or None when a claim is planned no later
        already."""
        with self._lock:
            self._announced += max(1, jobs)
            # k announced jobs give k nodes something to claim: the window narrows with them.
            spread = self.window(live_nodes) / self._announced if remote else 0.0
            delay = self._rng.uniform(0.0, spread) if spread > 0 else 0.0
            at = now + delay
            if self._respond_at is not None and self._respond_at <= at:
                return None
            self._respond_at = None if delay == 0 else at
            return delay

    def on_claimed_elsewhere(self, jobs: int) -> None:
        """Another node reported claiming ``jobs`` jobs: a planned claim is dropped once no
        announced job is left."""
        with self._lock:
            self._announced = max(0, self._announced - max(0, jobs))
            if self._announced == 0 and self._respond_at is not None:
                self._respond_at = None
                self.claims_skipped += 1

    def take_due(self, now: float) -> bool:
        """Whether to claim now for the hints received: a planned claim came due and announced
        jobs are left. A due claim is taken either way (one claim answers every hint so far)."""
        with self._lock:
            if self._respond_at is None or now < self._respond_at:
                return False
            self._respond_at = None
            if self._announced > 0:
                self.claims_made += 1
                return True
            return False

    def on_poll(self, claimed: int, wanted: int) -> int:
        """This worker's poll wanted ``wanted`` jobs and claimed ``claimed``: how many to report
        as claimed to the other nodes (0: no report).

        A poll that came back short saw everything it could claim, so nothing announced is left
        for this node: it forgets the count and any planned claim, and reports what it took if
        it knew of announced jobs. A full poll leaves the rest announced (others may claim it)
        and reports nothing. A poll that wanted nothing (no free slot) changes nothing.
        """
        if wanted <= 0:
            return 0
        with self._lock:
            knew = self._announced > 0
            if claimed < wanted:
                self._announced = 0
                self._respond_at = None
                return claimed if knew else 0
            self._announced = max(0, self._announced - claimed)
            if self._announced == 0:
                self._respond_at = None
            return 0
