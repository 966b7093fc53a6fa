"""Instructions a default worker executes per no-op job on SQLite, counted by callgrind.

Wall-clock figures move by 2x with the machine's load; instruction counts do not. Run on demand,
once per N, and take the difference between two N as the per-job cost (start-up cancels out)::

    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.100 python benchmarks/bench_instructions.py 100
    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.600 python benchmarks/bench_instructions.py 600

and read ``Collected : ...`` from each run's output: (count(600) - count(100)) / 500. With
``CALLGRIND_WORKER_ONLY=1`` and ``valgrind --tool=callgrind --instr-atstart=no`` only the
worker's part is counted (from just before it starts), not the submissions.
A second argument, ``otel`` or ``otel10``, traces every job (the OpenTelemetry SDK with a batch
processor and an exporter that drops the spans; ``otel10`` samples one trace in ten: the jobs
are submitted 20 to a submission, so about a tenth of them), so the difference to a run without
it is what tracing costs per job. Take N of a few thousand for it: the oldest-generation garbage
collections that tracing adds come every few thousand jobs, and a short run misses them.
Threads are serialised under valgrind and time spent waiting is not counted, so this measures the
work per job, not the cost of threads handing work to each other.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_tracing import make_app, submit

from ratchet import Ratchet


def main(n: int, tracing: str = "off") -> None:
    with tempfile.TemporaryDirectory() as workdir:
        app = Ratchet(f"sqlite:///{workdir}/jobs.db", allowed_modules=["bench_jobs"])
        provider = None
        if tracing != "off":
            app.close()
            app, provider, _ = make_app(workdir, tracing)
        if n:
            submit(app, n)  # in submissions of 20: each is a trace when traced
        worker = app.worker()  # the defaults a user gets
        if os.environ.get("CALLGRIND_WORKER_ONLY"):
            # Run under valgrind --instr-atstart=no: count from here (not the submissions).
            subprocess.run(["callgrind_control", "--instr=on", str(os.getpid())], check=True)
        started = time.perf_counter()
        worker.start()
        drained = worker.wait_until(lambda: worker.stats.succeeded >= n, timeout=3600)
        elapsed = time.perf_counter() - started
        worker.stop()
        app.close()
        if provider is not None:
            provider.shutdown()
        print(f"n={n} drained={drained} in {elapsed:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100, *sys.argv[2:3])
