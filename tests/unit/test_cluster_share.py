"""ClusterShare: cluster-wide periodic tasks spread over the live nodes."""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from datetime import timedelta

from ratchet.engine.liveness import WatcherTask
from ratchet.engine.maintenance import SHARE_TAIL_CAP, ClusterShare, PermitJanitor
from ratchet.engine.recurring import RecurringMaterializer
from ratchet.engine.workflows import SignalTimeoutScanner


@dataclass
class Node:
    state: str


class Nodes:
    def __init__(self, *states: str) -> None:
        self.states = list(states)
        self.reads = 0
        self.fail = False

    def list_nodes(self) -> list[Node]:
        self.reads += 1
        if self.fail:
            raise ConnectionError("database down")
        return [Node(s) for s in self.states]


SECOND = timedelta(seconds=1)


def test_a_lone_node_keeps_the_plain_interval() -> None:
    share = ClusterShare(Nodes("ALIVE", "DEAD", "DRAINING"), rng=random.Random(1))
    assert [share.wait(5 * SECOND) for _ in range(3)] == [5.0, 5.0, 5.0]


def test_n_live_nodes_each_wait_n_intervals_on_average_so_the_cluster_keeps_one() -> None:
    share = ClusterShare(Nodes(*["ALIVE"] * 10), rng=random.Random(7))
    waits = [share.wait(SECOND) for _ in range(20000)]
    assert 9.5 < statistics.mean(waits) < 10.5
    assert max(waits) <= SHARE_TAIL_CAP * 10
    assert min(waits) < 0.1, "exponential: some runs come soon, so nodes do not run in lockstep"


def test_a_steady_count_is_read_at_doubling_gaps_up_to_the_refresh_and_survives_an_outage() -> None:
    now = [0.0]
    nodes = Nodes("ALIVE", "ALIVE")
    share = ClusterShare(nodes, refresh=60, settling=2, rng=random.Random(3), clock=lambda: now[0])
    reads_at = []
    for second in range(0, 200):
        now[0] = float(second)
        before = nodes.reads
        assert share.live_nodes() == 2
        if nodes.reads > before:
            reads_at.append(second)
    assert reads_at == [0, 2, 6, 14, 30, 62, 122, 182], "gaps 2, 4, 8, 16, 32, then 60"
    nodes.fail = True
    now[0] = 242.0
    assert share.live_nodes() == 2 and nodes.reads == 9
    now[0] = 250.0
    assert share.live_nodes() == 2 and nodes.reads == 9, "an outage does not make reads come faster"


def test_a_forming_cluster_is_seen_within_seconds_not_a_refresh_later() -> None:
    """Nodes started together: the first reads find few alive; a changed count is re-read
    after the settling gap, so each node soon shares the tasks with all the others."""
    now = [0.0]
    nodes = Nodes("ALIVE")
    share = ClusterShare(nodes, refresh=60, settling=2, rng=random.Random(3), clock=lambda: now[0])
    assert share.live_nodes() == 1
    nodes.states += ["ALIVE"] * 9  # the others register
    now[0] = 2.0
    assert share.live_nodes() == 10
    nodes.states += ["ALIVE"] * 40
    now[0] = 4.0
    assert share.live_nodes() == 50, "the count changed at the last read: read again soon"
    now[0] = 5.0
    assert share.live_nodes() == 50 and nodes.reads == 3
    now[0] = 6.0
    assert share.live_nodes() == 50 and nodes.reads == 4
    now[0] = 9.0
    assert share.live_nodes() == 50 and nodes.reads == 4, "unchanged since: the gap doubled"
    now[0] = 10.0
    assert share.live_nodes() == 50 and nodes.reads == 5


def test_only_the_cluster_wide_tasks_are_shared() -> None:
    shared = [WatcherTask(SECOND), RecurringMaterializer(), SignalTimeoutScanner(SECOND)]
    assert all(getattr(t, "cluster_wide", False) for t in shared)
    assert not getattr(PermitJanitor(SECOND), "cluster_wide", False)
