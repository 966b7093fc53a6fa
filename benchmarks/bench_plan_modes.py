"""PostgreSQL benchmark: the claim and the outcome write sent with their text, or prepared.

Run on demand::

    uv run python benchmarks/bench_plan_modes.py [--jobs 60000] [--batches 100,10] [--url ...]

Both ways plan the statements at every call, for the queue as it is then. *Sent with their text*
(libpq's ``PQexecParams``) the server also parses and analyses them at each call; *prepared*
(what the store does, ``NamedStatement(planned_per_call=True)``) it parses them once per
connection and runs each call behind a statement that forces a custom plan for that call's
transaction. One process claims a batch and records its outcomes one way, then the other,
alternating call by call on one queue, so a busy or quiet spell of the machine weighs on both
alike. Prints the median time per job of each way, their ratio, and the client CPU per job.
Without ``--url`` it starts a throwaway PostgreSQL with the server's default durability settings.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import bench_jobs  # noqa: E402
import bench_postgres  # noqa: E402

GATE = {"p_takeovers": 3, "p_window": 0, "p_grace": 0, "without_row": True}
"""The claim's takeover gate: nothing timed out, nodes need no row (a bare store loop)."""

BOOST = timedelta(minutes=15)


@dataclass
class Way:
    """One way of sending the two statements, and what it measured."""

    name: str
    prepared: bool
    seconds_per_job: list[float] = field(default_factory=list)
    cpu_seconds: float = 0.0
    jobs: int = 0

    def send(self, driver: Any, statement: Any, params: dict[str, Any]) -> list[Any]:
        """The rows of ``statement`` with ``params``, sent this way."""
        if self.prepared:
            return statement.fetch(driver, params)  # type: ignore[no-any-return]
        from psycopg import pq

        result = driver.pgconn.exec_params(statement.sql, statement.values(params))
        if result.status != pq.ExecStatus.TUPLES_OK:
            raise RuntimeError(result.get_error_message())
        return statement.rows(driver, result)  # type: ignore[no-any-return]


def claim_and_record(way: Way, driver: Any, batch: int) -> int:
    """Claim up to ``batch`` jobs and record them SUCCEEDED, ``way``'s way; the jobs done."""
    from ratchet.sql.claimed import row_maker
    from ratchet.sql.hotpaths import plan_outcomes
    from ratchet_postgres.store import (
        _claimed_jobs,
        _named_claim,
        _named_record,
        _outcome_params,
        claim_parameters,
    )

    claim, record = _named_claim(True, gated=True), _named_record()
    now = datetime.now(UTC)
    params = {**claim_parameters(way.name, batch, now, BOOST), **GATE}
    started, cpu = time.perf_counter(), time.process_time()
    rows = way.send(driver, claim, params)
    assert claim.columns is not None  # known once it has run
    make = row_maker(claim.columns)
    claimed = _claimed_jobs([r for r in map(make, rows) if r.job_id is not None], now)
    if claimed:
        planned = plan_outcomes(bench_jobs.succeeded(claimed, now), now)
        written = way.send(driver, record, _outcome_params(way.name, planned))
        assert len(written) == len(claimed)
        way.seconds_per_job.append((time.perf_counter() - started) / len(claimed))
        way.cpu_seconds += time.process_time() - cpu
        way.jobs += len(claimed)
    return len(claimed)


def compare(bench: bench_postgres.Bench, jobs: int, batch: int) -> tuple[Way, Way]:
    """Drain ``jobs`` by ``batch``, the two ways alternating call by call (each on its own
    connection), the first of each pair alternating too."""
    import psycopg

    text, prepared = Way("text", prepared=False), Way("prepared", prepared=True)
    with bench.database() as url:
        app = bench_postgres.client(url)
        noop = bench_postgres.fn("noop")
        for start in range(0, jobs, 5000):
            app.submit_many([app.enqueue(noop, i) for i in range(start, min(jobs, start + 5000))])
        app.close()
        libpq = bench_postgres._libpq(url)
        with psycopg.connect(libpq) as one, psycopg.connect(libpq) as other:
            pairs = [(text, one), (prepared, other)]
            calls = 0
            while True:
                order = pairs if calls % 2 == 0 else pairs[::-1]
                if sum(claim_and_record(way, driver, batch) for way, driver in order) == 0:
                    break
                calls += 1
    assert text.jobs + prepared.jobs == jobs
    return text, prepared


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", help="an existing server (SQLAlchemy URL; needs CREATEDB)")
    parser.add_argument("--jobs", type=int, default=60_000, help="jobs queued per batch size")
    parser.add_argument("--batches", default="100,10", help="jobs per call, comma separated")
    args = parser.parse_args(argv)
    url, server = bench_postgres.durable_server(args.url)
    try:
        bench = bench_postgres.Bench(url)
        print("| jobs per call | sent with text, µs/job | prepared, µs/job | ratio |"
              " client CPU µs/job, text / prepared |")  # fmt: skip
        print("|---:|---:|---:|---:|---:|")
        for batch in (int(b) for b in args.batches.split(",")):
            text, prepared = compare(bench, args.jobs, batch)
            slow = statistics.median(text.seconds_per_job) * 1e6
            fast = statistics.median(prepared.seconds_per_job) * 1e6
            print(
                f"| {batch} | {slow:,.1f} | {fast:,.1f} | {fast / slow:.2f} |"
                f" {text.cpu_seconds / text.jobs * 1e6:,.1f} /"
                f" {prepared.cpu_seconds / prepared.jobs * 1e6:,.1f} |",
                flush=True,
            )
        bench.admin.close()
    finally:
        if server is not None:
            server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
