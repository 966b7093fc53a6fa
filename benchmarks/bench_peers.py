"""Ratchet side by side with its peers: pgqueuer (PostgreSQL) and huey's SqliteHuey (SQLite).

One command, one machine, one throwaway PostgreSQL 15 (server defaults: ``fsync`` and
``synchronous_commit`` on), every measurement interleaved round by round so that a change in the
machine's load hits both sides of a ratio alike::

    uv run --group bench python benchmarks/bench_peers.py [--rounds 3] [--jobs 20000] [--quick]

(``--group bench`` installs pgqueuer, asyncpg and huey first: benchmark-only, never runtime
dependencies.)

What it measures (no-op jobs throughout; the median of ``--rounds`` rounds, min-max beside it):

- **processing** of ``--jobs`` prefilled jobs by one worker process, at each system's defaults
  and at its best settings: ``ratchet worker bench_peers:app`` (plus :data:`RATCHET_BEST` for the
  best: none, the defaults are Ratchet's best) against pgqueuer's worker on :func:`pgq_factory` as ``pgq run`` runs it (batch 200 for
  the best), timed from the first claim to the last completion by the database's own
  timestamps;
- on SQLite, a default ``app.worker()`` against huey's thread consumer (one worker, then
  ``--huey-workers``), in this process, start-up included: from starting the consumer until the
  last job has finished;
- **batch enqueue**, 1,000 jobs per call (building the jobs included; builders through
  ``submit_many``, and argument tuples through ``enqueue_many``), and **single enqueue**,
  one transaction per job;
- two references without a peer: the **bare psycopg loop** (claim 100 with ``SKIP LOCKED``,
  complete them in one statement: what the server can do) and the **PostgresStore alone**
  (claim 100 + record 100 outcomes, no worker);
- for every PostgreSQL row, the **database's CPU per job** while it ran (:class:`DatabaseMeter`:
  all of the server's processes), beside the peer's: how much of a difference is the server's
  work rather than the client's;
- for every row whose client runs in the benchmark's process (the enqueues, the store alone,
  the bare loop), the **client's CPU per job** beside the peer's;
- for every processing row, the **worker process's CPU per job** (:class:`WorkerMeter`), from
  its first claim to the drained queue, beside the peer's, and Ratchet's split by thread (its
  job threads, the poller, the writer and the rest, told apart by the names Ratchet's threads
  carry in the OS);
- and **what the database wrote per job** (:class:`WriteMeter`): WAL bytes, heap rows, index
  entries and row locks read from the WAL itself (``pg_walinspect``), and the statements run
  (``pg_stat_statements``, which the throwaway server loads; a ``--url`` server only if it
  does).

``--ratchet-only`` runs Ratchet's side alone (the peers need not be installed); ``--quick`` is a
bounded smoke run (the test suite runs it with ``--ratchet-only``). This file is also the job
module of every worker it starts.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
URL_ENV = "RATCHET_BENCH_URL"

#: The worker flags the performance guide recommends for short jobs on PostgreSQL: none. Since
#: workers claim ahead of their threads the defaults are the best measured (concurrency 8 to 64,
#: claims of 200 to 500: all within each other's spread), and the flags it recommended before,
#: ``--concurrency 192 --batch-size 500``, ran no-op jobs at 0.6x to 1.1x the defaults on
#: 4 December 2026 (at worst 192 threads contending for the interpreter: 76 against 37 µs of
#: worker CPU per job).
RATCHET_BEST: tuple[str, ...] = ()
#: pgqueuer's best setting measured for one process (its default batch is 10).
PGQ_BEST = ("--batch-size", "200")
#: Ratchet's best SQLite worker settings (the guide: 64 slots are enough on SQLite).
SQLITE_BEST = {"concurrency": 64, "batch_size": 200}

_app: Any = None


# ---------------------------------------------------------------------- the job module side
def noop(i: int) -> None:
    """The benchmarked job: does nothing."""


def __getattr__(name: str) -> Any:
    global _app
    if name != "app":
        raise AttributeError(name)
    if _app is None:
        from ratchet import Ratchet

        _app = Ratchet(os.environ[URL_ENV], allowed_modules=["bench_peers"])
    return _app


async def pgq_factory() -> Any:
    """pgqueuer's side: one ``noop`` entrypoint over an asyncpg connection (its usual driver)."""
    import asyncpg
    from pgqueuer import PgQueuer

    connection = await asyncpg.connect(_libpq(os.environ[URL_ENV]))
    pgq = PgQueuer.from_asyncpg_connection(connection)

    @pgq.entrypoint("noop")
    async def pgq_noop(job: Any) -> None:
        """Does nothing."""

    return pgq


def pgq_worker(batch_size: int) -> None:
    """Runs pgqueuer's worker on :func:`pgq_factory` until terminated (``pgq run``'s loop)."""

    async def main() -> None:
        pgq = await pgq_factory()
        await pgq.run(batch_size=batch_size)

    asyncio.run(main())


# ---------------------------------------------------------------------- helpers
def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def fn(name: str) -> Callable[..., Any]:
    """A job function imported as ``bench_peers.<name>`` (not ``__main__``)."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import bench_peers

    return getattr(bench_peers, name)  # type: ignore[no-any-return]


def scalar(url: str, query: str) -> Any:
    import psycopg

    with psycopg.connect(_libpq(url), autocommit=True) as conn:
        row = conn.execute(query).fetchone()
        return None if row is None else row[0]


def child_env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    env[URL_ENV] = url
    return env


def wait_for_empty(url: str, table: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Polls (five times a second) until ``table`` is empty; fails if ``proc`` died first."""
    deadline = time.monotonic() + timeout
    while scalar(url, f"SELECT count(*) FROM {table}") > 0:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{table} not drained within {timeout:.0f} s")
        time.sleep(0.2)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class DatabaseMeter:
    """The CPU time the PostgreSQL server spent between :meth:`start` and :meth:`stop`, per job:
    every process of the server this benchmark started (the backends, the WAL writer, the
    checkpointer, autovacuum), those that exited meanwhile included (reaped by the postmaster,
    so counted in its children's time). Off (None) for a server given by ``--url``."""

    def __init__(self) -> None:
        self.postmaster: int | None = None
        self._started: float | None = None
        self._last: float | None = None

    def watch(self, data_dir: Path) -> None:
        """Meter the server whose data directory is ``data_dir``."""
        self.postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])

    def _cpu(self) -> float:
        """Seconds of CPU: the live processes' own, the exited children's.

        A backend that exits is counted by the postmaster's children's time once reaped; one
        read while it is reaped could be missed, so the scan is read again until that time held
        still across it. (A process that exits between reads is counted by neither: stop the
        meter before the connections it measures are closed.)"""
        assert self.postmaster is not None
        for _ in range(5):
            before = self._reaped()
            total = before + self._live()
            if self._reaped() == before:
                break
        return total

    def _reaped(self) -> float:
        tick = os.sysconf("SC_CLK_TCK")
        fields = Path(f"/proc/{self.postmaster}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) / tick  # cutime, cstime

    def _live(self) -> float:
        total = 0.0
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                if int(proc.name) != self.postmaster and int(fields[1]) != self.postmaster:
                    continue
                total += int((proc / "schedstat").read_text().split()[0]) / 1e9
            except (OSError, ValueError):
                continue  # gone while read
        return total

    def start(self) -> None:
        self._started = self._cpu() if self.postmaster else None
        WAL.start()

    def stop(self, jobs: int) -> None:
        if self._started is not None:
            self._last = (self._cpu() - self._started) / jobs * 1e6
        self._started = None
        WAL.stop(jobs)

    def take(self) -> float | None:
        """The last measurement in µs per job (None: none), forgotten once read."""
        value, self._last = self._last, None
        return value


@dataclass(frozen=True)
class Writes:
    """What the server wrote per job: WAL bytes, heap rows (each insert, update or delete of
    a row version), B-tree index entries and row locks, read from the WAL itself; and the
    statements run, where the server counts them (``pg_stat_statements`` loaded)."""

    wal_bytes: float
    rows: float
    index_entries: float
    row_locks: float
    statements: float | None


#: WAL record types (``resource manager/record type``, without ``+INIT``) by what they write.
ROW_RECORDS = {"Heap/INSERT", "Heap/UPDATE", "Heap/HOT_UPDATE", "Heap/DELETE", "Heap2/MULTI_INSERT"}
INDEX_RECORDS = {"Btree/INSERT_LEAF", "Btree/INSERT_POST"}
LOCK_RECORDS = {"Heap/LOCK", "Heap2/LOCK_UPDATED"}


class WriteMeter:
    """What the server wrote between :meth:`start` and :meth:`stop` (:class:`Writes`), from
    the WAL of the whole server (``pg_walinspect``, so the server's background writes count
    too) and the statements of every database but the meter's own (``pg_stat_statements``).
    Off until :meth:`attach` is given a superuser's connection that can read them."""

    def __init__(self) -> None:
        self.conn: Any = None
        self.statements = False
        self._start: tuple[str, float] | None = None
        self._last: Writes | None = None

    def attach(self, conn: Any) -> None:
        """Meter through ``conn`` (autocommit), where ``pg_walinspect`` can be installed."""
        import psycopg

        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        except psycopg.Error:
            return  # not a superuser, or no contrib modules: writes are not reported
        self.conn = conn
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute("SELECT 1 FROM pg_stat_statements LIMIT 1")
            self.statements = True
        except psycopg.Error:
            self.statements = False  # not in shared_preload_libraries

    def _calls(self) -> float:
        if not self.statements:
            return 0.0
        return float(
            self.conn.execute(
                "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE dbid <>"
                " (SELECT oid FROM pg_database WHERE datname = current_database())"
            ).fetchone()[0]
        )

    def start(self) -> None:
        if self.conn is not None:
            lsn = self.conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
            self._start = (str(lsn), self._calls())

    def stop(self, jobs: int) -> None:
        if self._start is None:
            return
        start, calls = self._start
        self._start = None
        statements = (self._calls() - calls) / jobs if self.statements else None
        end = self.conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
        # pg_walinspect reads only flushed WAL: the WAL writer flushes within its delay.
        deadline = time.monotonic() + 10
        flushed = "SELECT pg_current_wal_flush_lsn() >= %s"
        while not self.conn.execute(flushed, (end,)).fetchone()[0]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server's WAL was not flushed up to {end}")
            time.sleep(0.01)
        counts: dict[str, int] = {}
        for kind, count in self.conn.execute(
            'SELECT "resource_manager/record_type", count FROM pg_get_wal_stats(%s, %s, true)',
            (start, end),
        ):
            kind = kind.removesuffix("+INIT")
            counts[kind] = counts.get(kind, 0) + count
        size = self.conn.execute("SELECT pg_wal_lsn_diff(%s, %s)", (end, start)).fetchone()[0]

        def per_job(kinds: set[str]) -> float:
            return sum(counts.get(k, 0) for k in kinds) / jobs

        self._last = Writes(
            float(size) / jobs,
            per_job(ROW_RECORDS),
            per_job(INDEX_RECORDS),
            per_job(LOCK_RECORDS),
            statements,
        )

    def take(self) -> Writes | None:
        """The last measurement (None: none), forgotten once read."""
        value, self._last = self._last, None
        return value


class WorkerMeter:
    """The CPU time of one worker process per job, from its first claim to the drained queue:
    its start-up (the interpreter, the imports, the connection) is left out, since it is paid
    once and would weigh more the fewer jobs a run has."""

    def __init__(self) -> None:
        self._pid: int | None = None
        self._started = 0.0
        self._last: float | None = None
        self._threads_started: dict[str, float] = {}
        self._threads_last: dict[str, float] | None = None

    @staticmethod
    def threads(pid: int) -> dict[str, float]:
        """Seconds of CPU of each live thread of process ``pid``, by thread id: the scheduler's
        own count (``schedstat``), which is exact where ``stat``'s per-thread ticks undercount."""
        found: dict[str, float] = {}
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                found[task.name] = int((task / "schedstat").read_text().split()[0]) / 1e9
            except (FileNotFoundError, ProcessLookupError):
                continue  # the thread ended meanwhile
        return found

    @staticmethod
    def thread_group(pid: int, tid: str) -> str:
        """The kind of thread ``tid`` is, by the name Ratchet gives it in the OS."""
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        except (FileNotFoundError, ProcessLookupError):
            return "other"
        if name.startswith("ratchet-job"):
            return "job threads"
        return {"ratchet-poller": "poller", "ratchet-writer": "writer"}.get(name, "other")

    @staticmethod
    def cpu(pid: int) -> float:
        """Seconds of CPU of process ``pid``, all of its threads (those that ended too)."""
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime

    def start_at_first_claim(
        self, proc: subprocess.Popen[bytes], url: str, claimed: str, timeout: float = 120.0
    ) -> None:
        """Wait until the query ``claimed`` (one boolean) says the worker ``proc`` claimed
        its first job, then take its CPU time so far as its start-up. Asked every 5 ms (an
        index look-up, not a scan, since the database's CPU is measured meanwhile): the claim
        that happens meanwhile is under 1 % of a run's CPU."""
        import psycopg

        deadline = time.monotonic() + timeout
        # Planned at every call (never prepared): the table's statistics predate its prefill.
        with psycopg.connect(_libpq(url), autocommit=True, prepare_threshold=None) as conn:
            while not conn.execute(claimed).fetchone()[0]:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no job claimed within {timeout:.0f} s")
                time.sleep(0.005)  # a poll interval, not a synchronisation
        self._pid, self._started = proc.pid, self.cpu(proc.pid)
        self._threads_started = self.threads(proc.pid)

    def stop(self, jobs: int) -> None:
        """The worker drained the queue: its CPU since its first claim, per job, in all and
        by kind of thread (job threads, poller, writer, other)."""
        pid = self._pid
        if pid is not None:
            self._last = (self.cpu(pid) - self._started) / jobs * 1e6
            by_group: dict[str, float] = {}
            for tid, seconds in self.threads(pid).items():
                group = self.thread_group(pid, tid)
                spent = seconds - self._threads_started.get(tid, 0.0)
                by_group[group] = by_group.get(group, 0.0) + spent / jobs * 1e6
            self._threads_last = by_group
        self._pid = None

    def take_threads(self) -> dict[str, float] | None:
        """The last measurement by kind of thread, in µs per job (None: none), forgotten once
        read."""
        value, self._threads_last = self._threads_last, None
        return value

    def take(self) -> float | None:
        """The last measurement in µs per job (None: none), forgotten once read."""
        value, self._last = self._last, None
        return value


class ClientMeter:
    """The CPU time of this process per job, for the rows whose client runs in it (the
    enqueues, the store alone, the bare loop): with the database's, the whole cost of a job."""

    def __init__(self) -> None:
        self._started: float | None = None
        self._last: float | None = None

    def start(self) -> None:
        self._started = time.process_time()

    def stop(self, jobs: int) -> None:
        if self._started is not None:
            self._last = (time.process_time() - self._started) / jobs * 1e6
        self._started = None

    def take(self) -> float | None:
        """The last measurement in µs per job (None: none), forgotten once read."""
        value, self._last = self._last, None
        return value


DB = DatabaseMeter()
WAL = WriteMeter()
WORKER = WorkerMeter()
CLIENT = ClientMeter()


class Server:
    """Fresh databases on one PostgreSQL server."""

    def __init__(self, server_url: str) -> None:
        import psycopg
        from sqlalchemy.engine import make_url

        self.server_url = server_url
        self._make_url = make_url
        admin = make_url(server_url).set(database="postgres").render_as_string(False)
        self.admin = psycopg.connect(_libpq(admin), autocommit=True)
        self.meter = psycopg.connect(_libpq(admin), autocommit=True)

    @contextmanager
    def database(self, migrate: bool = True) -> Iterator[str]:
        name = f"peers_{uuid.uuid4().hex[:10]}"
        self.admin.execute(f"CREATE DATABASE {name}")
        url = self._make_url(self.server_url).set(database=name).render_as_string(False)
        if migrate:
            from ratchet_postgres import PostgresStore

            store = PostgresStore(url)
            store.migrate()
            store.close()
        try:
            yield url
        finally:
            self.admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


# ---------------------------------------------------------------------- Ratchet, PostgreSQL
def prefill_ratchet(url: str, n: int) -> None:
    from ratchet import Ratchet

    app = Ratchet(url, allowed_modules=["bench_peers"])
    job = fn("noop")
    for chunk in range(0, n, 5000):
        app.submit_many([app.enqueue(job, i) for i in range(chunk, min(n, chunk + 5000))])
    app.close()


def ratchet_process(server: Server, n: int, flags: tuple[str, ...]) -> float:
    """Jobs/s of one ``ratchet worker`` process draining ``n`` prefilled jobs."""
    with server.database() as url:
        prefill_ratchet(url, n)
        ratchet = Path(sys.executable).with_name("ratchet")
        DB.start()
        proc = subprocess.Popen(
            [str(ratchet), "worker", "bench_peers:app", "--log-level", "warning", *flags],
            env=child_env(url),
            stdout=subprocess.DEVNULL,
        )
        try:
            WORKER.start_at_first_claim(
                proc,
                url,
                "SELECT EXISTS (SELECT 1 FROM scheduler_job_queue WHERE status = 'RUNNING')"
                " OR NOT EXISTS (SELECT 1 FROM scheduler_job_queue WHERE status = 'PENDING')",
            )
            wait_for_empty(url, "scheduler_job_queue", proc, timeout=600)
            WORKER.stop(n)
            DB.stop(n)
        finally:
            stop(proc)
        done = scalar(
            url, "SELECT count(*) FROM scheduler_job_end WHERE terminal_status = 'SUCCEEDED'"
        )
        assert done == n, f"{done} of {n} jobs succeeded"
        span_us = scalar(
            url,
            "SELECT (SELECT max(terminated_at) FROM scheduler_job_end)"
            " - (SELECT min(started_at) FROM scheduler_job_execution)",
        )
    return n / (span_us / 1e6)


def ratchet_batch_enqueue(server: Server, n: int, bulk: bool = False) -> float:
    """Jobs/s of ``submit_many`` by 1,000 (``bulk``: ``enqueue_many`` by 1,000), building the
    jobs (or the argument tuples) included."""
    from ratchet import Ratchet

    with server.database() as url:
        app = Ratchet(url, allowed_modules=["bench_peers"])
        job = fn("noop")
        app.submit_many([app.enqueue(job, -1)])  # connect and warm up outside the timing
        DB.start()
        CLIENT.start()
        started = time.perf_counter()
        for chunk in range(0, n, 1000):
            stop = min(n, chunk + 1000)
            if bulk:
                app.enqueue_many(job, [(i,) for i in range(chunk, stop)])
            else:
                app.submit_many([app.enqueue(job, i) for i in range(chunk, stop)])
        elapsed = time.perf_counter() - started
        CLIENT.stop(n)
        DB.stop(n)
        app.close()
    return n / elapsed


def ratchet_single_enqueue(server: Server, n: int) -> float:
    """Jobs/s of ``enqueue(...).submit()``, one transaction each."""
    from ratchet import Ratchet

    with server.database() as url:
        app = Ratchet(url, allowed_modules=["bench_peers"])
        job = fn("noop")
        for i in range(20):
            app.enqueue(job, -i).submit()
        DB.start()
        CLIENT.start()
        started = time.perf_counter()
        for i in range(n):
            app.enqueue(job, i).submit()
        elapsed = time.perf_counter() - started
        CLIENT.stop(n)
        DB.stop(n)
        app.close()
    return n / elapsed


def _store_loop(store: Any, batch: int) -> int:
    """Claim ``batch`` and record them SUCCEEDED until the queue is empty; the jobs done."""
    import bench_jobs

    boost = timedelta(minutes=15)
    done = 0
    while True:
        now = datetime.now(UTC)
        claimed = store.claim("loop", batch, now=now, boost_interval=boost)
        if not claimed:
            return done
        store.record_outcomes("loop", bench_jobs.succeeded(claimed, now), now=now)
        done += len(claimed)


def store_alone(server: Server, n: int) -> float:
    """Jobs/s of the PostgresStore alone: claim 100, record their outcomes, until empty."""
    from ratchet_postgres import PostgresStore

    with server.database() as url:
        prefill_ratchet(url, n)
        store = PostgresStore(url)
        try:
            DB.start()
            CLIENT.start()
            started = time.perf_counter()
            done = _store_loop(store, 100)
            elapsed = time.perf_counter() - started
            CLIENT.stop(n)
            DB.stop(n)  # before its backend exits: see DatabaseMeter
        finally:
            store.close()
    assert done == n, f"{done} of {n}"
    return n / elapsed


# ---------------------------------------------------------------------- bare psycopg loop
RAW_SCHEMA = """
CREATE TABLE raw_queue (id bigserial PRIMARY KEY, priority int NOT NULL DEFAULT 0,
    status text NOT NULL DEFAULT 'queued', payload bytea, created timestamptz DEFAULT now());
CREATE INDEX raw_queue_pick ON raw_queue (priority DESC, id) WHERE status = 'queued';
CREATE TABLE raw_done (id bigint PRIMARY KEY, status text NOT NULL, done timestamptz NOT NULL)
"""
RAW_CLAIM = """
UPDATE raw_queue SET status = 'picked' WHERE id IN (
    SELECT id FROM raw_queue WHERE status = 'queued' ORDER BY priority DESC, id
    LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING id, payload
"""
RAW_COMPLETE = """
WITH gone AS (DELETE FROM raw_queue WHERE id = ANY(%s) RETURNING id)
INSERT INTO raw_done (id, status, done) SELECT id, 'successful', now() FROM gone
"""


def bare_loop(server: Server, n: int) -> float:
    """Jobs/s of the database's limit: claim 100 with SKIP LOCKED, complete them in one statement."""
    import psycopg

    with server.database(migrate=False) as url, psycopg.connect(_libpq(url)) as conn:
        conn.execute(RAW_SCHEMA)
        conn.execute(
            "INSERT INTO raw_queue (payload) SELECT NULL FROM generate_series(1, %s)", (n,)
        )
        conn.commit()
        conn.autocommit = True
        done = 0
        DB.start()
        CLIENT.start()
        started = time.perf_counter()
        while True:
            ids = [row[0] for row in conn.execute(RAW_CLAIM, (100,)).fetchall()]
            if not ids:
                break
            conn.execute(RAW_COMPLETE, (ids,))
            done += len(ids)
        elapsed = time.perf_counter() - started
        CLIENT.stop(n)
        DB.stop(n)
    assert done == n
    return n / elapsed


# ---------------------------------------------------------------------- pgqueuer
def _pgq_run(url: str, coroutine: Callable[[Any], Any]) -> Any:
    async def main() -> Any:
        import asyncpg
        from pgqueuer import Queries

        connection = await asyncpg.connect(_libpq(url))
        try:
            return await coroutine(Queries.from_asyncpg_connection(connection))
        finally:
            await connection.close()

    return asyncio.run(main())


@contextmanager
def pgq_database(server: Server) -> Iterator[str]:
    with server.database(migrate=False) as url:

        async def install(queries: Any) -> None:
            await queries.install()

        _pgq_run(url, install)
        yield url


async def _pgq_batches(queries: Any, start: int, n: int) -> None:
    for chunk in range(start, start + n, 1000):
        size = min(1000, start + n - chunk)
        await queries.enqueue(
            ["noop"] * size, [str(i).encode() for i in range(chunk, chunk + size)], [0] * size
        )


def pgq_process(server: Server, n: int, flags: tuple[str, ...]) -> float:
    """Jobs/s of one ``pgq run`` process draining ``n`` prefilled jobs."""
    with pgq_database(server) as url:
        _pgq_run(url, lambda q: _pgq_batches(q, 0, n))
        # What `pgq run bench_peers:pgq_factory [--batch-size N]` does; its CLI fails on its own
        # --log-level default with the installed typer, so the worker is started the same way here.
        DB.start()
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "bench_peers.py"), "--pgq-worker", *flags],
            env=child_env(url),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            WORKER.start_at_first_claim(
                proc,
                url,
                "SELECT EXISTS (SELECT 1 FROM pgqueuer WHERE status = 'picked')"
                " OR NOT EXISTS (SELECT 1 FROM pgqueuer WHERE status = 'queued')",
            )
            wait_for_empty(url, "pgqueuer", proc, timeout=600)
            WORKER.stop(n)
            DB.stop(n)
        finally:
            stop(proc)
        span = scalar(
            url,
            "SELECT extract(epoch FROM max(created) FILTER (WHERE status = 'successful')"
            " - min(created) FILTER (WHERE status = 'picked')) FROM pgqueuer_log",
        )
        done = scalar(url, "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'")
        assert done == n, f"{done} of {n} pgqueuer jobs logged successful"
    return n / float(span)


def pgq_batch_enqueue(server: Server, n: int) -> float:
    with pgq_database(server) as url:

        async def run(queries: Any) -> float:
            await _pgq_batches(queries, -1000, 1000)  # warm up outside the timing
            DB.start()
            CLIENT.start()
            started = time.perf_counter()
            await _pgq_batches(queries, 0, n)
            elapsed = time.perf_counter() - started
            CLIENT.stop(n)
            DB.stop(n)
            return elapsed

        elapsed = _pgq_run(url, run)
    return n / float(elapsed)


def pgq_single_enqueue(server: Server, n: int) -> float:
    with pgq_database(server) as url:

        async def run(queries: Any) -> float:
            for i in range(20):
                await queries.enqueue("noop", str(-i).encode())
            DB.start()
            CLIENT.start()
            started = time.perf_counter()
            for i in range(n):
                await queries.enqueue("noop", str(i).encode())
            elapsed = time.perf_counter() - started
            CLIENT.stop(n)
            DB.stop(n)
            return elapsed

        elapsed = _pgq_run(url, run)
    return n / float(elapsed)


# ---------------------------------------------------------------------- SQLite: Ratchet and huey
def ratchet_sqlite_process(n: int, settings: dict[str, Any]) -> float:
    """Jobs/s of an in-process worker (``settings`` over the defaults), start-up included."""
    from ratchet import Ratchet

    with tempfile.TemporaryDirectory(prefix="peers-") as workdir:
        app = Ratchet(f"sqlite:///{workdir}/jobs.db", allowed_modules=["bench_peers"])
        job = fn("noop")
        for chunk in range(0, n, 5000):
            app.submit_many([app.enqueue(job, i) for i in range(chunk, min(n, chunk + 5000))])
        started = time.perf_counter()
        worker = app.worker(**settings)
        worker.start()
        ok = worker.wait_until(lambda: worker.stats.succeeded >= n, timeout=600)
        elapsed = time.perf_counter() - started
        worker.stop()
        assert ok and app.store.count_by_status().get("SUCCEEDED") == n
        app.close()
    return n / elapsed


def ratchet_sqlite_single(n: int) -> float:
    from ratchet import Ratchet

    with tempfile.TemporaryDirectory(prefix="peers-") as workdir:
        app = Ratchet(f"sqlite:///{workdir}/jobs.db", allowed_modules=["bench_peers"])
        job = fn("noop")
        app.enqueue(job, -1).submit()
        started = time.perf_counter()
        for i in range(n):
            app.enqueue(job, i).submit()
        elapsed = time.perf_counter() - started
        app.close()
    return n / elapsed


def _huey(workdir: str) -> tuple[Any, Any]:
    from huey import SqliteHuey

    huey = SqliteHuey("peers", filename=f"{workdir}/huey.db")

    @huey.task()
    def huey_noop(i: int) -> None:
        """Does nothing."""

    return huey, huey_noop


def huey_process(n: int, workers: int) -> float:
    """Jobs/s of huey's thread consumer (``workers`` threads), start-up included."""
    import logging

    logging.getLogger("huey").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="peers-") as workdir:
        huey, task = _huey(workdir)
        for i in range(n):
            task(i)
        assert huey.pending_count() == n
        started = time.perf_counter()
        consumer = huey.create_consumer(workers=workers, worker_type="thread")
        consumer.start()
        deadline = time.monotonic() + 600
        while huey.pending_count() > 0:
            if time.monotonic() > deadline:
                raise TimeoutError("huey did not drain its queue")
            time.sleep(0.005)
        consumer.stop(graceful=True)  # joins the workers: the last jobs have finished
        elapsed = time.perf_counter() - started
        huey.storage.close()
    return n / elapsed


def huey_single(n: int) -> float:
    with tempfile.TemporaryDirectory(prefix="peers-") as workdir:
        huey, task = _huey(workdir)
        task(-1)
        started = time.perf_counter()
        for i in range(n):
            task(i)
        elapsed = time.perf_counter() - started
        huey.storage.close()
    return n / elapsed


# ---------------------------------------------------------------------- the run
@dataclass
class Row:
    """One line of the table: Ratchet's runs and, when there is one, the peer's."""

    label: str
    peer_name: str = ""
    ratchet: list[float] = field(default_factory=list)
    peer: list[float] = field(default_factory=list)
    ratchet_db: list[float] = field(default_factory=list)
    peer_db: list[float] = field(default_factory=list)
    ratchet_writes: list[Writes] = field(default_factory=list)
    peer_writes: list[Writes] = field(default_factory=list)
    ratchet_worker: list[float] = field(default_factory=list)
    peer_worker: list[float] = field(default_factory=list)
    ratchet_threads: list[dict[str, float]] = field(default_factory=list)
    ratchet_client: list[float] = field(default_factory=list)
    peer_client: list[float] = field(default_factory=list)


def fmt(values: list[float], digits: int = 0) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    spread = f" ({min(values):,.{digits}f}-{max(values):,.{digits}f})" if len(values) > 1 else ""
    return f"{med:,.{digits}f}{spread}"


def print_beside(
    rows: list[Row],
    title: str,
    align: str,
    mine: Callable[[Row], list[Any]],
    theirs: Callable[[Row], list[Any]],
    cell: Callable[[list[Any]], str],
) -> None:
    """A table of the rows that have ``mine`` figures: each row's ``cell`` of them, and of the
    peer's ``theirs`` beside it (``align``: the figure columns' Markdown alignment)."""
    measured = [row for row in rows if mine(row)]
    if not measured:
        return
    print(f"\n| {title} | Ratchet | peer | peer's |\n|---|{align}|---|{align}|")
    for row in measured:
        peer = row.peer_name if theirs(row) else ""
        print(f"| {row.label} | {cell(mine(row))} | {peer} | {cell(theirs(row))} |")


def fmt_writes(runs: list[Writes]) -> str:
    """The median of each figure of ``runs``, in one cell."""
    if not runs:
        return "-"

    def med(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    statements = med([w.statements for w in runs])
    return (
        f"{med([w.wal_bytes for w in runs]):,.0f} B WAL, {med([w.rows for w in runs]):.2f} rows,"
        f" {med([w.index_entries for w in runs]):.2f} index entries,"
        f" {med([w.row_locks for w in runs]):.2f} row locks, "
        + ("statements not counted" if statements is None else f"{statements:.3f} statements")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", help="an existing PostgreSQL server (needs CREATEDB)")
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="the data directory of the --url server, when it runs on this machine: its CPU per"
        " job is reported too (always for the server the benchmark starts)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs prefilled or enqueued")
    parser.add_argument("--single", type=int, default=2_000, help="jobs for single enqueue")
    parser.add_argument("--huey-workers", type=int, default=4, help="huey's best worker count")
    parser.add_argument("--quick", action="store_true", help="a bounded smoke run: small N")
    parser.add_argument("--ratchet-only", action="store_true", help="skip the peers")
    parser.add_argument(
        "--only", help="comma list of: pg,enqueue,refs,sqlite (default: all)", default=""
    )
    parser.add_argument("--pgq-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, default=10, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.pgq_worker:
        pgq_worker(args.batch_size)
        return 0
    if args.quick:
        args.jobs, args.single, args.rounds = min(args.jobs, 500), min(args.single, 50), 1
    only = set((args.only or "pg,enqueue,refs,sqlite").split(","))
    peers = not args.ratchet_only
    if peers:
        try:
            import asyncpg  # noqa: F401
            import huey  # noqa: F401
            import pgqueuer  # noqa: F401
        except ImportError as exc:
            parser.error(
                f"{exc.name} is missing: run with `uv run --group bench` (or `uv sync --group"
                " bench` first), or pass --ratchet-only"
            )

    from bench_postgres import durable_server

    # pg_stat_statements: the statements per job
    url, server = durable_server(args.url, shared_preload_libraries="pg_stat_statements")
    if server is not None:
        assert server.data_dir is not None
        DB.watch(server.data_dir)
    if args.data_dir is not None:
        DB.watch(args.data_dir)
    pg = Server(url)
    WAL.attach(pg.meter)
    n, single = args.jobs, args.single
    peer_versions = ""
    if peers:
        from importlib.metadata import version

        peer_versions = f"; pgqueuer {version('pgqueuer')}, huey {version('huey')}"
    print(
        f"PostgreSQL {scalar(url, 'SHOW server_version')}; Python {platform.python_version()};"
        f" {os.cpu_count()} CPUs{peer_versions}; {n:,} jobs, {single:,} single, {args.rounds}"
        f" rounds; load average at start {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    # (label, peer name, Ratchet's measurement, the peer's or None)
    plan: list[tuple[str, str, Callable[[], float], Callable[[], float] | None]] = []
    if "pg" in only:
        plan += [
            ("PG processing, defaults", "pgqueuer",
             lambda: ratchet_process(pg, n, ()), lambda: pgq_process(pg, n, ())),
            ("PG processing, best settings", "pgqueuer",
             lambda: ratchet_process(pg, n, RATCHET_BEST), lambda: pgq_process(pg, n, PGQ_BEST)),
        ]  # fmt: skip
    if "enqueue" in only:
        plan += [
            ("PG batch enqueue (1,000 per call)", "pgqueuer",
             lambda: ratchet_batch_enqueue(pg, n), lambda: pgq_batch_enqueue(pg, n)),
            ("PG batch enqueue, enqueue_many (1,000 per call)", "pgqueuer",
             lambda: ratchet_batch_enqueue(pg, n, bulk=True), lambda: pgq_batch_enqueue(pg, n)),
            ("PG single enqueue (1 per transaction)", "pgqueuer",
             lambda: ratchet_single_enqueue(pg, single), lambda: pgq_single_enqueue(pg, single)),
        ]  # fmt: skip
    if "sqlite" in only:
        plan += [
            ("SQLite processing, defaults", "huey",
             lambda: ratchet_sqlite_process(n, {}), lambda: huey_process(n, 1)),
            ("SQLite processing, best settings", "huey",
             lambda: ratchet_sqlite_process(n, SQLITE_BEST),
             lambda: huey_process(n, args.huey_workers)),
            ("SQLite single enqueue", "huey",
             lambda: ratchet_sqlite_single(single), lambda: huey_single(single)),
        ]  # fmt: skip
    if "refs" in only:
        plan += [
            (
                "reference: bare psycopg loop (claim 100 + complete)",
                "",
                lambda: bare_loop(pg, n),
                None,
            ),
            ("PG PostgresStore alone (claim 100 + record)", "", lambda: store_alone(pg, n), None),
        ]
    rows = [Row(label, peer_name) for label, peer_name, _, _ in plan]
    try:
        for round_no in range(args.rounds):
            for row, (_, _, mine, theirs) in zip(rows, plan, strict=True):
                sides: list[
                    tuple[list[float], list[float], list[Writes], list[float], Callable[[], float]]
                ]
                sides = [
                    (row.ratchet, row.ratchet_db, row.ratchet_writes, row.ratchet_worker, mine)
                ]
                if theirs is not None and peers:
                    sides.append((row.peer, row.peer_db, row.peer_writes, row.peer_worker, theirs))
                if round_no % 2:  # alternate who goes first
                    sides.reverse()
                for values, db_values, writes, worker_values, measure in sides:
                    values.append(measure())
                    worker_cpu = WORKER.take()
                    if worker_cpu is not None:
                        worker_values.append(worker_cpu)
                    threads = WORKER.take_threads()
                    if threads is not None and values is row.ratchet:
                        row.ratchet_threads.append(threads)
                    db_cpu = DB.take()
                    if db_cpu is not None:
                        db_values.append(db_cpu)
                    client_cpu = CLIENT.take()
                    if client_cpu is not None:
                        mine_ran = values is row.ratchet
                        (row.ratchet_client if mine_ran else row.peer_client).append(client_cpu)
                    wrote = WAL.take()
                    if wrote is not None:
                        writes.append(wrote)
                print(
                    f"  round {round_no + 1}: {row.label:<46} Ratchet {row.ratchet[-1]:>9,.0f}"
                    + (f"   {row.peer_name} {row.peer[-1]:>9,.0f}" if row.peer else ""),
                    flush=True,
                )
    finally:
        pg.admin.close()
        pg.meter.close()
        if server is not None:
            server.cleanup()
    print(f"load average at end {os.getloadavg()[0]:.1f}\n")
    bare = next((r for r in rows if r.label.startswith("reference: bare")), None)
    print("| measurement (jobs/s, median (min-max)) | Ratchet | peer | peer's | ratio |")
    print("|---|---:|---|---:|---:|")
    for row in rows:
        ratio, peer = "", row.peer_name if row.peer else ""
        if row.peer:
            ratio = f"{statistics.median(row.ratchet) / statistics.median(row.peer):.2f}x"
        elif bare is not None and row is not bare and row.ratchet:
            peer, ratio = "bare loop", f"{statistics.median(row.ratchet) / statistics.median(bare.ratchet):.2f}x"  # fmt: skip
        print(f"| {row.label} | {fmt(row.ratchet)} | {peer} | {fmt(row.peer)} | {ratio} |")
    cpu = functools.partial(fmt, digits=1)
    print_beside(rows, "the database's CPU per job (µs, median (min-max))", "---:",
                 lambda r: r.ratchet_db, lambda r: r.peer_db, cpu)  # fmt: skip
    print_beside(rows, "the worker process's CPU per job (µs, median (min-max))", "---:",
                 lambda r: r.ratchet_worker, lambda r: r.peer_worker, cpu)  # fmt: skip
    print_beside(rows, "the client's CPU per job, in this process (µs, median (min-max))",
                 "---:", lambda r: r.ratchet_client, lambda r: r.peer_client, cpu)  # fmt: skip
    print_beside(rows, "what the database wrote per job (median)", "---",
                 lambda r: r.ratchet_writes, lambda r: r.peer_writes, fmt_writes)  # fmt: skip
    print_threads(rows)
    return 0


#: The kinds of a Ratchet worker's threads, as :meth:`WorkerMeter.thread_group` names them.
THREAD_GROUPS = ("job threads", "poller", "writer", "other")


def print_threads(rows: list[Row]) -> None:
    """Ratchet's worker CPU per job by kind of thread, for the rows that ran a worker process."""
    measured = [row for row in rows if row.ratchet_threads]
    if not measured:
        return
    print("\n| Ratchet's worker process's CPU per job by thread (µs, median) | "
          + " | ".join(THREAD_GROUPS) + " |")  # fmt: skip
    print("|---|" + "---:|" * len(THREAD_GROUPS))
    for row in measured:
        cells = [
            fmt([runs.get(group, 0.0) for runs in row.ratchet_threads], digits=1)
            for group in THREAD_GROUPS
        ]
        print(f"| {row.label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
