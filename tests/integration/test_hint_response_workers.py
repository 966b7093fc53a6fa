"""Workers of different processes share a job's wakeup: one claims, the others hear it did.

Each app below has its own coordinator on one in-memory broker, as separate processes would have
on Redis or PostgreSQL, and the workers share one SQLite database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fixed_random import Fixed

from ratchet import Ratchet, hookimpl
from ratchet.config import WorkerConfig
from ratchet.engine.hint_response import HintResponder
from ratchet.engine.maintenance import ClusterShare
from ratchet.plugins import Plugins, make_plugin_manager
from ratchet.testing import wait_until

QUIET = timedelta(seconds=60)  # no poll of its own during a test: only hints make them claim


class BrokerPlugin:
    def __init__(self) -> None:
        from memory_broker import MemoryBroker

        self.broker = MemoryBroker()

    @hookimpl
    def ratchet_register_coordinators(self, registry: Any) -> None:
        from memory_broker import memory_coordinator

        registry.add(
            "memory",
            lambda spec, context=None: memory_coordinator(
                self.broker, reconnect_min=0.01, reconnect_max=0.05
            ),
        )


def responder(spread: float, fraction: float) -> HintResponder:
    """Answers another process's hint ``fraction`` into a window of ``spread`` seconds."""
    return HintResponder(spread_per_node=spread, max_spread=spread, rng=Fixed(fraction))


@pytest.fixture
def cluster(tmp_path: Path, support_path: Path) -> Iterator[Callable[..., dict[str, Any]]]:
    """``cluster(first=..., second=...)``: two workers answering hints with these responders,
    and a client, each with its own app and coordinator on one broker."""
    plugin = BrokerPlugin()
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    apps: dict[str, Ratchet] = {}
    workers: dict[str, Any] = {}

    def app(name: str) -> Ratchet:
        return Ratchet(
            url,
            allowed_modules=["gate_jobs"],
            coordinator="memory",
            plugins=Plugins(make_plugin_manager(extra=[plugin])),
            node_name=name,
        )

    def start(**responders: HintResponder) -> dict[str, Any]:
        config = WorkerConfig(
            concurrency=4,
            burst_delay=QUIET,
            min_delay=QUIET,
            max_delay=QUIET,
            deep_idle_delay=QUIET,
        )
        for name in ("first", "second", "client"):
            apps[name] = app(name)
        for name, hints in responders.items():
            workers[name] = apps[name].worker(config)
            workers[name].hints = hints
        for worker in workers.values():
            worker.start()
        assert all(a.coordinator.wait_connected(5) for a in apps.values())  # type: ignore[attr-defined]
        for worker in workers.values():
            worker.cluster_share = ClusterShare(worker.store)  # reads the live nodes afresh
            assert worker.cluster_share.live_nodes() == 2
            assert wait_until(lambda w=worker: w.stats.polls >= 1, 5)  # the start-up poll
        return {"client": apps["client"], **workers}

    try:
        yield start
    finally:
        for worker in workers.values():
            worker.stop()
        for each in apps.values():
            each.close()


def test_one_worker_claims_a_job_and_the_other_skips_the_claim_it_planned(
    cluster: Callable[..., dict[str, Any]],
) -> None:
    import gate_jobs

    nodes = cluster(first=responder(20.0, 0.0), second=responder(20.0, 0.5))  # at once / 10 s
    client, first, second = nodes["client"], nodes["first"], nodes["second"]
    polls = {"first": first.stats.polls, "second": second.stats.polls}
    client.enqueue(gate_jobs.plain, 1).submit()
    assert wait_until(lambda: client.store.count_by_status() == {"SUCCEEDED": 1}, 10)
    assert wait_until(lambda: second.hints.announced == 0, 5), "the claim was never reported"
    assert second.hints.respond_at is None
    assert first.stats.polls > polls["first"] and first.stats.claimed == 1
    assert second.stats.polls == polls["second"], "the second worker claimed anyway"
    assert first.stats.wakeups_received == second.stats.wakeups_received == 1
    assert (second.hints.claims_skipped, first.stats.claims_reported) == (1, 1)


def test_the_claim_planned_first_runs_the_job_and_the_later_one_is_skipped(
    cluster: Callable[..., dict[str, Any]],
) -> None:
    import gate_jobs

    nodes = cluster(first=responder(20.0, 1.0), second=responder(0.05, 0.5))  # 20 s / 25 ms
    client, first, second = nodes["client"], nodes["first"], nodes["second"]
    polls = first.stats.polls
    client.enqueue(gate_jobs.plain, 1).submit()
    assert wait_until(lambda: client.store.count_by_status() == {"SUCCEEDED": 1}, 10)
    assert second.stats.claimed == 1
    assert wait_until(lambda: first.hints.announced == 0, 5), "the claim was never reported"
    assert first.hints.respond_at is None and first.stats.polls == polls
