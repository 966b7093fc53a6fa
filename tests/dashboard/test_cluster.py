"""The cluster page shows the watcher's view of real liveness states on SQLite: a job taken
over from a dead incarnation (with the abandoned attempt's node and epoch), a job held by a
silent node (stalled), and the same job TIMED_OUT once the watcher declared its node dead."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from timeout_harness import wait_for

from ratchet import JobStatus, Ratchet
from ratchet.domain.watcher import NodeInfo
from ratchet.engine.liveness import host_name
from ratchet.testing import FakeClock
from ratchet_dashboard import DashboardSettings, create_dashboard


@pytest.fixture
def app(sqlite_url: str, support_path: Path, clock: FakeClock) -> Iterator[Ratchet]:
    import dashboard_jobs

    dashboard_jobs.GATES.clear()
    dashboard_jobs.STARTED.clear()
    app = Ratchet(sqlite_url, allowed_modules=["dashboard_jobs"], clock=clock, node_name="box")
    yield app
    for gate in list(dashboard_jobs.GATES.values()):
        gate.set()
    app.close()


def table(html: str, table_id: str) -> str:
    match = re.search(rf'<table id="{table_id}">(.*?)</table>', html, re.DOTALL)
    assert match, table_id
    return match.group(1)


def test_taken_over_stalled_and_timed_out_jobs(app: Ratchet, clock: FakeClock) -> None:
    import dashboard_jobs as jobs

    store: Any = app.store
    # A previous incarnation of this process (same name, host and pid) held a job...
    store.register_incarnation(
        NodeInfo("box-old", "box", host_name(), os.getpid(), 1), now=clock.now()
    )
    taken = app.enqueue(jobs.hold, "taken").submit()
    [claimed] = store.claim("box-old", 1, now=clock.now(), boost_interval=timedelta(0))
    assert claimed.job_id == taken.id
    # ...which the new worker declares dead and takes over at its start.
    worker = app.worker(
        concurrency=1,
        watcher_enabled=False,
        min_delay=timedelta(milliseconds=20),
        max_delay=timedelta(milliseconds=50),
    )
    worker.start()
    try:
        wait_for(lambda: "taken" in jobs.STARTED, what="the taken-over run to start")
        # Another node, elsewhere, holds a job and then falls silent.
        store.register_incarnation(NodeInfo("ghost-1", "ghost", "elsewhere", 1, 1), now=clock.now())
        silent = app.enqueue(jobs.hold, "silent").submit()
        [held] = store.claim("ghost-1", 1, now=clock.now(), boost_interval=timedelta(0))
        assert held.job_id == silent.id
        # Two minutes pass, this worker heart-beating every 10 s as its thread would (a node
        # judges others' silence only while its own beats are regular).
        assert worker.liveness is not None
        for _ in range(12):
            clock.advance(timedelta(seconds=10))
            assert worker.liveness.beat()

        with TestClient(
            create_dashboard(app, settings=DashboardSettings()), client=("127.0.0.1", 1)
        ) as client:
            html = client.get("/cluster").text
            nodes = table(html, "nodes")
            assert "box-old" in nodes and "DEAD" in nodes
            assert re.search(r"ghost-1.*?2\.0m", nodes, re.DOTALL)  # its heartbeat age
            over = table(html, "taken-over")
            assert str(taken.id) in over
            assert re.search(
                rf"{worker.node_id}.*box-old</td><td class=\"num\">1<", over, re.DOTALL
            )
            stalled = table(html, "stalled")
            assert str(silent.id) in stalled and "ghost-1" in stalled
            assert str(taken.id) not in stalled  # its node is alive
            assert "None." in table(html, "timed-out")

            # The watcher declares the silent node dead: its job becomes TIMED_OUT (this
            # worker has no free slot to take it over).
            report = worker.liveness.watch_once()
            assert report.orphaned == 1
            assert app.jobs.get(silent.id).status is JobStatus.TIMED_OUT
            html = client.get("/cluster").text
            timed_out = table(html, "timed-out")
            assert str(silent.id) in timed_out and "ghost-1" in timed_out
            assert re.search(r'<td class="num">1</td>', timed_out)  # its epoch
            assert str(silent.id) not in table(html, "stalled")
    finally:
        for gate in list(jobs.GATES.values()):
            gate.set()
        worker.stop(timeout=timedelta(seconds=5))
