"""Instructions the submitting process executes per enqueued no-op job, counted by callgrind.

Like ``bench_instructions.py`` (the worker's side), a count that the machine's load does not
move. Run once per N and take the difference between two N as the per-job cost (start-up and
warm-up cancel out)::

    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.a python benchmarks/bench_enqueue_instructions.py single 100
    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.b python benchmarks/bench_enqueue_instructions.py single 500

and read ``Collected : ...`` from each: (count(500) - count(100)) / 400. ``single`` submits one job
per transaction, ``batch`` 1,000 per ``submit_many`` (building the jobs included; give N in
thousands). ``--url`` points at a migrated PostgreSQL or MySQL database (its server runs outside
valgrind, so only the client is counted); without it, a fresh SQLite file (SQLite's own work is
then counted too). After the warm-up the heap is frozen (``gc.freeze()``): a full collection of
the start-up objects would otherwise land in one run and not the other and dwarf the difference.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_jobs

from ratchet import Ratchet


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("mode", choices=["single", "batch"])
    parser.add_argument("n", type=int)
    parser.add_argument("--url", help="a migrated database (default: a fresh SQLite file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        app = Ratchet(args.url or f"sqlite:///{workdir}/jobs.db", allowed_modules=["bench_jobs"])
        for i in range(10):  # warm up: connections, caches, prepared statements
            app.enqueue(bench_jobs.noop, -i).submit()
        app.submit_many([app.enqueue(bench_jobs.noop, -i) for i in range(1000)])
        gc.collect()
        gc.freeze()
        if args.mode == "single":
            for i in range(args.n):
                app.enqueue(bench_jobs.noop, i).submit()
        else:
            for start in range(0, args.n, 1000):
                app.submit_many(
                    [app.enqueue(bench_jobs.noop, i) for i in range(start, start + 1000)]
                )
        app.close()


if __name__ == "__main__":
    main()
