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


def test_the_count_is_read_at_most_once_per_refresh_and_survives_an_outage() -> None:
    now = [0.0]
    nodes = Nodes("ALIVE", "ALIVE")
    share = ClusterShare(nodes, refresh=60, rng=random.Random(3), clock=lambda: now[0])
    assert share.live_nodes() == 2 and nodes.reads == 1
    nodes.states.append("ALIVE")
    now[0] = 59.0
    assert share.live_nodes() == 2 and nodes.reads == 1
    now[0] = 60.0
    assert share.live_nodes() == 3 and nodes.reads == 2
    nodes.fail = True
    now[0] = 120.0
    assert share.live_nodes() == 3 and nodes.reads == 3


def test_only_the_cluster_wide_tasks_are_shared() -> None:
    shared = [WatcherTask(SECOND), RecurringMaterializer(), SignalTimeoutScanner(SECOND)]
    assert all(getattr(t, "cluster_wide", False) for t in shared)
    assert not getattr(PermitJanitor(SECOND), "cluster_wide", False)
