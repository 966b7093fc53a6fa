"""A bounded run of ``benchmarks/bench_nodes.py``: three worker processes behind PgBouncer at
rest hold one store connection each plus their direct listener, a job submitted to the idle
cluster starts within the documented 2 s, a small busy phase drains, and so does a short trickle
of single submissions, each started within 2 s of its submission; two nodes with the Redis
coordinator drain jobs that wait (``--job-ms``) on few slots with the claim lock off."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ratchet.testing.pytest_plugin import backend_unavailable
from ratchet.testing.servers import ServerUnavailable, find_pgbouncer_binary

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_nodes.py"

pytestmark = [pytest.mark.postgres, pytest.mark.pgbouncer]


def run_bench(tmp_path: Path, *options: list[str], timeout: float) -> dict[str, Any]:
    """Run ``bench_nodes.py`` with ``options`` (groups of arguments) and return its figures;
    fails the test with its output when it does not finish cleanly."""
    out = tmp_path / "figures.json"
    arguments = [arg for group in options for arg in group]
    done = subprocess.run(
        [sys.executable, str(BENCH), *arguments, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    figures: dict[str, Any] = json.loads(out.read_text())
    return figures


def test_three_idle_nodes_behind_pgbouncer(
    request: pytest.FixtureRequest, postgres_server: object, tmp_path: Path
) -> None:
    try:
        find_pgbouncer_binary()
    except ServerUnavailable as exc:
        backend_unavailable(request.config, "pgbouncer", str(exc))
    figures = run_bench(
        tmp_path,
        ["--processes", "3", "--pgbouncer"],
        # idle connections beyond the first close after 30 s without use
        ["--settle", "36", "--window", "4", "--latency-samples", "2"],
        ["--busy-jobs", "60", "--busy-timeout", "120", "--track-planning"],
        ["--trickle-rate", "20", "--trickle-seconds", "2"],
        timeout=400,
    )
    idle = figures["idle"]
    assert idle["pgbouncer_connections"]["clients"] == 3, idle
    assert idle["connections_listener"] == 3, "each node listens on a direct connection"
    assert max(idle["first_job_start_s"]) < 2.0, idle["first_job_start_s"]
    busy = figures["busy"]
    assert busy["jobs"] == 60
    # Every claim and outcome write is planned at its call: planning shows for each job.
    assert busy["planning_ms_per_job"] > 0 and busy["executing_ms_per_job"] > 0, busy
    trickle = figures["trickle"]
    assert trickle["jobs"] == 40 and trickle["rate_submitted"] > 10, trickle
    # the jobs were claimed in the window, each non-empty claim taking one job or more
    assert 1 <= trickle["claims"] - trickle["empty_claims"] <= 40, trickle
    assert trickle["statements_per_job"] > 1, trickle  # its insert, claim and outcome at least
    latency = trickle["start_latency_ms"]  # submission to start, by the database's times
    assert 0 < latency["p50"] <= latency["p95"] <= latency["p99"] <= latency["max"] < 2000, latency


@pytest.mark.redis
def test_two_nodes_with_the_redis_coordinator(
    postgres_server: object, redis_server: object, tmp_path: Path
) -> None:
    figures = run_bench(
        tmp_path,
        ["--processes", "2", "--coordinator", "redis", "--no-idle", "--busy-jobs", "30"],
        ["--trickle-rate", "10", "--trickle-seconds", "2"],
        # the workers open the store from a URL that turns the claim lock off
        ["--serialize-claims", "off"],
        # busy jobs that wait without the CPU, as jobs calling another service do, on nodes
        # of 8 slots each
        ["--job-ms", "300", "--concurrency", "8"],
        timeout=300,
    )
    assert figures["coordinator"] == "redis" and figures["busy"]["jobs"] == 30
    assert figures["job_ms"] == 300 and figures["concurrency"] == 8
    # 30 jobs of 300 ms on 16 slots: two rounds at least (one, had the slots stayed at 64)
    assert figures["busy"]["seconds"] >= 0.6, figures["busy"]
    assert figures["serialize_claims"] == "off"
    trickle = figures["trickle"]
    assert trickle["jobs"] == 20
    assert 1 <= trickle["claims"] - trickle["empty_claims"] <= 20, trickle
    # no NOTIFY on the database: the hints and reports travel through Redis
    assert not any("pg_notify" in query for _, query in trickle["top_statements_per_job"]), trickle
