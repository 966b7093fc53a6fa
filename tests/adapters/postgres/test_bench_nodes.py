"""A bounded run of ``benchmarks/bench_nodes.py``: three worker processes behind PgBouncer at
rest hold one store connection each plus their direct listener, a job submitted to the idle
cluster starts within the documented 2 s, a small busy phase drains, and so does a short trickle
of single submissions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet.testing.pytest_plugin import backend_unavailable
from ratchet.testing.servers import ServerUnavailable, find_pgbouncer_binary

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_nodes.py"

pytestmark = [pytest.mark.postgres, pytest.mark.pgbouncer]


def test_three_idle_nodes_behind_pgbouncer(
    request: pytest.FixtureRequest, postgres_server: object, tmp_path: Path
) -> None:
    try:
        find_pgbouncer_binary()
    except ServerUnavailable as exc:
        backend_unavailable(request.config, "pgbouncer", str(exc))
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--processes",
            "3",
            "--pgbouncer",
            # idle connections beyond the first close after 30 s without use
            "--settle",
            "36",
            "--window",
            "4",
            "--latency-samples",
            "2",
            "--busy-jobs",
            "60",
            "--busy-timeout",
            "120",
            "--track-planning",
            "--trickle-rate",
            "20",
            "--trickle-seconds",
            "2",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    figures = json.loads(out.read_text())
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


@pytest.mark.redis
def test_two_nodes_with_the_redis_coordinator(
    postgres_server: object, redis_server: object, tmp_path: Path
) -> None:
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--processes",
            "2",
            "--coordinator",
            "redis",
            "--no-idle",
            "--busy-jobs",
            "30",
            "--trickle-rate",
            "10",
            "--trickle-seconds",
            "2",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    figures = json.loads(out.read_text())
    assert figures["coordinator"] == "redis" and figures["busy"]["jobs"] == 30
    trickle = figures["trickle"]
    assert trickle["jobs"] == 20
    assert 1 <= trickle["claims"] - trickle["empty_claims"] <= 20, trickle
    # no NOTIFY on the database: the hints and reports travel through Redis
    assert not any("pg_notify" in query for _, query in trickle["top_statements_per_job"]), trickle
