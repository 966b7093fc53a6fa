"""Payload encryption cost on SQLite, measured side by side: bulk submit and no-op processing
with and without a key provider, alternating within each run.

Run on demand: ``python benchmarks/bench_encryption.py [--runs 5] [--jobs 5000]``. Prints the
median and the range of the runs for each mode and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_jobs

from ratchet import Ratchet
from ratchet.encryption import StaticKeyProvider, generate_key

KEYS = StaticKeyProvider({"bench": generate_key()}, "bench")


def app_for(path: str, sealed: bool) -> Ratchet:
    return Ratchet(
        f"sqlite:///{path}",
        allowed_modules=["bench_jobs"],
        key_provider=KEYS if sealed else None,
    )


def one_run(workdir: str, n: int, run: int, sealed: bool) -> tuple[float, float]:
    """Jobs per second of a bulk submit and of processing them with one worker."""
    app = app_for(os.path.join(workdir, f"{run}-{sealed}.db"), sealed)
    builders = [app.enqueue(bench_jobs.noop, i) for i in range(n)]
    start = time.perf_counter()
    for chunk in range(0, n, 1000):
        app.submit_many(builders[chunk : chunk + 1000])
    submit = n / (time.perf_counter() - start)
    worker = app.worker(concurrency=32, batch_size=200)
    start = time.perf_counter()
    done = worker.run_due()
    process = n / (time.perf_counter() - start)
    assert done == n, f"ran {done} of {n} jobs"
    app.close()
    return submit, process


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=5000)
    args = parser.parse_args()
    results: dict[tuple[str, bool], list[float]] = {}
    with tempfile.TemporaryDirectory() as workdir:
        for run in range(args.runs):
            for sealed in (False, True) if run % 2 == 0 else (True, False):
                submit, process = one_run(workdir, args.jobs, run, sealed)
                results.setdefault(("submit", sealed), []).append(submit)
                results.setdefault(("process", sealed), []).append(process)
    print(f"{args.runs} runs of {args.jobs} jobs; jobs/s, median [min-max]")
    for what in ("submit", "process"):
        plain, sealed = results[(what, False)], results[(what, True)]
        ratio = statistics.median(sealed) / statistics.median(plain)
        print(
            f"{what:8} plain {statistics.median(plain):8.0f} [{min(plain):.0f}-{max(plain):.0f}]"
            f"  sealed {statistics.median(sealed):8.0f} [{min(sealed):.0f}-{max(sealed):.0f}]"
            f"  sealed/plain {ratio:.2f}"
        )


if __name__ == "__main__":
    main()
