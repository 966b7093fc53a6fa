"""Many worker nodes on one PostgreSQL: connections, transactions/s and CPU, idle and busy.

Run on demand::

    uv run python benchmarks/bench_nodes.py --processes 10
    uv run python benchmarks/bench_nodes.py --processes 20 --workers-per-process 5 --no-busy
    uv run python benchmarks/bench_nodes.py --processes 10 --busy-jobs 1500 --no-idle
    uv run python benchmarks/bench_nodes.py --processes 3 --pgbouncer
    uv run python benchmarks/bench_nodes.py --processes 50 --concurrency 4 --job-ms 500 \\
        --busy-jobs 6000 --no-idle

It starts a throwaway PostgreSQL (with ``pg_stat_statements``; and, with ``--pgbouncer``, a
throwaway PgBouncer in transaction pooling in front of it), migrates a fresh database and starts
``--processes`` worker processes on it: ``ratchet worker bench_nodes:app`` (the default command an
operator runs), or, with ``--workers-per-process K`` above 1, K workers sharing one app (one
pool, one coordinator) per process. Then:

* **idle**: after ``--settle`` seconds it measures for ``--window`` seconds: the connections the
  nodes hold (``pg_stat_activity``, by application name), the database's transactions per second
  (``pg_stat_database``), the CPU of the whole server (the postmaster with its live and exited
  children) and of the worker processes, and how long the first job submitted takes to start.
* **busy**: it submits ``--busy-jobs`` no-op jobs (or, with ``--job-ms``, jobs that wait that
  long without using the CPU; ``--concurrency`` sets each node's slots) at once and measures
  until they are done: jobs/s, statements and rows per job (``pg_stat_statements``, and with ``--track-planning`` the
  server's planning and executing time per job), transactions and database CPU per job,
  and the claims that came back empty while jobs still waited (every worker process records
  each claim's time and size; an empty claim before the last non-empty one found nothing while
  PENDING jobs remained: skip-locked contention).

The machine's load average is printed with the figures: on a shared machine (the project's
development machine has two cores shared by several agents) keep ``--processes`` small.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
URL_ENV = "RATCHET_BENCH_URL"
COORDINATOR_ENV = "RATCHET_BENCH_COORDINATOR"
CLAIMS_ENV = "RATCHET_BENCH_CLAIMS_DIR"
MARGIN_ENV = "RATCHET_BENCH_CLAIM_MARGIN"
CONCURRENCY_ENV = "RATCHET_BENCH_CONCURRENCY"

_app: Any = None
_start_conn: Any = None
_claims: list[tuple[float, int]] = []


# ---------------------------------------------------------------------- the job module side
def noop(i: int = 0) -> None:
    """The busy phase's job: does nothing."""


def waits(i: int, ms: float) -> None:
    """The busy phase's job with ``--job-ms``: waits that long without the CPU, as a job that
    calls another service does."""
    time.sleep(ms / 1000)


def mark_start(token: str) -> None:
    """Records when it started (submit -> start latency), on a direct connection."""
    global _start_conn
    import psycopg

    started = time.time()
    if _start_conn is None:
        _start_conn = psycopg.connect(_libpq(os.environ[URL_ENV]), autocommit=True)
    _start_conn.execute("INSERT INTO bench_start (token, at) VALUES (%s, %s)", (token, started))


def _record_claims(store: Any) -> None:
    """Wrap ``store.acquire_work`` to note each claim's time (when it was sent) and size; dump
    them at exit."""
    from ratchet.domain.watcher import NodeState

    directory = os.environ.get(CLAIMS_ENV)
    if not directory:
        return
    acquire = store.acquire_work
    lock = threading.Lock()

    def counted(*args: Any, **kwargs: Any) -> Any:
        # When the claim was sent: on two cores shared by dozens of processes the return is
        # seen late, and a claim that took the last jobs would seem to end after one that
        # came back empty because of it.
        sent = time.time()
        work = acquire(*args, **kwargs)
        # Only a poll that reached the claim: not one of a node without a free slot (no
        # statement) or not alive yet.
        if work.state is NodeState.ALIVE:
            with lock:
                _claims.append((sent, len(work.jobs)))
        return work

    store.acquire_work = counted

    def dump() -> None:
        path = Path(directory) / f"claims-{os.getpid()}.json"
        path.write_text(json.dumps(_claims))

    atexit.register(dump)


def __getattr__(name: str) -> Any:
    global _app
    if name != "app":
        raise AttributeError(name)
    if _app is None:
        from ratchet import Ratchet

        _app = Ratchet(
            os.environ[URL_ENV],
            allowed_modules=["bench_nodes"],
            coordinator=os.environ.get(COORDINATOR_ENV, "local"),
        )
        _record_claims(_app.store)
        margin = os.environ.get(MARGIN_ENV)
        if margin is not None:
            _app.store.hot_paths.claim.contention_margin = int(margin)
    return _app


def serve(workers: int) -> None:
    """K workers in this process on one app (one pool, one coordinator) until SIGTERM."""
    import signal

    from ratchet.config import WorkerConfig

    sys.path.insert(0, str(HERE))
    import bench_nodes

    app = bench_nodes.app
    slots = os.environ.get(CONCURRENCY_ENV)
    config = WorkerConfig() if slots is None else WorkerConfig(concurrency=int(slots))
    nodes = [app.worker(config) for _ in range(workers)]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    for node in nodes:
        node.start()
    while not stop.wait(0.5):
        pass
    for node in nodes:
        node.stop()
    app.close()


# ---------------------------------------------------------------------- helpers
def _libpq(url: str) -> str:
    from sqlalchemy.engine import make_url

    parsed = make_url(url).difference_update_query(["pgbouncer"]).set(drivername="postgresql")
    return parsed.render_as_string(hide_password=False)


def _ticks(pid: int, children: bool = False) -> float:
    """CPU seconds of ``pid`` (with ``children``: plus its exited, reaped children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    used = int(fields[11]) + int(fields[12])
    if children:
        used += int(fields[13]) + int(fields[14])
    return used / os.sysconf("SC_CLK_TCK")


def server_cpu(postmaster: int) -> float:
    """CPU seconds of the whole PostgreSQL server so far: the postmaster, its live children
    and (through the postmaster's counters) those that exited."""
    total = _ticks(postmaster, children=True)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[1]) == postmaster:
                total += _ticks(int(entry.name))
    return total


def workers_cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with suppress(OSError):
            total += _ticks(pid)
    return total


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


class Cluster:
    """A throwaway server (and PgBouncer), a migrated database, and worker processes on it."""

    def __init__(self, args: argparse.Namespace, directory: Path) -> None:
        import psycopg

        from ratchet.testing.servers import PgBouncerServer, PostgresServer

        self.args = args
        self.directory = directory
        settings = {"shared_preload_libraries": "pg_stat_statements", "max_connections": "400"}
        if args.track_planning:
            settings["pg_stat_statements.track_planning"] = "on"
        self.server = PostgresServer(settings=settings).start()
        self.bouncer = None
        name = f"bench_{uuid.uuid4().hex[:10]}"
        self.server.psql(f"CREATE DATABASE {name}", database="postgres")
        from sqlalchemy.engine import make_url

        self.direct_url = make_url(self.server.url()).set(database=name).render_as_string(False)
        self.url = self.direct_url
        if args.pgbouncer:
            self.bouncer = PgBouncerServer(
                upstream_host=self.server.host,
                upstream_port=self.server.port,
                user=self.server.user,
                password=self.server.password,
                settings={"default_pool_size": str(args.pgbouncer_pool)},
            ).start()
            self.url = self.bouncer.url_for(name) + "?pgbouncer=transaction"
        self.bouncer_database = name
        self.db = psycopg.connect(_libpq(self.direct_url), autocommit=True)
        self.db.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.db.execute("CREATE TABLE bench_start (token text PRIMARY KEY, at double precision)")
        from ratchet_postgres import PostgresStore

        store = PostgresStore(self.url)
        store.migrate()
        store.close()
        self.redis = None
        if args.coordinator == "redis":
            from ratchet.testing.servers import RedisServer

            self.redis = RedisServer().start()
        self.coordinator = {
            "local": "local",
            "postgres": self.direct_url if args.pgbouncer else "postgres",
            "redis": self.redis.url() if self.redis is not None else "",
        }[args.coordinator]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.claims_dir = directory / "claims"
        self.claims_dir.mkdir()

    @property
    def postmaster(self) -> int:
        pid = self.server.pid
        assert pid is not None
        return pid

    def start_workers(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
        env[URL_ENV] = self.url
        if self.args.serialize_claims is not None:
            separator = "&" if "?" in self.url else "?"
            env[URL_ENV] += f"{separator}serialize_claims={self.args.serialize_claims}"
        env[COORDINATOR_ENV] = self.coordinator
        env[CLAIMS_ENV] = str(self.claims_dir)
        if self.args.claim_margin is not None:
            env[MARGIN_ENV] = str(self.args.claim_margin)
        slots: list[str] = []
        if self.args.concurrency is not None:
            env[CONCURRENCY_ENV] = str(self.args.concurrency)
            slots = ["--concurrency", str(self.args.concurrency)]
        ratchet = Path(sys.executable).with_name("ratchet")
        k = self.args.workers_per_process
        for i in range(self.args.processes):
            if k == 1:
                cmd = [str(ratchet), "worker", "bench_nodes:app", "--log-level", "WARNING", *slots]
            else:
                cmd = [sys.executable, str(Path(__file__)), "serve", "--workers", str(k)]
            log = (self.directory / f"worker-{i}.log").open("wb")
            self.procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))

    def scalar(self, query: str, *params: Any) -> Any:
        row = self.db.execute(query, params or None).fetchone()
        return None if row is None else row[0]

    def wait_for_nodes(self, timeout: float = 180.0) -> None:
        nodes = self.args.processes * self.args.workers_per_process
        deadline = time.monotonic() + timeout
        while self.scalar("SELECT count(*) FROM scheduler_node WHERE state = 'ALIVE'") < nodes:
            for i, p in enumerate(self.procs):
                if p.poll() is not None:
                    log = (self.directory / f"worker-{i}.log").read_text()[-3000:]
                    raise RuntimeError(f"worker {i} exited with {p.returncode}:\n{log}")
            if time.monotonic() > deadline:
                raise RuntimeError("the nodes did not all register in time")
            time.sleep(0.5)

    def connections(self) -> dict[str, int]:
        rows = self.db.execute(
            "SELECT coalesce(application_name, ''), count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1"
        ).fetchall()
        return {name or "(none)": n for name, n in rows}

    def bouncer_counts(self) -> dict[str, int]:
        """PgBouncer's client connections to the database and its server connections."""
        import psycopg

        assert self.bouncer is not None
        name = self.bouncer_database
        admin = psycopg.connect(_libpq(self.bouncer.url_for("pgbouncer")), autocommit=True)
        try:
            counts = {}
            for what in ("clients", "servers"):
                cur = admin.execute(f"SHOW {what.upper()}")
                columns = [c.name for c in cur.description or ()]
                rows = [dict(zip(columns, r, strict=False)) for r in cur.fetchall()]
                counts[what] = sum(1 for r in rows if r.get("database") == name)
            return counts
        finally:
            admin.close()

    def transactions(self) -> int:
        return int(
            self.scalar(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database"
                " WHERE datname = current_database()"
            )
        )

    def statements(self) -> tuple[int, int, float, float]:
        """(calls, rows, milliseconds planning, milliseconds executing) of this database's
        statements so far, Ratchet's own only (planning reads 0 unless ``--track-planning``)."""
        row = self.db.execute(
            "SELECT coalesce(sum(calls), 0), coalesce(sum(rows), 0),"
            " coalesce(sum(total_plan_time), 0), coalesce(sum(total_exec_time), 0)"
            " FROM pg_stat_statements s"
            " JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database()"
            " AND s.query NOT ILIKE '%pg_stat%' AND s.query NOT ILIKE '%bench\\_%'"
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1]), float(row[2]), float(row[3])

    def top_statements(self, per: float, limit: int = 8) -> list[tuple[float, str]]:
        """The most frequent statements: (calls divided by ``per``, the first words)."""
        rows = self.db.execute(
            "SELECT s.calls, s.query FROM pg_stat_statements s JOIN pg_database d"
            " ON d.oid = s.dbid WHERE d.datname = current_database()"
            " AND s.query NOT ILIKE '%%pg_stat%%' AND s.query NOT ILIKE '%%bench\\_%%'"
            " ORDER BY s.calls DESC LIMIT %s",
            (limit,),
        ).fetchall()
        return [(round(calls / per, 3), " ".join(q.split())[:90]) for calls, q in rows]

    def first_job_latency(self) -> float:
        """Seconds from submit to start of one job (a client app on the nodes' coordinator)."""
        from ratchet import Ratchet

        sys.path.insert(0, str(HERE))
        import bench_nodes

        token = uuid.uuid4().hex
        app = Ratchet(self.url, allowed_modules=["bench_nodes"], coordinator=self.coordinator)
        try:
            submitted = time.time()
            app.enqueue(bench_nodes.mark_start, token).submit()
            deadline = time.monotonic() + 120
            while (at := self.scalar("SELECT at FROM bench_start WHERE token = %s", token)) is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("the first job did not start within 120 s")
                time.sleep(0.005)
            return float(at) - submitted
        finally:
            app.close()

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=90)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.db.close()
        if self.bouncer is not None:
            self.bouncer.cleanup()
        if self.redis is not None:
            self.redis.cleanup()
        self.server.cleanup()


def measure_idle(cluster: Cluster) -> dict[str, Any]:
    args = cluster.args
    time.sleep(args.settle)
    cluster.db.execute("SELECT pg_stat_statements_reset()")
    tx0, db0, w0 = _cpu_and_transactions(cluster)
    t0 = time.monotonic()
    samples = []
    bouncer: dict[str, int] = {}
    while time.monotonic() - t0 < args.window:
        samples.append(cluster.connections())
        if cluster.bouncer is not None:
            bouncer = cluster.bouncer_counts()
        time.sleep(min(5.0, args.window / 4))
    elapsed = time.monotonic() - t0
    tx1, db1, w1 = _cpu_and_transactions(cluster)
    own = len(samples) + 4  # this script's own transactions in the window
    nodes = args.processes * args.workers_per_process
    store_conns = [s.get("ratchet", 0) for s in samples]
    listeners = [s.get("ratchet-listener", 0) for s in samples]
    top = cluster.top_statements(elapsed)
    latencies = [cluster.first_job_latency() for _ in range(args.latency_samples)]
    return {
        "nodes": nodes,
        "connections_store_max": max(store_conns),
        "connections_store_last": store_conns[-1],
        "connections_listener": listeners[-1],
        "connections_per_node": (store_conns[-1] + listeners[-1]) / nodes,
        "connections_per_process": (store_conns[-1] + listeners[-1]) / args.processes,
        "by_application": samples[-1],
        "pgbouncer_connections": bouncer,
        "tx_per_s": (tx1 - tx0 - own) / elapsed,
        "db_cpu_percent_of_core": 100 * (db1 - db0) / elapsed,
        "workers_cpu_percent_of_core": 100 * (w1 - w0) / elapsed,
        "top_statements_per_s": top,
        "first_job_start_s": latencies,
        "first_job_start_median_s": statistics.median(latencies),
    }


def measure_busy(cluster: Cluster) -> dict[str, Any]:
    from ratchet import Ratchet

    sys.path.insert(0, str(HERE))
    import bench_nodes

    args = cluster.args
    n = args.busy_jobs
    app = Ratchet(cluster.url, allowed_modules=["bench_nodes"], coordinator=cluster.coordinator)
    if args.job_ms > 0:
        builders = [app.enqueue(bench_nodes.waits, i, args.job_ms) for i in range(n)]
    else:
        builders = [app.enqueue(bench_nodes.noop, i) for i in range(n)]
    cluster.db.execute("SELECT pg_stat_statements_reset()")
    before = _cpu_and_transactions(cluster)
    started = time.time()
    app.submit_many(builders)
    committed = time.time()  # claims before this could not see the jobs yet
    _wait_until_drained(cluster)
    elapsed = time.time() - started
    figures = _work_per_job(cluster, n, before)
    app.close()
    return {
        "jobs": n,
        "seconds": elapsed,
        "jobs_per_s": n / elapsed,
        **figures,
        "window": (committed, started + elapsed),
    }


def _cpu_and_transactions(cluster: Cluster) -> tuple[int, float, float]:
    """The database's transactions so far, its CPU seconds and the workers' CPU seconds."""
    pids = [p.pid for p in cluster.procs]
    return cluster.transactions(), server_cpu(cluster.postmaster), workers_cpu(pids)


def _wait_until_drained(cluster: Cluster) -> None:
    """Return once the queue is empty (at most ``--busy-timeout`` seconds)."""
    timeout = cluster.args.busy_timeout
    deadline = time.monotonic() + timeout
    while True:
        left = cluster.scalar("SELECT count(*) AS bench_left FROM scheduler_job_queue")
        if left == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{left} jobs still queued after {timeout} s")
        time.sleep(0.05)


def start_latency(cluster: Cluster, since: float) -> dict[str, float]:
    """Percentiles of the time from submission to the first attempt's start, in ms, of the
    jobs submitted since ``since`` (both times as the database holds them)."""
    row = cluster.db.execute(
        "SELECT percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY e.started_at"
        " - j.created_at), max(e.started_at - j.created_at) FROM scheduler_job j"
        " JOIN scheduler_job_execution e ON e.job_id = j.job_id AND e.attempt_no = 1"
        " WHERE j.created_at >= %s",
        (int(since * 1e6),),
    ).fetchone()
    assert row is not None and row[1] is not None, "no job started"
    (p50, p95, p99), worst = row
    return {"p50": p50 / 1000, "p95": p95 / 1000, "p99": p99 / 1000, "max": worst / 1000}


def _work_per_job(cluster: Cluster, n: int, before: tuple[int, float, float]) -> dict[str, Any]:
    """What the database and the workers did per job of ``n`` since ``before``
    (:func:`_cpu_and_transactions`), and the statements since the last reset."""
    # Backends report their transaction counts to pg_stat_database at most once a second.
    time.sleep(1.5)
    tx1, db1, w1 = _cpu_and_transactions(cluster)
    tx0, db0, w0 = before
    calls, rows, planning_ms, executing_ms = cluster.statements()
    return {
        "statements_per_job": calls / n,
        "rows_per_job": rows / n,
        "tx_per_job": (tx1 - tx0) / n,
        "db_cpu_ms_per_job": 1000 * (db1 - db0) / n,
        "workers_cpu_ms_per_job": 1000 * (w1 - w0) / n,
        "planning_ms_per_job": planning_ms / n if cluster.args.track_planning else None,
        "executing_ms_per_job": executing_ms / n,
        "top_statements_per_job": cluster.top_statements(n, limit=cluster.args.top),
    }


def measure_trickle(cluster: Cluster) -> dict[str, Any]:
    """Jobs submitted one at a time at a steady rate (``--trickle-rate`` a second for
    ``--trickle-seconds``), as a web application submits them, to nodes that are mostly idle:
    the database's work per job when every submission is a wakeup."""
    from ratchet import Ratchet

    sys.path.insert(0, str(HERE))
    import bench_nodes

    args = cluster.args
    rate, seconds = args.trickle_rate, args.trickle_seconds
    n = int(rate * seconds)
    app = Ratchet(cluster.url, allowed_modules=["bench_nodes"], coordinator=cluster.coordinator)
    app.enqueue(bench_nodes.noop, -1).submit()  # connect outside the window
    time.sleep(1.0)
    cluster.db.execute("SELECT pg_stat_statements_reset()")
    before = _cpu_and_transactions(cluster)
    started = time.time()
    began = time.perf_counter()
    for i in range(n):
        due = began + i / rate
        pause = due - time.perf_counter()
        if pause > 0:
            time.sleep(pause)  # pacing the load, not waiting for a result
        app.enqueue(bench_nodes.noop, i).submit()
    submitted = time.perf_counter() - began
    _wait_until_drained(cluster)
    elapsed = time.time() - started
    figures = _work_per_job(cluster, n, before)
    app.close()
    return {
        "jobs": n,
        "rate_asked": rate,
        "rate_submitted": n / submitted,
        "seconds": elapsed,
        **figures,
        "start_latency_ms": start_latency(cluster, started),
        "window": (started, started + elapsed),
    }


def recorded_claims(cluster: Cluster) -> list[tuple[float, int]]:
    """Every claim the workers recorded (its time and how many jobs it took), read from the
    files they wrote when they stopped."""
    claims: list[tuple[float, int]] = []
    for path in cluster.claims_dir.glob("claims-*.json"):
        claims += [(t, k) for t, k in json.loads(path.read_text())]
    return claims


def claims_in(cluster: Cluster, window: tuple[float, float], jobs: int) -> dict[str, Any]:
    """Claims made in ``window``: how many per job, and how many came back empty."""
    inside = [k for t, k in recorded_claims(cluster) if window[0] <= t <= window[1]]
    return {
        "claims": len(inside),
        "claims_per_job": len(inside) / jobs,
        "empty_claims": sum(1 for k in inside if k == 0),
    }


def claim_contention(cluster: Cluster, window: tuple[float, float]) -> dict[str, Any]:
    """Claims in the busy window; empty ones before the last non-empty one found nothing while
    PENDING jobs remained (every job was submitted before the window's first claim)."""
    inside = [(t, k) for t, k in recorded_claims(cluster) if window[0] <= t <= window[1] + 1]
    if not inside:
        return {"claims": 0}
    last_full = max((t for t, k in inside if k > 0), default=window[0])
    empty_while_waiting = sorted(last_full - t for t, k in inside if k == 0 and t < last_full)
    taken = [k for _, k in inside if k > 0]
    return {
        "claims": len(inside),
        "empty_claims_while_jobs_waited": len(empty_while_waiting),
        # How long before the last claim that found jobs each was sent (a claim sent just
        # before it may have reached the server after it, on a machine whose cores are short).
        "empty_claims_ms_before_last": [round(gap * 1000, 1) for gap in empty_while_waiting],
        "non_empty_claims": len(taken),
        "mean_jobs_per_non_empty_claim": statistics.mean(taken) if taken else 0,
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        parser = argparse.ArgumentParser()
        parser.add_argument("--workers", type=int, default=1)
        serve(parser.parse_args(argv[1:]).workers)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--workers-per-process", type=int, default=1)
    parser.add_argument(
        "--concurrency", type=int, help="job slots of each node (default: the worker's, 64)"
    )
    parser.add_argument(
        "--coordinator",
        choices=("postgres", "local", "redis"),
        default="postgres",
        help="redis: a throwaway Redis server of its own (needs ratchet-redis-coordinator)",
    )
    parser.add_argument("--pgbouncer", action="store_true")
    parser.add_argument("--pgbouncer-pool", type=int, default=20)
    parser.add_argument("--settle", type=float, default=40.0, help="idle seconds before measuring")
    parser.add_argument("--window", type=float, default=60.0, help="idle measuring seconds")
    parser.add_argument("--latency-samples", type=int, default=3)
    parser.add_argument("--busy-jobs", type=int, default=1500)
    parser.add_argument("--busy-timeout", type=float, default=600.0)
    parser.add_argument(
        "--job-ms",
        type=float,
        default=0.0,
        help="busy: each job waits this long without using the CPU (0: no-op jobs)",
    )
    parser.add_argument(
        "--claim-margin",
        type=int,
        help="PostgreSQL claim: candidates read beyond twice the batch (default: the store's)",
    )
    parser.add_argument(
        "--serialize-claims",
        choices=("on", "off"),
        help="PostgreSQL claims take turns through the claim lock (default: the store's, on)",
    )
    parser.add_argument(
        "--top", type=int, default=12, help="busy: list this many statements by calls per job"
    )
    parser.add_argument(
        "--track-planning",
        action="store_true",
        help="busy: the server's planning time per job too (pg_stat_statements.track_planning,"
        " which costs the server some work of its own with many connections)",
    )
    parser.add_argument(
        "--trickle-rate",
        type=float,
        default=0.0,
        help="after the busy phase: submit this many jobs a second, one at a time (0: no"
        " trickle phase)",
    )
    parser.add_argument("--trickle-seconds", type=float, default=20.0)
    parser.add_argument("--no-idle", action="store_true")
    parser.add_argument("--no-busy", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bench-nodes-") as tmp:
        cluster = Cluster(args, Path(tmp))
        figures: dict[str, Any] = {
            "processes": args.processes,
            "workers_per_process": args.workers_per_process,
            "coordinator": args.coordinator,
            "pgbouncer": args.pgbouncer,
            "claim_margin": args.claim_margin,
            "serialize_claims": args.serialize_claims,
            "job_ms": args.job_ms,
            "concurrency": args.concurrency,
            "cpus": os.cpu_count(),
            "load_before": load_average(),
        }
        try:
            cluster.start_workers()
            cluster.wait_for_nodes()
            if not args.no_idle:
                figures["idle"] = measure_idle(cluster)
                figures["load_after_idle"] = load_average()
            if not args.no_busy:
                busy = measure_busy(cluster)
                figures["busy"] = busy
                figures["load_after_busy"] = load_average()
            if args.trickle_rate > 0:
                figures["trickle"] = measure_trickle(cluster)
                figures["load_after_trickle"] = load_average()
        finally:
            cluster.stop()
        if "busy" in figures:
            figures["busy"].update(claim_contention(cluster, figures["busy"].pop("window")))
        if "trickle" in figures:
            trickle = figures["trickle"]
            trickle.update(claims_in(cluster, trickle.pop("window"), trickle["jobs"]))
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
