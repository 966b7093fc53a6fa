"""A real Prometheus scrapes real ``ratchet worker --metrics-port`` processes and finds, through
its HTTP API, the jobs they ran; with two workers, the queue is counted once."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import procs
import pytest
import sample_jobs

from ratchet import Ratchet
from ratchet.config import WorkerConfig
from ratchet.testing.servers import PrometheusServer, free_port

pytestmark = pytest.mark.prometheus

METRICS = ["--metrics-interval", "0.2"]


def value(prometheus: PrometheusServer, expr: str) -> float | None:
    """The single value of ``expr`` now (None while it has no result)."""
    result = prometheus.query(expr)
    if not result:
        return None
    assert len(result) == 1, result
    return float(result[0]["value"][1])  # type: ignore[index]


def eventually(
    prometheus: PrometheusServer, expr: str, expected: float, log: Path, timeout: float = 90
) -> None:
    """Poll Prometheus until ``expr`` equals ``expected`` (a deadline, no fixed sleep)."""
    seen: list[float | None] = []
    ok = procs.wait_for(
        lambda: seen.append(value(prometheus, expr)) or seen[-1] == expected,
        timeout=timeout,
        interval=0.25,
    )
    assert ok, f"{expr} = {seen[-1:]} (wanted {expected}); worker log:\n{log.read_text()}"


def test_prometheus_scrapes_the_job_counts_a_worker_ran(
    app: Ratchet,
    sqlite_url: str,
    tmp_path: Path,
    prometheus_factory: Callable[..., PrometheusServer],
) -> None:
    port = free_port()
    prometheus = prometheus_factory([f"127.0.0.1:{port}"], scrape_interval=0.5)
    ok = [app.enqueue(sample_jobs.record, i).submit() for i in range(7)]
    dead = [app.enqueue(sample_jobs.fail_permanently).submit() for _ in range(3)]
    log = tmp_path / "worker.log"
    worker = procs.start_worker(sqlite_url, "--metrics-port", str(port), *METRICS, log=log)
    try:
        assert procs.wait_for(
            lambda: all(h.status().is_terminal for h in (*ok, *dead)), timeout=60
        ), log.read_text()
        eventually(prometheus, 'up{job="ratchet"}', 1, log)
        completed = "sum by (outcome) (ratchet_jobs_completed_total{outcome=%r})"
        eventually(prometheus, completed % "succeeded", 7, log)
        eventually(prometheus, completed % "dead_lettered", 3, log)
        eventually(
            prometheus,
            'ratchet_jobs_started_total{target="sample_jobs:record",priority="normal"}',
            7,
            log,
        )
        eventually(prometheus, "sum(ratchet_job_run_duration_seconds_count)", 10, log)
        eventually(prometheus, "ratchet_cluster_sampler", 1, log)
        # Every slot of a default worker is free once the jobs are done.
        free = WorkerConfig().concurrency
        eventually(prometheus, 'sum(ratchet_worker_slots{state="free"})', free, log)
        eventually(prometheus, "count(ratchet_node_heartbeat_age_seconds)", 1, log)
    finally:
        [code] = procs.stop([worker])
    assert code == 0, log.read_text()


def test_two_workers_export_the_queue_once(
    app: Ratchet,
    sqlite_url: str,
    tmp_path: Path,
    prometheus_factory: Callable[..., PrometheusServer],
) -> None:
    ports = [free_port(), free_port()]
    prometheus = prometheus_factory([f"127.0.0.1:{p}" for p in ports], scrape_interval=0.5)
    for i in range(5):
        app.schedule(timedelta(hours=1), sample_jobs.record, i).submit()
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    workers = [
        procs.start_worker(sqlite_url, "--metrics-port", str(p), *METRICS, log=log)
        for p, log in zip(ports, logs, strict=True)
    ]
    try:
        eventually(prometheus, 'count(up{job="ratchet"} == 1)', 2, logs[0])
        eventually(prometheus, "count(ratchet_node_heartbeat_age_seconds)", 2, logs[0])
        # Exactly one worker (the lease holder) exports the cluster gauges: a plain sum over
        # the scraped workers counts every waiting job once.
        eventually(prometheus, 'sum(ratchet_queue_depth{status="PENDING"})', 5, logs[0])
        eventually(prometheus, "count(ratchet_cluster_sampler)", 1, logs[0])
        eventually(prometheus, 'count(ratchet_worker_slots{state="free"})', 2, logs[0])
    finally:
        codes = procs.stop(workers)
    assert codes == [0, 0], "\n".join(log.read_text() for log in logs)
