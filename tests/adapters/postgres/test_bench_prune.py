"""A bounded run of ``benchmarks/bench_prune.py --interleave``: 20,000 ended jobs pruned in
half-second phases beside the worker loop (pinned and paced), every row gone, the phase and size
tables printed. Not a timing: the figures live in docs/performance.md."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_prune.py"

pytestmark = pytest.mark.postgres


def test_an_interleaved_prune_removes_every_row_and_reports_its_phases(
    postgres_server: object,
) -> None:
    url = postgres_server.url()  # type: ignore[attr-defined]
    pin = ["--pin"] if len(os.sched_getaffinity(0)) > 1 else []
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--url",
            url,
            "--rows",
            "20000",
            "--pending",
            "200",
            "--interleave",
            "0.5",
            "--worker-rate",
            "500",
            *pin,
            "--limit",
            "120",
            "--runs",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=BENCH.parent,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    out = done.stdout
    assert "removed 20,000" in out, out
    assert "worker 500 jobs/s" in out, out
    for phase in ("idle", "prune", "burn"):
        assert f"\n  {phase} " in out, out
    assert "prune / idle of the same cycle" in out, out
    sizes = out[out.index("sizes, MB") :]
    for table in ("scheduler_job ", "scheduler_job_queue", "after VACUUM FULL"):
        assert table in sizes, sizes
