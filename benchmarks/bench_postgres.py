"""PostgreSQL benchmark: processing, enqueue, wakeup latency, claim cost and a burst after idle.

Run on demand::

    uv run python benchmarks/bench_postgres.py [--runs 3] [--jobs 50000] [--url postgresql://...]

Without ``--url`` it starts a throwaway PostgreSQL with the server's default durability settings
(fsync and synchronous_commit on) on loopback. Each figure is the median of ``--runs`` runs on a
fresh database. Workers are real ``ratchet worker`` processes running no-op jobs; this file is
also their job module (``bench_postgres:app``).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
URL_ENV = "RATCHET_BENCH_URL"
COORDINATOR_ENV = "RATCHET_BENCH_COORDINATOR"

_app: Any = None
_start_conn: Any = None


# ---------------------------------------------------------------------- the job module side
def noop(i: int) -> None:
    """The benchmarked job: does nothing."""


def mark_start(i: int) -> None:
    """Records when it started (submit -> start latency)."""
    started = time.time()
    global _start_conn
    import psycopg

    if _start_conn is None:
        _start_conn = psycopg.connect(_libpq(os.environ[URL_ENV]), autocommit=True)
    _start_conn.execute("INSERT INTO bench_start (n, at) VALUES (%s, %s)", (i, started))
    _start_conn.execute("SELECT pg_notify('bench_start', %s)", (str(i),))


def __getattr__(name: str) -> Any:
    global _app
    if name != "app":
        raise AttributeError(name)
    if _app is None:
        from ratchet import Ratchet

        _app = Ratchet(
            os.environ[URL_ENV],
            allowed_modules=["bench_postgres"],
            coordinator=os.environ.get(COORDINATOR_ENV, "local"),
        )
    return _app


# ---------------------------------------------------------------------- helpers
def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def durable_server(url: str | None, **settings: str) -> tuple[str, Any]:
    """``url`` and None when a server was given; else a throwaway PostgreSQL on loopback with
    the server's default durability settings (``fsync``, ``synchronous_commit`` and
    ``full_page_writes`` on) plus ``settings``: its URL and the server, which the caller cleans
    up."""
    if url is not None:
        return url, None
    from ratchet.testing.servers import PostgresServer

    durable = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
    server = PostgresServer(settings={**durable, **settings}).start()
    return server.url(), server


class Bench:
    """Fresh databases on one server."""

    def __init__(self, server_url: str) -> None:
        import psycopg
        from sqlalchemy.engine import make_url

        self.server_url = server_url
        self._make_url = make_url
        self.admin = psycopg.connect(
            _libpq(make_url(server_url).set(database="postgres").render_as_string(False)),
            autocommit=True,
        )

    @contextmanager
    def database(self) -> Iterator[str]:
        from ratchet_postgres import PostgresStore

        name = f"bench_{uuid.uuid4().hex[:10]}"
        self.admin.execute(f"CREATE DATABASE {name}")
        url = self._make_url(self.server_url).set(database=name).render_as_string(False)
        store = PostgresStore(url)
        store.migrate()
        store.close()
        try:
            yield url
        finally:
            self.admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def worker_env(url: str, coordinator: str = "local") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    env[URL_ENV] = url
    env[COORDINATOR_ENV] = coordinator
    return env


def start_workers(url: str, count: int, *args: str, coordinator: str = "local") -> list[Any]:
    ratchet = Path(sys.executable).with_name("ratchet")
    return [
        subprocess.Popen(
            [str(ratchet), "worker", "bench_postgres:app", "--log-level", "WARNING", *args],
            env=worker_env(url, coordinator),
            stdout=subprocess.DEVNULL,
        )
        for _ in range(count)
    ]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_workers(procs: list[Any]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(timeout=60)


def client(url: str, coordinator: str = "local") -> Any:
    from ratchet import Ratchet

    return Ratchet(url, allowed_modules=["bench_postgres"], coordinator=coordinator)


def fn(name: str) -> Callable[..., Any]:
    """The job function imported as ``bench_postgres.<name>`` (not ``__main__``)."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import bench_postgres

    return getattr(bench_postgres, name)  # type: ignore[no-any-return]


def scalar(url: str, query: str, *params: Any) -> Any:
    import psycopg

    with psycopg.connect(_libpq(url), autocommit=True) as conn:
        cur = conn.execute(query, params or None)
        row = cur.fetchone() if cur.description else None
        return None if row is None else row[0]


# ---------------------------------------------------------------------- measurements
def server_cpu(bench: Bench, url: str) -> dict[int, float]:
    """CPU seconds so far of each server process connected to ``url``'s database, read from
    ``/proc/<pid>/schedstat`` (nanosecond resolution); empty unless the server is local."""
    parsed = bench._make_url(url)
    if parsed.host not in (None, "", "localhost", "127.0.0.1", "::1"):
        return {}
    database = parsed.database
    pids = bench.admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s", (database,)
    ).fetchall()
    found = {}
    for (pid,) in pids:
        with suppress(OSError, ValueError, IndexError):
            found[pid] = int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    return found


def bulk_enqueue(bench: Bench, n: int) -> float:
    with bench.database() as url:
        app = client(url)
        builders = [app.enqueue(fn("noop"), i) for i in range(n)]
        before = server_cpu(bench, url)
        started, cpu = time.perf_counter(), time.process_time()
        for chunk in range(0, n, 1000):
            app.submit_many(builders[chunk : chunk + 1000])
        elapsed = time.perf_counter() - started
        CLIENT_CPU.setdefault("bulk", []).append((time.process_time() - cpu) / n * 1e6)
        after = server_cpu(bench, url)
        if after:
            spent = sum(t - before.get(pid, 0.0) for pid, t in after.items())
            SERVER_CPU.setdefault("bulk", []).append(spent / n * 1e6)
        app.close()
    return n / elapsed


def single_enqueue(bench: Bench, n: int, coordinator: str = "local") -> float:
    with bench.database() as url:
        app = client(url, coordinator)
        for i in range(50):  # warm up the pool and prepared statements
            app.enqueue(fn("noop"), -i).submit()
        started, cpu = time.perf_counter(), time.process_time()
        for i in range(n):
            app.enqueue(fn("noop"), i).submit()
        elapsed = time.perf_counter() - started
        CLIENT_CPU.setdefault(f"single/{coordinator}", []).append(
            (time.process_time() - cpu) / n * 1e6
        )
        app.close()
    return n / elapsed


WORKER_ARGS = ("--concurrency", "192", "--batch-size", "500", "--min-delay", "0.05",
               "--max-delay", "0.2", "--burst-delay", "0.01")  # fmt: skip


CPU_PER_JOB: dict[int, list[float]] = {}
CLIENT_CPU: dict[str, list[float]] = {}
SERVER_CPU: dict[str, list[float]] = {}


def process(bench: Bench, n: int, processes: int) -> float:
    """Jobs/s of ``processes`` worker processes draining ``n`` queued no-op jobs.

    Measured from the first claim to the last completion (database timestamps), so process
    start-up is not counted. Also records the workers' CPU time per job (start-up included).
    """
    with bench.database() as url:
        app = client(url)
        builders = [app.enqueue(fn("noop"), i) for i in range(n)]
        for chunk in range(0, n, 5000):
            app.submit_many(builders[chunk : chunk + 5000])
        app.close()
        procs = start_workers(url, processes, *WORKER_ARGS)
        try:
            rate = _drain(url, procs, n)
            cpu = sum(cpu_seconds(p.pid) for p in procs)
            CPU_PER_JOB.setdefault(processes, []).append(cpu / n * 1e6)
        finally:
            stop_workers(procs)
    return rate


#: A default worker that polls about once a second when idle: the burst row's worker.
IDLE_POLLING = ("--min-delay", "0.5", "--max-delay", "1")


def _drain(url: str, procs: list[Any], n: int) -> float:
    """Jobs/s from the first start to the last end once ``procs`` drained the queue; checks
    that all ``n`` jobs succeeded."""
    deadline = time.monotonic() + 600
    while scalar(url, "SELECT count(*) FROM scheduler_job_queue") > 0:
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a worker exited before the queue was drained")
        if time.monotonic() > deadline:
            raise TimeoutError("workers did not finish")
        time.sleep(0.2)
    span = scalar(
        url,
        "SELECT (SELECT max(terminated_at) FROM scheduler_job_end)"
        " - (SELECT min(started_at) FROM scheduler_job_execution)",
    )
    done = scalar(url, "SELECT count(*) FROM scheduler_job_end WHERE terminal_status = 'SUCCEEDED'")
    assert done == n, f"{done} of {n} succeeded"
    return n / (span / 1e6)


def burst_after_idle(bench: Bench, n: int, idle: float) -> float:
    """Jobs/s of one default worker that polled an empty queue for ``idle`` seconds, its
    statistics those of an empty table (``ANALYZE``, as autovacuum leaves a drained queue),
    when ``n`` jobs arrive at once (submitted by 5,000 while it works).

    The claims and outcome writes it ran while idle must not leave it a plan made for the
    empty queue (docs/postgres.md, *Prepared statements and generic plans*)."""
    with bench.database() as url:
        scalar(url, "ANALYZE")
        procs = start_workers(url, 1, *IDLE_POLLING)
        try:
            time.sleep(idle)  # the idle spell being measured, not a synchronisation
            app = client(url)
            for chunk in range(0, n, 5000):
                app.submit_many(
                    [app.enqueue(fn("noop"), i) for i in range(chunk, min(n, chunk + 5000))]
                )
            app.close()
            return _drain(url, procs, n)
        finally:
            stop_workers(procs)


def _store_loop_child(url: str, node: str, batch: int, out: Any) -> None:
    """Claim ``batch`` jobs and record them SUCCEEDED until the queue is empty (one process)."""
    import bench_jobs

    from ratchet_postgres import PostgresStore

    store = PostgresStore(url)
    boost = timedelta(minutes=15)
    done = 0
    cpu = time.process_time()
    while True:
        now = datetime.now(UTC)
        claimed = store.claim(node, batch, now=now, boost_interval=boost)
        if not claimed:
            break
        store.record_outcomes(node, bench_jobs.succeeded(claimed, now), now=now)
        done += len(claimed)
    out.put((done, time.process_time() - cpu))
    store.close()


def store_loop(bench: Bench, n: int, processes: int, batch: int = 100) -> float:
    """Jobs/s of the store alone: claim 100, record 100 outcomes, repeat (no worker, no jobs).

    The same loop as the issue's bare-psycopg reference, through ``PostgresStore``.
    """
    import multiprocessing

    with bench.database() as url:
        app = client(url)
        builders = [app.enqueue(fn("noop"), i) for i in range(n)]
        for chunk in range(0, n, 5000):
            app.submit_many(builders[chunk : chunk + 5000])
        app.close()
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        children = [
            ctx.Process(target=_store_loop_child, args=(url, f"loop-{i}", batch, out))
            for i in range(processes)
        ]
        started = time.perf_counter()
        for child in children:
            child.start()
        results = [out.get(timeout=600) for _ in children]
        elapsed = time.perf_counter() - started
        for child in children:
            child.join()
    assert sum(r[0] for r in results) == n
    STORE_CPU.setdefault(processes, []).append(sum(r[1] for r in results) / n * 1e6)
    return n / elapsed


STORE_CPU: dict[int, list[float]] = {}


def latency(bench: Bench, samples: int) -> tuple[float, float]:
    """Submit -> start latency (ms, p50 and p99) through LISTEN/NOTIFY to an idle worker."""
    with bench.database() as url:
        scalar(url, "CREATE TABLE bench_start (n integer PRIMARY KEY, at double precision)")
        idle = ("--concurrency", "4", "--min-delay", "30", "--max-delay", "30",
                "--burst-delay", "30")  # fmt: skip
        procs = start_workers(url, 1, *idle, coordinator="postgres")
        app = client(url, "postgres")
        try:
            deadline = time.monotonic() + 60
            while not scalar(
                url,
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name = 'ratchet-listener' AND query LIKE 'LISTEN%%'",
            ):
                if time.monotonic() > deadline:
                    raise TimeoutError("worker did not start listening")
                time.sleep(0.1)
            time.sleep(1.0)  # let the worker's first (empty) poll pass
            import psycopg

            values = []
            # Wait for each start on one LISTENing connection (blocking in libpq, no polling:
            # a polling loop would compete with the measured processes for the CPU and the GIL).
            with psycopg.connect(_libpq(url), autocommit=True) as waiter:
                waiter.execute("LISTEN bench_start")
                for i in range(samples):
                    submitted = time.time()
                    app.enqueue(fn("mark_start"), i).submit()
                    heard = [n.payload for n in waiter.notifies(timeout=30, stop_after=1)]
                    if heard != [str(i)]:
                        raise TimeoutError(f"job {i} did not start within 30 s (heard {heard})")
                    row = waiter.execute("SELECT at FROM bench_start WHERE n = %s", (i,)).fetchone()
                    assert row is not None
                    values.append((row[0] - submitted) * 1000)
                    time.sleep(0.01)  # the worker is idle again before the next submission
        finally:
            app.close()
            stop_workers(procs)
    values.sort()
    return statistics.median(values), values[min(len(values) - 1, int(len(values) * 0.99))]


def claim_cost(bench: Bench, waiting: int, rounds: int = 12, batch: int = 50) -> float:
    """Median milliseconds of one committed claim of ``batch`` jobs with ``waiting`` queued.

    The session commits without waiting for the WAL flush (``synchronous_commit = off``), so the
    figure is the claim's own cost, not the disk's. Also records the buffers one claim touches.
    """
    from sqlalchemy import text

    from ratchet_postgres import PostgresStore
    from ratchet_postgres.store import claim_parameters, claim_statement

    with bench.database() as url:
        store = PostgresStore(url, connect_args={"options": "-c synchronous_commit=off"})
        t0 = datetime(2020, 1, 1, tzinfo=UTC)
        with store.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO scheduler_job (job_id, target, payload, priority, max_retries,"
                    " backoff_policy, backoff_ms, idempotency_key, created_at)"
                    " SELECT gen_random_uuid(), 'bench_postgres:noop', '{}', g % 5, 0, 'NONE', 0,"
                    " 'k' || g, 0 FROM generate_series(1, :n) g"
                ),
                {"n": waiting},
            )
            conn.execute(
                text(
                    "INSERT INTO scheduler_job_queue (job_id, status, priority, scheduled_time,"
                    " attempts, epoch) SELECT job_id, 'PENDING', priority,"
                    " :t0 + row_number() OVER () * 1000, 0, 0 FROM scheduler_job"
                ),
                {"t0": int(t0.timestamp() * 1e6)},
            )
        with store.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE"))
        now = datetime.now(UTC)
        boost = timedelta(minutes=15)
        for _ in range(3):  # 3 + 12 claims of 50 (+1 explained): fewer than 1,000 jobs
            store.claim("warm", batch, now=now, boost_interval=boost)
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            got = store.claim("bench", batch, now=now, boost_interval=boost)
            times.append((time.perf_counter() - started) * 1000)
            assert len(got) == batch
        params = claim_parameters("explain", batch, now, boost)
        with store.engine.begin() as conn:
            plan = conn.execute(
                text("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + claim_statement(True).text),
                params,
            ).scalar_one()
        top = plan[0]["Plan"]
        BUFFERS.setdefault(waiting, []).append(
            top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
        )
        store.close()
    return statistics.median(times)


BUFFERS: dict[int, list[float]] = {}


# ---------------------------------------------------------------------- main
def median_of(runs: int, measure: Callable[[], float]) -> tuple[float, list[float]]:
    values = [measure() for _ in range(runs)]
    return statistics.median(values), values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing server (SQLAlchemy URL; needs CREATEDB)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--single", type=int, default=3_000, help="jobs for single enqueue")
    parser.add_argument("--samples", type=int, default=300, help="latency samples")
    parser.add_argument("--large", type=int, default=1_000_000, help="jobs waiting (claim cost)")
    parser.add_argument(
        "--idle", type=float, default=12.0, help="burst: seconds the worker polls an empty queue"
    )
    parser.add_argument(
        "--only",
        help="comma list: process,storeloop,bulk,single,latency,claim,burst (default: all)",
    )
    args = parser.parse_args(argv)
    only = set((args.only or "process,storeloop,bulk,single,latency,claim,burst").split(","))

    url, server = durable_server(args.url, max_connections="200")
    bench = Bench(url)
    version = scalar(url, "SHOW server_version")
    durability = scalar(
        url, "SELECT current_setting('fsync') || '/' || current_setting('synchronous_commit')"
    )
    print(f"PostgreSQL {version}; Python {platform.python_version()}; {platform.machine()};"
          f" {os.cpu_count()} CPUs; {platform.platform()}; fsync/synchronous_commit"
          f" {durability}; load average at start {os.getloadavg()[0]:.1f}")  # fmt: skip
    rows: list[tuple[str, str, str, str]] = []

    def report(what: str, value: str, target: str, runs: list[float]) -> None:
        rows.append(
            (what, value, target, ", ".join(f"{v:,.0f}" if v > 100 else f"{v:.2f}" for v in runs))
        )
        print(f"  {what:<40} {value:>14}   target {target:<12} runs: {rows[-1][3]}", flush=True)

    try:
        if "process" in only:
            # one and two processes in alternating rounds: the ratio is read per round
            one: list[float] = []
            two: list[float] = []
            for _ in range(args.runs):
                one.append(process(bench, args.jobs, 1))
                two.append(process(bench, args.jobs, 2))
            for procs, runs in ((1, one), (2, two)):
                med = statistics.median(runs)
                report(f"{procs} worker process(es), no-op jobs", f"{med:,.0f} jobs/s", "", runs)
            ratios = [b / a for a, b in zip(one, two, strict=True)]
            report("2 processes / 1, per round", f"{statistics.median(ratios):.2f}x", ">= 1.3x",
                   ratios)  # fmt: skip
            for procs, values in sorted(CPU_PER_JOB.items()):
                cpu = statistics.median(values)
                report(f"worker CPU per job ({procs} process(es))", f"{cpu:,.0f} us", "", values)
        if "burst" in only:
            med, runs = median_of(args.runs, lambda: burst_after_idle(bench, args.jobs, args.idle))
            report(f"a burst after {args.idle:g} s idle, 1 default worker", f"{med:,.0f} jobs/s",
                   "", runs)  # fmt: skip
        if "storeloop" in only:
            for procs in (1, 2):
                med, runs = median_of(args.runs, lambda p=procs: store_loop(bench, args.jobs, p))
                report(f"store only: claim+complete by 100, {procs} proc", f"{med:,.0f} jobs/s",
                       "", runs)  # fmt: skip
                cpu = statistics.median(STORE_CPU[procs])
                report("  client CPU per job (store only)", f"{cpu:,.0f} us", "", STORE_CPU[procs])
        if "bulk" in only:
            med, runs = median_of(args.runs, lambda: bulk_enqueue(bench, args.jobs))
            report("bulk enqueue (1,000 per transaction)", f"{med:,.0f} jobs/s", ">= 30,000", runs)
            cpu = statistics.median(CLIENT_CPU["bulk"])
            report("  client CPU per bulk-enqueued job", f"{cpu:,.1f} us", "", CLIENT_CPU["bulk"])
            if SERVER_CPU.get("bulk"):
                cpu = statistics.median(SERVER_CPU["bulk"])
                report(
                    "  server CPU per bulk-enqueued job", f"{cpu:,.1f} us", "", SERVER_CPU["bulk"]
                )
        if "single" in only:
            med, runs = median_of(args.runs, lambda: single_enqueue(bench, args.single))
            report("single enqueue (1 per transaction)", f"{med:,.0f} jobs/s", ">= 1,800", runs)
            med, runs = median_of(args.runs, lambda: single_enqueue(bench, args.single, "postgres"))
            report("single enqueue + NOTIFY coordinator", f"{med:,.0f} jobs/s", "", runs)
            cpu = statistics.median(CLIENT_CPU["single/local"])
            report(
                "  client CPU per single enqueue", f"{cpu:,.0f} us", "", CLIENT_CPU["single/local"]
            )
        if "latency" in only:
            results = [latency(bench, args.samples) for _ in range(args.runs)]
            p50 = statistics.median(r[0] for r in results)
            p99 = statistics.median(r[1] for r in results)
            report(
                "submit -> start p50 (LISTEN/NOTIFY)",
                f"{p50:.2f} ms",
                "<= 5 ms",
                [r[0] for r in results],
            )
            report(
                "submit -> start p99 (LISTEN/NOTIFY)",
                f"{p99:.2f} ms",
                "<= 25 ms",
                [r[1] for r in results],
            )
        if "claim" in only:
            small, runs_s = median_of(args.runs, lambda: claim_cost(bench, 1_000))
            report("claim 50 with 1,000 waiting", f"{small:.2f} ms", "", runs_s)
            large, runs_l = median_of(args.runs, lambda: claim_cost(bench, args.large))
            report(f"claim 50 with {args.large:,} waiting", f"{large:.2f} ms",
                   "within 20 %", runs_l)  # fmt: skip
            print(f"  claim cost ratio (large / small): {large / small:.2f}")
            for size, values in sorted(BUFFERS.items()):
                report(f"  buffers one claim touches, {size:,} waiting",
                       f"{statistics.median(values):,.0f}", "", values)  # fmt: skip
    finally:
        bench.admin.close()
        if server is not None:
            server.cleanup()
    print(f"load average at end {os.getloadavg()[0]:.1f}")
    print()
    print("| measurement | result | target |")
    print("|---|---|---|")
    for what, value, target, _ in rows:
        print(f"| {what} | {value} | {target} |")
    return 0


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    sys.exit(main())
