"""Every benchmark in ``benchmarks/`` stays runnable: each one that has no bounded test of its
own runs here once at a small size, as its own process, against the test run's servers.

A benchmark is run on demand, so one that drifts from the code it measures (a moved import, an
interface that changed) goes unnoticed until someone needs it; this catches that. Each run must
exit 0 and print its headline figure."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_benchmark(name: str, *args: str, timeout: float = 240) -> str:
    """Run ``benchmarks/<name>.py`` with ``args``; its output (fails on a non-zero exit)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, f"{name} exited {result.returncode}:\n{out[-4000:]}"
    return out


#: A server fixture's URL stands in an argument list where this placeholder is.
SERVER_URL = "{server}"

#: (benchmark, its arguments at a small size, the server fixture it needs or None, the headline
#: its output must carry, or None where it prints nothing: callgrind counts its instructions).
BENCHMARKS = [
    pytest.param(
        "bench_sqlite", ["--runs", "1", "--jobs", "300"], None,
        r"no-op processing \(1 proc\)\s+median\s+[\d,]+ jobs/s", id="sqlite",
    ),
    pytest.param(
        "bench_encryption", ["--runs", "1", "--jobs", "200"], None,
        r"process\s+plain\s+\d+ .* sealed/plain \d\.\d\d", id="encryption",
    ),
    pytest.param(
        "bench_tracing", ["--runs", "1", "--jobs", "200"], None,
        r"attempt span .* CPU median [\d.]+ us", id="tracing",
    ),
    pytest.param(
        "bench_streaming_batch", ["--items", "2000", "--chunk", "500"], None,
        r"2,000 items, chunk 500: [\d.]+ s \([\d,]+ items/s\)", id="streaming-batch",
    ),
    pytest.param("bench_instructions", ["50"], None, r"n=50 drained=True", id="instructions"),
    pytest.param(
        "bench_enqueue_instructions", ["batch", "100"], None, None, id="enqueue-instructions"
    ),
    pytest.param(
        "bench_observability",
        ["--only", "sqlite", "--runs", "1", "--jobs", "200", "--variants", "off,metrics"], None,
        r"metrics / off, throughput: median \d\.\d+", id="observability",
    ),
    pytest.param(
        "bench_query",
        ["--url", SERVER_URL, "--runs", "1", "--jobs", "2000", "--repeat", "2"],
        "postgres_server", r"\| count by status \(full count\) \| [\d.]+ \|",
        id="query", marks=pytest.mark.postgres,
    ),
    pytest.param(
        "bench_dashboard",
        ["--url", SERVER_URL, "--runs", "1", "--jobs", "300", "--repeat", "2"],
        "postgres_server", r"\| cluster \| [\d.]+ \| [\d.]+ \|",
        id="dashboard", marks=pytest.mark.postgres,
    ),
    pytest.param(
        "bench_mysql",
        ["--url", SERVER_URL, "--runs", "1", "--jobs", "300", "--only", "bulk,process"],
        "mariadb_server", r"bulk enqueue\s+median\s+[\d,.]+ jobs/s",
        id="mysql", marks=pytest.mark.mysql,
    ),
    pytest.param(
        "bench_redis_wakeup",
        ["--redis-url", SERVER_URL, "--samples", "5", "--notify-calls", "50", "--pace", "0.05",
         "--json"],
        "redis_server", r'"p50', id="redis-wakeup", marks=pytest.mark.redis,
    ),
]  # fmt: skip


@pytest.mark.parametrize(("name", "args", "server", "headline"), BENCHMARKS)
def test_the_benchmark_runs_and_prints_its_headline(
    request: pytest.FixtureRequest,
    name: str,
    args: list[str],
    server: str | None,
    headline: str | None,
) -> None:
    if server is not None:
        url = request.getfixturevalue(server).url()
        args = [url if arg == SERVER_URL else arg for arg in args]
    out = run_benchmark(name, *args)
    if headline is not None:
        assert re.search(headline, out), out
