"""CPU of one no-op attempt on a default worker's job path, on one thread, without the store.

A worker's wall-clock throughput mixes the attempt with the poller, the writer, thread
hand-offs and the database. This isolates the attempt: it claims jobs from a SQLite store in
claims of ``--claim`` (not timed), then times :meth:`AttemptRunner.run` for each (the start
check, gates, policy, decoding, the call, the outcome, the slot table and the hand-off to the
completer, whose queue is drained and not written). Run on demand::

    python benchmarks/bench_attempt.py --jobs 20000 --rounds 5
    python benchmarks/bench_attempt.py --jobs 20000 --profile 25   # cProfile, top 25

It prints the median and spread of the CPU per attempt over the rounds. Compare two versions in
the same run (``PYTHONPATH`` pointing at a worktree of each), not against another day's figure.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_jobs

from ratchet import Ratchet
from ratchet.domain.model import OutcomeKind
from ratchet.engine.collector import freeze_startup_heap


def one_round(jobs: int, claim: int, profile: cProfile.Profile | None) -> float:
    """Microseconds of CPU per attempt over ``jobs`` attempts (claims excluded)."""
    with tempfile.TemporaryDirectory(prefix="ratchet-bench-") as workdir:
        app = Ratchet(f"sqlite:///{workdir}/jobs.db", allowed_modules=["bench_jobs"])
        builders = [app.enqueue(bench_jobs.noop, i) for i in range(jobs)]
        for chunk in range(0, jobs, 1000):
            app.submit_many(builders[chunk : chunk + 1000])
        worker = app.worker()
        freeze_startup_heap()  # as `ratchet worker` does
        run = worker.runner.run
        outcomes = worker.completer._queue  # drained by hand: nothing is written
        spent = 0.0
        done = succeeded = 0
        while done < jobs:
            claimed = worker.liveness.acquire(claim)
            if not claimed:
                break
            worker.slots.claimed(claimed)
            worker.start_check.expect(job.key for job in claimed)
            if profile is not None:
                profile.enable()
            started = time.thread_time()
            for job in claimed:
                run(job)
            spent += time.thread_time() - started
            if profile is not None:
                profile.disable()
            done += len(claimed)
            while not outcomes.empty():
                outcome = outcomes.get_nowait()
                if outcome.kind is not OutcomeKind.SUCCEEDED:
                    raise SystemExit(f"a no-op attempt ended {outcome.kind.value}: {outcome.error}")
                succeeded += 1
            worker.slots.written(len(claimed))
        app.close()
        if done < jobs:
            raise SystemExit(f"only {done} of {jobs} jobs were claimed")
        if succeeded != done:
            raise SystemExit(f"{done - succeeded} of {done} attempts handed no outcome over")
        return spent / done * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--claim", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", type=int, default=0, help="print the top N of a cProfile")
    args = parser.parse_args()
    if args.profile:
        profile = cProfile.Profile()
        one_round(args.jobs, args.claim, profile)
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.profile)
        return
    figures = [one_round(args.jobs, args.claim, None) for _ in range(args.rounds)]
    print(
        f"CPU per attempt: median {statistics.median(figures):.1f} us "
        f"(min {min(figures):.1f}, max {max(figures):.1f}, {args.rounds} rounds of {args.jobs})"
    )


if __name__ == "__main__":
    main()
