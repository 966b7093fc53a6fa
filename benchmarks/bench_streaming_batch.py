"""Streaming batch: stream N items (default 1,000,000) into SQLite and report peak memory.

Run on demand: ``python benchmarks/bench_streaming_batch.py [--items 1000000] [--chunk 500]``.
The items come from a generator, so nothing but the current chunk is ever held; ``tracemalloc``
measures the peak of Python allocations while streaming (the SQLite page cache is C memory and
is reported separately as the process's peak RSS growth). A smaller run with the same chunk size
is measured too: a bounded stream has the same peak whatever its length.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_jobs

from ratchet import Ratchet


def items(n: int) -> Iterator[int]:
    yield from range(n)


def stream(workdir: str, n: int, chunk: int) -> dict[str, float]:
    app = Ratchet(
        f"sqlite:///{os.path.join(workdir, f'stream-{n}.db')}", allowed_modules=["bench_jobs"]
    )
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    tracemalloc.reset_peak()
    base, _ = tracemalloc.get_traced_memory()
    start = time.perf_counter()
    handle = (
        app.streaming_batch("bench")
        .from_iterable(items(n))
        .process(bench_jobs.noop)
        .with_chunk_size(chunk)
        .start()
    )
    elapsed = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ctx = handle.context()
    assert ctx.total == n and ctx.sealed, ctx
    app.close()
    return {
        "items": n,
        "seconds": elapsed,
        "items_per_s": n / elapsed,
        "peak_mib": (peak - base) / 2**20,
        "rss_growth_mib": (rss_after - rss_before) / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--chunk", type=int, default=500)
    parser.add_argument(
        "--only-full", action="store_true", help="skip the run with a tenth of the items"
    )
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as workdir:
        for n in (args.items,) if args.only_full else (args.items // 10, args.items):
            r = stream(workdir, n, args.chunk)
            print(
                f"{int(r['items']):>9,} items, chunk {args.chunk}: {r['seconds']:.1f} s "
                f"({r['items_per_s']:,.0f} items/s), tracemalloc peak {r['peak_mib']:.2f} MiB, "
                f"peak RSS growth {r['rss_growth_mib']:.1f} MiB"
            )


if __name__ == "__main__":
    main()
