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
from typing import Any

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


def test_bench_sqlite() -> None:
    out = run_benchmark("bench_sqlite", "--runs", "1", "--jobs", "300")
    assert re.search(r"no-op processing \(1 proc\)\s+median\s+[\d,]+ jobs/s", out), out


def test_bench_encryption() -> None:
    out = run_benchmark("bench_encryption", "--runs", "1", "--jobs", "200")
    assert re.search(r"process\s+plain\s+\d+ .* sealed/plain \d\.\d\d", out), out


def test_bench_tracing() -> None:
    out = run_benchmark("bench_tracing", "--runs", "1", "--jobs", "200")
    assert re.search(r"attempt span .* CPU median [\d.]+ us", out), out


def test_bench_streaming_batch() -> None:
    out = run_benchmark("bench_streaming_batch", "--items", "2000", "--chunk", "500")
    assert re.search(r"2,000 items, chunk 500: [\d.]+ s \([\d,]+ items/s\)", out), out


def test_bench_instructions() -> None:
    out = run_benchmark("bench_instructions", "50")
    assert "n=50 drained=True" in out, out


def test_bench_enqueue_instructions() -> None:
    run_benchmark("bench_enqueue_instructions", "batch", "100")


def test_bench_observability() -> None:
    out = run_benchmark(
        "bench_observability", "--only", "sqlite", "--runs", "1", "--jobs", "200",
        "--variants", "off,metrics",
    )  # fmt: skip
    assert re.search(r"metrics / off, throughput: median \d\.\d+", out), out


@pytest.mark.postgres
def test_bench_query(postgres_server: Any) -> None:
    out = run_benchmark(
        "bench_query", "--url", postgres_server.url(), "--runs", "1", "--jobs", "2000",
        "--repeat", "2",
    )  # fmt: skip
    assert re.search(r"\| count by status \(full count\) \| [\d.]+ \|", out), out


@pytest.mark.postgres
def test_bench_dashboard(postgres_server: Any) -> None:
    out = run_benchmark(
        "bench_dashboard", "--url", postgres_server.url(), "--runs", "1", "--jobs", "300",
        "--repeat", "2",
    )  # fmt: skip
    assert re.search(r"\| cluster \| [\d.]+ \| [\d.]+ \|", out), out


@pytest.mark.mysql
def test_bench_mysql(mariadb_server: Any) -> None:
    out = run_benchmark(
        "bench_mysql", "--url", mariadb_server.url(), "--runs", "1", "--jobs", "300",
        "--only", "bulk,process",
    )  # fmt: skip
    assert re.search(r"bulk enqueue\s+median\s+[\d,.]+ jobs/s", out), out


@pytest.mark.redis
def test_bench_redis_wakeup(redis_server: Any) -> None:
    out = run_benchmark(
        "bench_redis_wakeup", "--redis-url", redis_server.url(), "--samples", "5",
        "--notify-calls", "50", "--pace", "0.05", "--json",
    )  # fmt: skip
    assert re.search(r'"p50', out), out
