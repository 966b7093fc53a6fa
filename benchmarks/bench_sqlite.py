"""SQLite throughput: bulk enqueue, single enqueue, no-op processing with one worker process.

Run on demand: ``python benchmarks/bench_sqlite.py [--runs 5] [--jobs 20000]``. Prints the median
of several runs for each measurement, plus the machine it ran on.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_jobs

from ratchet import Ratchet

#: The worker settings of every processing benchmark (the PostgreSQL and MySQL ones use the same):
#: no-op jobs finish at once, so throughput is set by how many jobs each claim and each outcome
#: transaction carries, which is bounded by the free slots.
CONCURRENCY = 64
BATCH_SIZE = 200


def fresh_app(workdir: str, name: str) -> Ratchet:
    return Ratchet(f"sqlite:///{os.path.join(workdir, name)}", allowed_modules=["bench_jobs"])


def bulk_enqueue(workdir: str, n: int, run: int) -> float:
    app = fresh_app(workdir, f"bulk{run}.db")
    builders = [app.enqueue(bench_jobs.noop, i) for i in range(n)]
    start, cpu = time.perf_counter(), time.process_time()
    for chunk in range(0, n, 5000):
        app.submit_many(builders[chunk : chunk + 5000])
    elapsed = time.perf_counter() - start
    CPU.setdefault("bulk enqueue", []).append((time.process_time() - cpu) / n * 1e6)
    app.close()
    return n / elapsed


def single_enqueue(workdir: str, n: int, run: int) -> float:
    app = fresh_app(workdir, f"single{run}.db")
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        app.enqueue(bench_jobs.noop, i).submit()
    elapsed = time.perf_counter() - start
    CPU.setdefault("single enqueue", []).append((time.process_time() - cpu) / n * 1e6)
    app.close()
    return n / elapsed


#: Client CPU (this process: Python and SQLite itself) per job, by measurement.
CPU: dict[str, list[float]] = {}


def process(workdir: str, n: int, run: int) -> float:
    app = fresh_app(workdir, f"proc{run}.db")
    builders = [app.enqueue(bench_jobs.noop, i) for i in range(n)]
    for chunk in range(0, n, 5000):
        app.submit_many(builders[chunk : chunk + 5000])
    rate = drain(app, n)
    app.close()
    return rate


def drain(app: Ratchet, n: int, timeout: float = 600, *, defaults: bool = False) -> float:
    """Jobs per second of one worker (the settings above, or with ``defaults`` every setting at
    its default) running the ``n`` jobs ``app``'s database holds, all of which must succeed."""
    worker = (
        app.worker()
        if defaults
        else app.worker(
            concurrency=CONCURRENCY,
            batch_size=BATCH_SIZE,
            min_delay=timedelta(milliseconds=20),
            burst_delay=timedelta(milliseconds=5),
        )
    )
    start = time.perf_counter()
    worker.start()
    ok = worker.wait_until(lambda: worker.stats.succeeded >= n, timeout=timeout)
    elapsed = time.perf_counter() - start
    worker.stop()
    assert ok and app.store.count_by_status().get("SUCCEEDED") == n
    return n / elapsed


def median_of(label: str, fn: Callable[[str, int, int], float], n: int, runs: int) -> float:
    values = []
    for run in range(runs):
        with tempfile.TemporaryDirectory(prefix="ratchet-bench-") as workdir:
            values.append(fn(workdir, n, run))
    med = statistics.median(values)
    print(
        f"{label:<28} median {med:>9,.0f} jobs/s   runs: {', '.join(f'{v:,.0f}' for v in values)}"
    )
    if label in CPU:
        cpu = CPU[label]
        print(f"{'  CPU per job':<28} median {statistics.median(cpu):>9,.1f} us       runs: "
              f"{', '.join(f'{c:.1f}' for c in cpu)}")  # fmt: skip
    return med


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--only", help="comma list: bulk,single,process (default: all)")
    args = parser.parse_args()
    only = set((args.only or "bulk,single,process").split(","))
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        f", load average {os.getloadavg()[0]:.1f}"
    )
    if "bulk" in only:
        median_of("bulk enqueue", bulk_enqueue, args.jobs, args.runs)
    if "single" in only:
        median_of("single enqueue", single_enqueue, min(args.jobs, 5000), args.runs)
    if "process" in only:
        median_of("no-op processing (1 proc)", process, args.jobs, args.runs)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
