"""MySQL / MariaDB throughput: bulk enqueue, no-op processing, claim cost, and a soak run.

Run on demand::

    uv run python benchmarks/bench_mysql.py [--runs 3] [--jobs 20000]
    uv run python benchmarks/bench_mysql.py --soak [--soak-jobs 100000]

Without ``--url`` (or ``RATCHET_BENCH_MYSQL_URL``) it starts a throwaway MariaDB from the
Debian package (as the test suite does). Every measurement gets a fresh migrated database.
The store runs on mysqlclient (``mysql+mysqldb://``, the C driver) when it is installed, else on
PyMySQL; ``--driver`` picks one, and the output says which. Prints medians of several runs, the
server version, the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import secrets
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
JOBS_DIR = ROOT / "tests" / "adapters" / "mysql"

import bench_jobs  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from ratchet import JobPriority, Ratchet  # noqa: E402
from ratchet_mysql import MySQLStore  # noqa: E402

BOOST = timedelta(minutes=15)


def default_driver() -> str:
    """mysqlclient when it imports (the faster driver), else PyMySQL."""
    try:
        import MySQLdb  # noqa: F401
    except ImportError:
        return "pymysql"
    return "mysqldb"


class Server:
    """Where the databases live: a given URL, or a throwaway MariaDB."""

    def __init__(self, url: str | None, driver: str = "pymysql") -> None:
        self.driver = driver
        self._managed: Any = None
        if url is None:
            from ratchet.testing.servers import MariaDBServer

            self._managed = MariaDBServer()
            self._managed.start()
            url = self._managed.url("pymysql")
        self.url = make_url(url).update_query_dict({"ssl_disabled": "true"})

    def admin(self, database: str | None = None) -> Any:
        import pymysql

        u = self.url
        return pymysql.connect(
            host=u.host,
            port=u.port or 3306,
            user=u.username,
            password=u.password or "",
            database=database,
            autocommit=True,
            ssl_disabled=True,
        )

    def sql(self, statement: str, database: str | None = None) -> list[tuple[Any, ...]]:
        conn = self.admin(database)
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
                return list(cur.fetchall())
        finally:
            conn.close()

    def fresh_database(self) -> str:
        """A new, migrated database; returns its URL."""
        name = f"bench_{secrets.token_hex(4)}"
        self.sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
        backend = self.url.get_backend_name()
        url = self.url.set(database=name, drivername=f"{backend}+{self.driver}").render_as_string(
            hide_password=False
        )
        store = MySQLStore(url)
        store.migrate()
        store.close()
        return url

    def cpu_seconds(self) -> float | None:
        """CPU time the throwaway server used so far (None for a server given by URL)."""
        pid = self._managed.pid if self._managed is not None else None
        if pid is None:
            return None
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def drop(self, url: str) -> None:
        self.sql(f"DROP DATABASE IF EXISTS `{make_url(url).database}`")

    def close(self) -> None:
        if self._managed is not None:
            self._managed.cleanup()


def app_for(url: str) -> Ratchet:
    return Ratchet(url, allowed_modules=["bench_jobs", "mysql_jobs"])


def bulk_enqueue(server: Server, n: int) -> float:
    url = server.fresh_database()
    app = app_for(url)
    builders = [app.enqueue(bench_jobs.noop, i) for i in range(n)]
    start, cpu = time.perf_counter(), time.process_time()
    for chunk in range(0, n, 5000):
        app.submit_many(builders[chunk : chunk + 5000])
    elapsed = time.perf_counter() - start
    BULK_CPU.append((time.process_time() - cpu) / n * 1e6)
    app.close()
    server.drop(url)
    return n / elapsed


BULK_CPU: list[float] = []
PROCESS_CPU: list[float] = []
PROCESS_SERVER_CPU: list[float] = []


def process(server: Server, n: int, concurrency: int, batch: int) -> float:
    """No-op jobs, one worker (in this process, as ``ratchet worker`` runs it)."""
    url = server.fresh_database()
    app = app_for(url)
    builders = [app.enqueue(bench_jobs.noop, i) for i in range(n)]
    for chunk in range(0, n, 5000):
        app.submit_many(builders[chunk : chunk + 5000])
    worker = app.worker(
        concurrency=concurrency,
        batch_size=batch,
        min_delay=timedelta(milliseconds=5),
        burst_delay=timedelta(milliseconds=1),
    )
    start, cpu, server_cpu = time.perf_counter(), time.process_time(), server.cpu_seconds()
    worker.start()
    ok = worker.wait_until(lambda: worker.stats.succeeded >= n, timeout=900)
    elapsed = time.perf_counter() - start
    PROCESS_CPU.append((time.process_time() - cpu) / n * 1e6)  # every thread of the worker
    if server_cpu is not None:
        PROCESS_SERVER_CPU.append((server.cpu_seconds() - server_cpu) / n * 1e6)  # type: ignore[operator]
    worker.stop()
    assert ok and app.store.count_by_status().get("SUCCEEDED") == n
    app.close()
    server.drop(url)
    return n / elapsed


def fill_queue(server: Server, url: str, n: int) -> None:
    """``n`` due PENDING jobs, written by the server itself (INSERT ... SELECT from a sequence)."""
    db = make_url(url).database
    now_us = int(datetime.now(UTC).timestamp() * 1_000_000) - 3_600_000_000
    seq = f"seq_1_to_{n}"  # MariaDB's SEQUENCE engine
    job_id = "UNHEX(CONCAT('0190', LPAD(HEX(seq), 28, '0')))"
    server.sql(
        "INSERT INTO scheduler_job (job_id, target, payload, priority, max_retries,"
        " backoff_policy, backoff_ms, idempotency_key, created_at)"
        f" SELECT {job_id}, 'bench_jobs:noop', '{{\"args\":[0],\"kwargs\":{{}}}}', seq % 5,"
        f" 0, 'NONE', 0, CONCAT('k', seq), {now_us} FROM {seq}",
        db,
    )
    server.sql(
        "INSERT INTO scheduler_job_queue (job_id, status, priority, scheduled_time, attempts,"
        f" epoch) SELECT {job_id}, 'PENDING', seq % 5, {now_us} + seq, 0, 0 FROM {seq}",
        db,
    )
    server.sql("ANALYZE TABLE scheduler_job, scheduler_job_queue", db)


def _handler_reads(conn: Any) -> int:
    rows = conn.exec_driver_sql("SHOW SESSION STATUS LIKE 'Handler_read%%'").all()
    return sum(int(value) for _, value in rows)


def claim_cost(server: Server, waiting: int, batch: int, repeats: int) -> tuple[float, float]:
    """Median ms of one claim of ``batch`` and the InnoDB rows it read (rolled back each time).

    Rows read (the session's ``Handler_read_*`` counters) do not depend on the machine's load,
    so they show whether the claim stays O(batch) however many jobs wait.
    """
    url = server.fresh_database()
    fill_queue(server, url, waiting)
    store = MySQLStore(url)
    now = datetime.now(UTC)
    times, reads = [], []
    with store.engine.connect() as conn:
        for _ in range(repeats):
            conn.begin()
            before = _handler_reads(conn)
            start = time.perf_counter()
            claimed = store._claim(conn, "bench", batch, now, BOOST)
            times.append((time.perf_counter() - start) * 1000)
            reads.append(_handler_reads(conn) - before - 1)  # the SHOW itself counts once
            conn.rollback()
            assert len(claimed) == min(batch, waiting)
    store.close()
    server.drop(url)
    return statistics.median(times), statistics.median(reads)


def store_loop(server: Server, n: int, batch: int) -> tuple[float, float]:
    """The store alone: claim ``batch`` and record their success, until ``n`` are done.

    Returns (jobs/s, client CPU microseconds per job).
    """
    url = server.fresh_database()
    app = app_for(url)
    builders = [app.enqueue(bench_jobs.noop, i) for i in range(n)]
    for chunk in range(0, n, 5000):
        app.submit_many(builders[chunk : chunk + 5000])
    app.close()
    store = MySQLStore(url)
    done = 0
    wall, cpu, server_cpu = time.perf_counter(), time.process_time(), server.cpu_seconds()
    while done < n:
        now = datetime.now(UTC)
        claimed = store.claim("bench", batch, now=now, boost_interval=BOOST)
        store.record_outcomes("bench", bench_jobs.succeeded(claimed, now, result=None), now=now)
        done += len(claimed)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if server_cpu is not None:
        STORE_SERVER_CPU.append((server.cpu_seconds() - server_cpu) / n * 1e6)  # type: ignore[operator]
    store.close()
    server.drop(url)
    return n / wall, cpu / n * 1e6


STORE_SERVER_CPU: list[float] = []


# ---------------------------------------------------------------------- soak
def soak(server: Server, jobs: int, workers: int) -> None:
    """Mixed jobs with ``workers`` ``ratchet worker`` processes: none lost, none run twice."""
    sys.path.insert(0, str(JOBS_DIR))
    import mysql_jobs

    url = server.fresh_database()
    db = make_url(url).database
    server.sql(mysql_jobs.SIDE_EFFECT_DDL, db)
    deadlocks_before = int(server.sql("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")[0][1])
    stats_dir = Path(f"/tmp/ratchet-soak-{secrets.token_hex(3)}")
    stats_dir.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(JOBS_DIR), str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")])
        ),
        "RATCHET_TEST_DB_URL": url,
        "RATCHET_TEST_STATS_DIR": str(stats_dir),
        "RATCHET_TEST_CIRCUIT_BREAKERS": "0",
    }
    script = Path(sys.executable).parent / "ratchet"
    command = [str(script) if script.exists() else sys.executable, "worker", "mysql_jobs:app"]
    command += ["--concurrency", "32", "--batch-size", "50", "--min-delay", "0.01"]
    command += ["--burst-delay", "0.005", "--max-delay", "0.2", "--log-level", "warning"]
    logs = [stats_dir / f"worker-{i}.log" for i in range(workers)]
    procs = []
    for log in logs:
        with log.open("wb") as out:
            procs.append(subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT))
    app = app_for(url)
    rng = random.Random(7)
    expected_runs: dict[int, int] = {}
    rejected_keys = 0
    start = time.perf_counter()
    from ratchet import DuplicateBusinessKeyError

    for first in range(0, jobs, 1000):
        builders = []
        for n in range(first, min(first + 1000, jobs)):
            failures = 1 if rng.random() < 0.05 else 0
            if failures:
                b = app.enqueue(mysql_jobs.flaky, n, failures).with_max_retries(3)
            elif rng.random() < 0.2:  # due up to 10 s from now
                b = app.schedule(timedelta(seconds=rng.uniform(0, 10)), mysql_jobs.touch, n)
            else:
                b = app.enqueue(mysql_jobs.touch, n)
            b = b.with_priority(rng.choice(list(JobPriority)))
            if n == first or rng.random() < 0.2:  # the first one: probed below
                b = b.with_business_key(f"bk-{n}")
            builders.append((n, failures, b))
        app.submit_many([b for _, _, b in builders])
        for n, f, _ in builders:
            expected_runs[n] = f + 1
        # a duplicate business key of a job that is probably still live: must be refused
        try:
            app.enqueue(mysql_jobs.touch, -1).with_business_key(f"bk-{first}").submit()
        except DuplicateBusinessKeyError:
            rejected_keys += 1
    enqueued = time.perf_counter() - start
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline:
        (done,) = server.sql("SELECT COUNT(*) FROM scheduler_job_end", db)[0]
        if done >= len(expected_runs) + (jobs // 1000 - rejected_keys):
            break
        if any(p.poll() is not None for p in procs):
            raise SystemExit("a worker died: see " + str(stats_dir))
        time.sleep(1)
    elapsed = time.perf_counter() - start
    for p in procs:
        p.send_signal(signal.SIGTERM)
    codes = [p.wait(120) for p in procs]
    app.close()
    runs = dict(server.sql("SELECT job_no, COUNT(*) FROM side_effect GROUP BY job_no", db))
    status = dict(
        server.sql("SELECT terminal_status, COUNT(*) FROM scheduler_job_end GROUP BY 1", db)
    )
    live = server.sql("SELECT COUNT(*) FROM scheduler_job_queue", db)[0][0]
    lost = [n for n in expected_runs if n not in runs]
    wrong = [n for n, want in expected_runs.items() if n in runs and runs[n] != want]
    retried = sum(int(p.read_text()) for p in stats_dir.glob("retried-*.txt"))
    deadlocks = (
        int(server.sql("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")[0][1]) - deadlocks_before
    )
    text = "\n".join(log.read_text() for log in logs)
    print(
        f"soak: {jobs} jobs, {workers} workers, enqueued in {enqueued:.1f} s, all ended in {elapsed:.1f} s"
    )
    print(f"  terminal statuses: {status}; live rows left: {live}; worker exit codes: {codes}")
    print(f"  lost: {len(lost)}; ran a wrong number of times: {len(wrong)}")
    print(f"  duplicate business keys refused at submit: {rejected_keys}")
    print(
        f"  deadlocks/lock timeouts retried by the store: {retried}; server Innodb_deadlocks: {deadlocks}"
    )
    print(
        f"  'Deadlock' in worker logs: {text.count('Deadlock')}; 'Traceback': {text.count('Traceback')}"
    )
    server.drop(url)
    if lost or wrong or live or any(codes):
        raise SystemExit("soak FAILED")


def driver_label(driver: str) -> str:
    from importlib.metadata import version

    if driver == "mysqldb":
        return f"mysqlclient {version('mysqlclient')} (mysql+mysqldb://, C)"
    return f"PyMySQL {version('PyMySQL')} (mysql+pymysql://, pure Python)"


def median_of(label: str, fn: Callable[[], float], runs: int, unit: str = "jobs/s") -> float:
    values = [fn() for _ in range(runs)]
    med = statistics.median(values)
    print(
        f"{label:<44} median {med:>10,.1f} {unit}   runs: {', '.join(f'{v:,.1f}' for v in values)}"
    )
    return med


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default=os.environ.get("RATCHET_BENCH_MYSQL_URL"))
    parser.add_argument(
        "--driver",
        choices=["mysqldb", "pymysql"],
        default=default_driver(),
        help="DBAPI driver of the store (default: mysqldb, i.e. mysqlclient, when installed)",
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--max-waiting", type=int, default=1_000_000)
    parser.add_argument("--only", help="comma list: bulk,process,storeloop,claim (default: all)")
    parser.add_argument("--soak", action="store_true", help="run the soak instead")
    parser.add_argument("--soak-jobs", type=int, default=100_000)
    parser.add_argument("--soak-workers", type=int, default=4)
    args = parser.parse_args()
    server = Server(args.url, args.driver)
    try:
        version = server.sql("SELECT VERSION()")[0][0]
        print(
            f"server: {version}; machine: {platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}"
        )
        print(f"driver: {driver_label(args.driver)}")
        if args.soak:
            soak(server, args.soak_jobs, args.soak_workers)
            return
        only = set((args.only or "bulk,process,storeloop,claim").split(","))
        if "bulk" in only:
            median_of("bulk enqueue", lambda: bulk_enqueue(server, args.jobs), args.runs)
            cpu = ", ".join(f"{c:.1f}" for c in BULK_CPU)
            print(f"{'  client CPU per bulk-enqueued job':<44} median "
                  f"{statistics.median(BULK_CPU):>10,.1f} us     runs: {cpu}")  # fmt: skip
        if "process" in only:
            median_of(
                f"no-op processing (1 proc, c={args.concurrency}, batch={args.batch_size})",
                lambda: process(server, args.jobs, args.concurrency, args.batch_size),
                args.runs,
            )
            cpu = ", ".join(f"{c:.1f}" for c in PROCESS_CPU)
            print(f"{'  worker process CPU per job':<44} median "
                  f"{statistics.median(PROCESS_CPU):>10,.1f} us     runs: {cpu}")  # fmt: skip
            if PROCESS_SERVER_CPU:
                cpu = ", ".join(f"{c:.1f}" for c in PROCESS_SERVER_CPU)
                print(f"{'  server CPU per job':<44} median "
                      f"{statistics.median(PROCESS_SERVER_CPU):>10,.1f} us     runs: {cpu}")  # fmt: skip
        if "storeloop" in only:
            loops = [store_loop(server, args.jobs, args.batch_size) for _ in range(args.runs)]
            print(
                f"{'store only: claim + record, batch ' + str(args.batch_size):<44} median "
                f"{statistics.median(r for r, _ in loops):>10,.1f} jobs/s   client CPU "
                f"{statistics.median(c for _, c in loops):,.0f} us/job"
            )
            if STORE_SERVER_CPU:
                print(f"{'  server CPU per job':<44} median "
                      f"{statistics.median(STORE_SERVER_CPU):>10,.1f} us")  # fmt: skip
        for waiting in (1_000, args.max_waiting) if "claim" in only else ():
            ms, reads = claim_cost(server, waiting, 100, 50)
            print(
                f"{f'claim of 100 with {waiting:,} waiting':<44} median {ms:>10,.1f} ms   "
                f"rows read {reads:,.0f}"
            )
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    finally:
        server.close()


if __name__ == "__main__":
    main()
