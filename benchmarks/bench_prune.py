"""Retention on PostgreSQL: prune 1,000,000 ended jobs while a worker processes jobs.

Run on demand::

    uv run python benchmarks/bench_prune.py [--runs 3] [--rows 1000000] [--url postgresql://...]

Without ``--url`` it starts a throwaway PostgreSQL (default durability: fsync and
synchronous_commit on) on loopback. Each run uses a fresh database holding ``--rows`` jobs that
ended 100 days ago (each with a tag, an idempotency key and an attempt row) and a backlog of
pending no-op jobs. A worker loop in a child process claims 50 jobs and records them SUCCEEDED,
over and over, timing every claim. First it runs ``--baseline`` seconds alone; then
``app.retention.run()`` removes the ended jobs in this process while the worker goes on
(``--pause`` and ``--busy-share`` set its pacing; the defaults are the settings' defaults). The
report compares the claim's p50 / p99 and the worker's throughput during the prune with the
baseline, then shows table and index sizes before, after the prune, after ``VACUUM (ANALYZE)``
and after ``VACUUM FULL``.

``--interleave SECONDS`` measures side by side instead: while the worker runs, phases of that
length take turns until the prune is done: ``idle`` (the worker alone), ``prune`` (retention
runs), ``burn`` (this process spins the CPU for the share of time the prune's Python process and
its PostgreSQL backend were busy, doing no SQL: what any background work of that duty cycle
costs) and, with ``--nice``, ``nice`` (the prune with its process and backend at nice 19). Each
phase reports the claim's p50 / p99, the worker's throughput, the prune's CPU seconds, the WAL
written and what the worker's backend was waiting on (sampled from ``pg_stat_activity``).
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import platform
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from typing import Any

TABLES = (
    "scheduler_job",
    "scheduler_job_execution",
    "scheduler_job_tag",
    "scheduler_idempotency_key",
    "scheduler_job_queue",
)


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@contextmanager
def database(server_url: str) -> Iterator[str]:
    """A fresh, migrated database on the server (dropped afterwards)."""
    from bench_postgres import Bench

    bench = Bench(server_url)
    try:
        with bench.database() as url:
            yield url
    finally:
        bench.admin.close()


def seed(url: str, ended: int, pending: int) -> None:
    """``ended`` SUCCEEDED jobs (100 days old) with their rows, and ``pending`` due jobs."""
    import psycopg

    now = datetime.now(UTC)
    ended_at = int((now - timedelta(days=100)).timestamp() * 1e6)
    due = int((now - timedelta(minutes=1)).timestamp() * 1e6)
    with psycopg.connect(_libpq(url), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO scheduler_job (job_id, target, payload, priority, max_retries,"
            " backoff_policy, backoff_ms, tags, idempotency_key, created_at)"
            " SELECT gen_random_uuid(), 'bench_jobs:noop', '{\"args\":[],\"kwargs\":{}}', 2, 0,"
            " 'NONE', 0, '[\"bench\"]', 'e' || g, %(t)s - 5000000"
            " FROM generate_series(1, %(n)s) g",
            {"n": ended, "t": ended_at},
        )
        conn.execute(
            "INSERT INTO scheduler_job_end (job_id, terminal_status, terminated_at, attempts)"
            " SELECT job_id, 'SUCCEEDED', created_at + 5000000"
            " + CAST(substr(idempotency_key, 2) AS BIGINT), 0 FROM scheduler_job"
        )
        conn.execute(
            "INSERT INTO scheduler_job_tag (job_id, tag) SELECT job_id, 'bench' FROM"
            " scheduler_job_end WHERE terminal_status = 'SUCCEEDED'"
        )
        conn.execute(
            "INSERT INTO scheduler_idempotency_key (idempotency_key, job_id, created_at)"
            " SELECT idempotency_key, job_id, created_at FROM scheduler_job"
        )
        conn.execute(
            "INSERT INTO scheduler_job_execution (job_id, attempt_no, epoch, node_id,"
            " started_at, finished_at, outcome) SELECT j.job_id, 1, 1, 'seed', j.created_at,"
            " e.terminated_at, 'SUCCEEDED' FROM scheduler_job j JOIN scheduler_job_end e"
            " ON e.job_id = j.job_id"
        )
        conn.execute(
            "INSERT INTO scheduler_job (job_id, target, payload, priority, max_retries,"
            " backoff_policy, backoff_ms, idempotency_key, created_at)"
            " SELECT gen_random_uuid(), 'bench_jobs:noop', '{\"args\":[],\"kwargs\":{}}', 2, 0,"
            " 'NONE', 0, 'p' || g, %(t)s FROM generate_series(1, %(n)s) g",
            {"n": pending, "t": due},
        )
        conn.execute(
            "INSERT INTO scheduler_job_queue (job_id, status, priority, scheduled_time,"
            " attempts, epoch) SELECT job_id, 'PENDING', 2, created_at + row_number() OVER (),"
            " 0, 0 FROM scheduler_job WHERE idempotency_key LIKE 'p%%'"
        )
        conn.execute("VACUUM ANALYZE")


def sizes(url: str) -> dict[str, tuple[int, int]]:
    """``table -> (heap bytes, index bytes)``."""
    import psycopg

    with psycopg.connect(_libpq(url), autocommit=True) as conn:
        return {
            t: conn.execute(
                "SELECT pg_table_size(%s::regclass), pg_indexes_size(%s::regclass)", (t, t)
            ).fetchone()  # type: ignore[misc]
            for t in TABLES
        }


Sizes = dict[str, tuple[int, int]]


def sizes_by_stage(url: str, before: Sizes) -> tuple[float, dict[str, Sizes]]:
    """After a prune: the seconds ``VACUUM (ANALYZE)`` took, and the sizes ``before``, now,
    after ``VACUUM (ANALYZE)`` and after ``VACUUM FULL`` (:func:`print_sizes` prints them)."""
    import psycopg

    stages = {"before": before, "after prune": sizes(url)}
    with psycopg.connect(_libpq(url), autocommit=True) as conn:
        started = time.monotonic()
        conn.execute("VACUUM (ANALYZE)")
        vacuum_s = time.monotonic() - started
        stages["after VACUUM"] = sizes(url)
        conn.execute("VACUUM FULL")
        stages["after VACUUM FULL"] = sizes(url)
    return vacuum_s, stages


def _backend_pid(dbapi_conn: Any) -> int:
    """The server process of a new driver connection (for ``connect`` listeners)."""
    with dbapi_conn.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return int(cur.fetchone()[0])


def _worker_child(
    url: str, stop: Any, ready: Any, out: Any, rate: float | None = None, cpus: Any = None
) -> None:
    """Submit 50 jobs, claim 50, record them SUCCEEDED, repeat until ``stop`` (the queue stays
    fed however long the prune takes); report each claim as ``(monotonic start, milliseconds,
    jobs)``. With ``rate``, rounds start at most ``rate / 50`` times a second (a steady stream
    that leaves the machine headroom) instead of back to back. With ``cpus``, this process and
    its database backends run on those CPUs only."""
    import bench_jobs

    from ratchet.domain.lifecycle import JobPriority
    from ratchet.domain.model import NewJob
    from ratchet.domain.options import BackoffPolicy
    from ratchet.ids import uuid7
    from ratchet_postgres import PostgresStore

    if cpus:
        _pin_connections(cpus)
    store = PostgresStore(url)
    boost = timedelta(minutes=15)
    claims: list[tuple[float, float, int]] = []
    period = 50 / rate if rate else 0.0
    next_round = time.monotonic()
    while not stop.is_set():
        if period:
            next_round += period
            stop.wait(max(0.0, next_round - time.monotonic()))
        now = datetime.now(UTC)
        fresh = [
            NewJob(
                job_id=uuid7(),
                target="bench_jobs:noop",
                payload='{"args":[],"kwargs":{}}',
                priority=JobPriority.NORMAL,
                max_retries=0,
                backoff=BackoffPolicy.NONE,
                backoff_delay=timedelta(0),
                timeout=None,
                scheduled_time=now,
                created_at=now,
                idempotency_key=uuid.uuid4().hex,
            )
            for _ in range(50)
        ]
        store.insert_jobs(fresh, now=now)
        started = time.monotonic()
        claimed = store.claim("bench-worker", 50, now=now, boost_interval=boost)
        claims.append((started, (time.monotonic() - started) * 1000, len(claimed)))
        ready.set()
        if not claimed:
            break
        store.record_outcomes("bench-worker", bench_jobs.succeeded(claimed, now), now=now)
    out.put(claims)
    store.close()


def _pin_connections(cpus: set[int]) -> None:
    """Run this process, and the backend of every connection it opens from now on, on ``cpus``."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    os.sched_setaffinity(0, cpus)

    def pin(dbapi_conn: Any, _record: Any) -> None:
        os.sched_setaffinity(_backend_pid(dbapi_conn), cpus)

    event.listen(Engine, "connect", pin)


def window(claims: list[tuple[float, float, int]], start: float, end: float) -> dict[str, float]:
    """Claim p50 / p99 (ms) and jobs per second of the claims started in ``[start, end)``."""
    inside = [c for c in claims if start <= c[0] < end and c[2]]
    latencies = sorted(c[1] for c in inside)
    if not latencies:
        return {"p50": float("nan"), "p99": float("nan"), "jobs_per_s": 0.0, "claims": 0}
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return {
        "p50": statistics.median(latencies),
        "p99": p99,
        "jobs_per_s": sum(c[2] for c in inside) / (end - start),
        "claims": len(inside),
    }


def one_run(
    server_url: str,
    rows: int,
    pending: int,
    baseline: float,
    pause: float,
    busy_share: float,
    batch_target: float = 250.0,
) -> dict[str, Any]:
    from ratchet import Ratchet, RetentionSettings

    with database(server_url) as url:
        started = time.monotonic()
        seed(url, rows, pending)
        seeded = time.monotonic() - started
        before = sizes(url)
        ctx = multiprocessing.get_context("spawn")
        stop, ready, out = ctx.Event(), ctx.Event(), ctx.Queue()
        child = ctx.Process(target=_worker_child, args=(url, stop, ready, out))
        child.start()
        ready.wait(300)  # the worker started (imports, connections): not measured
        time.sleep(2)
        t_base = time.monotonic()
        time.sleep(baseline)
        t_prune = time.monotonic()
        settings = RetentionSettings(
            pause_between_batches=timedelta(milliseconds=pause),
            busy_share=busy_share,
            batch_target=timedelta(milliseconds=batch_target),
        )
        app = Ratchet(url, allow_empty_class_policy=True, retention=settings)
        report = app.retention.run()
        t_end = time.monotonic()
        stop.set()
        claims = out.get(timeout=600)
        child.join(60)
        app.close()
        vacuum_s, stages = sizes_by_stage(url, before)
    return {
        "seed_s": seeded,
        "prune_s": t_end - t_prune,
        "removed": report.removed.get("SUCCEEDED", 0),
        "batches": report.batches,
        "base": window(claims, t_base, t_prune),
        "prune": window(claims, t_prune, t_end),
        "vacuum_s": vacuum_s,
        "sizes": stages,
    }


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _postgres_cpu(postmaster: int) -> float:
    """CPU seconds so far of the server: the postmaster and its children (backends,
    autovacuum, WAL writer, checkpointer), the ones still running."""
    total = _proc_cpu(postmaster)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            if ppid == postmaster:
                total += _proc_cpu(int(entry))
    return total


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU ticks of the machine so far (/proc/stat)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    idle = ticks[3] + ticks[4]
    return sum(ticks) - idle, sum(ticks)


class Pruner:
    """The prune of the parent process, whose backends (and itself) can be niced."""

    def __init__(
        self,
        url: str,
        settings: Any,
        other_shares: tuple[float, ...] = (),
        cpus: set[int] | None = None,
    ) -> None:
        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        from ratchet import Ratchet

        self.backends: list[int] = []
        self.niceness = 0

        def remember(dbapi_conn: Any, _record: Any) -> None:
            pid = _backend_pid(dbapi_conn)
            self.backends.append(pid)
            os.setpriority(os.PRIO_PROCESS, pid, self.niceness)
            if cpus:
                os.sched_setaffinity(pid, cpus)

        event.listen(Engine, "connect", remember)
        self.app = Ratchet(url, allow_empty_class_policy=True, retention=settings)
        #: ``prune@SHARE`` phases: the same settings with another busy_share.
        self.apps = {
            f"prune@{share}": Ratchet(
                url,
                allow_empty_class_policy=True,
                retention=dataclasses.replace(settings, busy_share=share),
            )
            for share in other_shares
        }

    def nice(self, niceness: int) -> None:
        """Run this process and the prune's backends at ``niceness`` (needs root to go back)."""
        self.niceness = niceness
        for pid in [0, *self.backends]:
            with suppress(ProcessLookupError):
                os.setpriority(os.PRIO_PROCESS, pid, niceness)

    def cpu(self) -> tuple[float, float]:
        """CPU seconds so far: this thread (the prune's Python), the prune's backends."""
        return time.thread_time(), sum(_proc_cpu(pid) for pid in self.backends)


class WaitSampler:
    """Samples what the other client backends (the worker's) are doing, 20 times a second."""

    def __init__(self, url: str, exclude: Any) -> None:
        import threading

        import psycopg

        self.conn = psycopg.connect(_libpq(url), autocommit=True)
        self.exclude = exclude
        self.counts: dict[str, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.wait(0.05):
            rows = self.conn.execute(
                "SELECT backend_type, pid = ANY(%s), state, wait_event_type, wait_event"
                " FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                " AND backend_type IN ('client backend', 'autovacuum worker')",
                (list(self.exclude()),),
            ).fetchall()
            for backend, excluded, state, kind, event in rows:
                if backend == "autovacuum worker":
                    key = "autovacuum"
                elif excluded:
                    continue
                else:
                    key = "idle" if state != "active" else f"{kind}:{event}" if kind else "CPU"
                self.counts[key] = self.counts.get(key, 0) + 1

    def take(self) -> dict[str, int]:
        """The samples since the last call."""
        counts, self.counts = self.counts, {}
        return counts

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.conn.close()


def burn(seconds: float, duty: float, cycle: float) -> None:
    """For ``seconds``, use ``duty * cycle`` CPU seconds in every ``cycle`` seconds of wall
    time (spinning, no SQL): the prune's CPU share even when the machine is saturated."""
    end = time.monotonic() + seconds
    while (now := time.monotonic()) < end:
        spin_until = time.thread_time() + duty * cycle
        while time.thread_time() < spin_until:
            pass
        time.sleep(max(0.0, now + cycle - time.monotonic()))


def interleaved_run(
    server_url: str,
    rows: int,
    pending: int,
    phase_s: float,
    phases: tuple[str, ...],
    settings: Any,
    limit_s: float,
    rate: float | None = None,
    pin: bool = False,
) -> dict[str, Any]:
    """Phases of ``phase_s`` seconds take turns while the worker runs, until the prune is done
    (or ``limit_s`` passed); returns every window with its measures. With ``pin``, the worker
    loop and its backend run on CPU 0 and everything of the prune's side (this process, its
    backends, the burn) on the others: the prune cannot take the worker's CPU, as on a server
    with cores to spare, and what remains is its effect through the database."""
    import psycopg

    with database(server_url) as url:
        started = time.monotonic()
        seed(url, rows, pending)
        seeded = time.monotonic() - started
        before = sizes(url)
        ctx = multiprocessing.get_context("spawn")
        stop, ready, out = ctx.Event(), ctx.Event(), ctx.Queue()
        cpus = sorted(os.sched_getaffinity(0))
        worker_cpus, prune_cpus = ({cpus[0]}, set(cpus[1:])) if pin else (None, None)
        if prune_cpus:
            os.sched_setaffinity(0, prune_cpus)
        child = ctx.Process(target=_worker_child, args=(url, stop, ready, out, rate, worker_cpus))
        child.start()
        ready.wait(300)
        others = tuple(float(p.split("@")[1]) for p in phases if p.startswith("prune@"))
        pruner = Pruner(url, settings, others, prune_cpus)
        monitor = psycopg.connect(_libpq(url), autocommit=True)
        monitor_pid = monitor.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        data_dir = monitor.execute("SHOW data_directory").fetchone()[0]  # type: ignore[index]
        with open(os.path.join(data_dir, "postmaster.pid")) as f:
            postmaster = int(f.readline())
        sampler = WaitSampler(url, lambda: [monitor_pid, *pruner.backends])
        time.sleep(2)
        cycle = settings.batch_target.total_seconds() / settings.busy_share
        duty = 0.5 * settings.busy_share  # until a prune phase measured it
        windows: list[dict[str, Any]] = []
        removed = 0
        done = False
        t0 = time.monotonic()
        while not done and time.monotonic() - t0 < limit_s:
            for phase in phases:
                if phase == "burn" and not any(w["phase"] == "prune" for w in windows):
                    continue
                py0, be0 = pruner.cpu()
                pg0, (busy0, total0) = _postgres_cpu(postmaster), _machine_busy()
                lsn0 = monitor.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
                sampler.take()
                start = time.monotonic()
                batches = removed_now = 0
                if phase == "idle":
                    time.sleep(phase_s)
                elif phase == "burn":
                    burn(phase_s, duty, cycle)
                else:
                    pruner.nice(19 if phase == "nice" else 0)
                    until = start + phase_s
                    app = pruner.apps.get(phase, pruner.app)
                    report = app.retention.run(
                        should_stop=lambda until=until: time.monotonic() >= until
                    )
                    pruner.nice(0)
                    removed_now = report.removed.get("SUCCEEDED", 0)
                    removed += removed_now
                    batches = report.batches
                    done = report.complete
                end = time.monotonic()
                py1, be1 = pruner.cpu()
                pg1, (busy1, total1) = _postgres_cpu(postmaster), _machine_busy()
                wal = monitor.execute(
                    "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn0,)
                ).fetchone()[0]  # type: ignore[index]
                if phase == "prune":
                    duty = min(1.0, (py1 - py0 + be1 - be0) / (end - start))
                windows.append(
                    {
                        "phase": phase,
                        "start": start,
                        "end": end,
                        "py_cpu": py1 - py0,
                        "backend_cpu": be1 - be0,
                        "server_cpu": pg1 - pg0,
                        "machine_busy": (busy1 - busy0) / max(1, total1 - total0),
                        "wal": float(wal),
                        "batches": batches,
                        "removed": removed_now,
                        "waits": sampler.take(),
                        "load": os.getloadavg()[0],
                        "duty": duty if phase == "burn" else None,
                    }
                )
                if done:
                    break
        stop.set()
        claims = out.get(timeout=600)
        child.join(60)
        sampler.close()
        monitor.close()
        pruner.app.close()
        for other in pruner.apps.values():
            other.close()
        os.sched_setaffinity(0, cpus)
        vacuum_s, stages = sizes_by_stage(url, before)
    for w in windows:
        w.update(window(claims, w["start"], w["end"]))
        w["latencies"] = sorted(c[1] for c in claims if w["start"] <= c[0] < w["end"] and c[2])
        w["jobs"] = sum(c[2] for c in claims if w["start"] <= c[0] < w["end"])
    return {
        "seed_s": seeded,
        "removed": removed,
        "windows": windows,
        "vacuum_s": vacuum_s,
        "sizes": stages,
    }


def summarise(windows: list[dict[str, Any]], phases: tuple[str, ...]) -> None:
    """Per phase: pooled p50 / p99 and throughput, CPU, WAL and the worker backend's waits;
    then each phase against the idle window of the same cycle (median and range)."""
    by_phase: dict[str, list[dict[str, Any]]] = {}
    for w in windows:
        by_phase.setdefault(w["phase"], []).append(w)
    print(
        f"  {'phase':<10}{'n':>4}{'seconds':>9}{'p50 ms':>8}{'p99 ms':>8}{'jobs/s':>8}"
        f"{'rows/s':>7}{'py cpu/s':>9}{'pg cpu/s':>9}{'server':>8}{'machine':>8}{'WAL MB/s':>9}"
        "  worker backend (share of samples)"
    )
    for phase in phases:
        ws = by_phase.get(phase, [])
        if not ws:
            continue
        secs = sum(w["end"] - w["start"] for w in ws)
        lat = sorted(x for w in ws for x in w["latencies"])
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else float("nan")
        waits: dict[str, int] = {}
        for w in ws:
            for k, v in w["waits"].items():
                waits[k] = waits.get(k, 0) + v
        total = sum(waits.values()) or 1
        top = ", ".join(
            f"{k} {v / total:.0%}" for k, v in sorted(waits.items(), key=lambda kv: -kv[1])[:5]
        )
        print(
            f"  {phase:<10}{len(ws):>4}{secs:>9.0f}"
            f"{statistics.median(lat) if lat else float('nan'):>8.2f}{p99:>8.2f}"
            f"{sum(w['jobs'] for w in ws) / secs:>8.0f}"
            f"{sum(w['removed'] for w in ws) / secs:>7.0f}"
            f"{sum(w['py_cpu'] for w in ws) / secs:>9.2f}"
            f"{sum(w['backend_cpu'] for w in ws) / secs:>9.2f}"
            f"{sum(w['server_cpu'] for w in ws) / secs:>8.2f}"
            f"{statistics.mean(w['machine_busy'] for w in ws):>8.0%}"
            f"{sum(w['wal'] for w in ws) / secs / 1_048_576:>9.2f}  {top}",
            flush=True,
        )
    idle = [w for w in windows if w["phase"] == "idle"]
    for phase in phases:
        if phase == "idle":
            continue
        p99s, tputs = [], []
        for w in windows:
            if w["phase"] != phase or not w["claims"]:
                continue
            base = max((i for i in idle if i["start"] < w["start"]), key=lambda i: i["start"])
            p99s.append(w["p99"] / base["p99"])
            tputs.append(w["jobs_per_s"] / base["jobs_per_s"])
        if p99s:
            print(
                f"  {phase} / idle of the same cycle ({len(p99s)} cycles): claim p99 median "
                f"{statistics.median(p99s):.2f} ({min(p99s):.2f}..{max(p99s):.2f}), "
                f"throughput median {statistics.median(tputs):.2f} "
                f"({min(tputs):.2f}..{max(tputs):.2f})",
                flush=True,
            )


def _mb(n: int) -> str:
    return f"{n / 1_048_576:,.1f}"


def print_sizes(by_stage: dict[str, dict[str, tuple[int, int]]]) -> None:
    """A table of MB (heap + indexes) per table and stage."""
    print("  sizes, MB (table + indexes):")
    print(f"  {'table':<28}" + "".join(f"{stage:>22}" for stage in by_stage))
    for table in TABLES:
        cells = "".join(
            f"{_mb(by_stage[stage][table][0]) + ' + ' + _mb(by_stage[stage][table][1]):>22}"
            for stage in by_stage
        )
        print(f"  {table:<28}{cells}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing server (SQLAlchemy URL; needs CREATEDB)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=1_000_000, help="ended jobs to prune")
    parser.add_argument("--pending", type=int, default=10_000, help="jobs waiting at the start")
    parser.add_argument("--baseline", type=float, default=30.0, help="seconds without pruning")
    parser.add_argument(
        "--pause", type=float, default=20.0, help="ms between removal batches (the default 20)"
    )
    parser.add_argument(
        "--batch-target",
        type=float,
        default=250.0,
        help="ms one removal transaction should take (the default 250)",
    )
    parser.add_argument(
        "--busy-share",
        type=float,
        default=0.5,
        help="most of the prune's time inside removal transactions (the default 0.5)",
    )
    parser.add_argument(
        "--interleave",
        type=float,
        metavar="SECONDS",
        help="phases of this length (idle, prune, burn) take turns until the prune is done",
    )
    parser.add_argument(
        "--nice", action="store_true", help="with --interleave: add a phase pruning at nice 19"
    )
    parser.add_argument(
        "--no-burn", action="store_true", help="with --interleave: no burn phase (shorter runs)"
    )
    parser.add_argument(
        "--also-share",
        type=float,
        action="append",
        default=[],
        metavar="SHARE",
        help="with --interleave: add a phase pruning with this busy_share (repeatable)",
    )
    parser.add_argument(
        "--worker-rate",
        type=float,
        metavar="JOBS_PER_S",
        help="with --interleave: the worker loop runs at this pace instead of flat out",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="with --interleave: the worker loop and its backend on CPU 0, the prune's side on the"
        " others (a server with a core to spare)",
    )
    parser.add_argument(
        "--limit", type=float, default=600.0, help="with --interleave: stop after this long (s)"
    )
    args = parser.parse_args(argv)

    from bench_postgres import durable_server

    url, server = durable_server(args.url)
    print(
        f"Python {platform.python_version()}; {platform.machine()}; {os.cpu_count()} CPUs;"
        f" {platform.platform()}; load average at start {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    if args.interleave:
        try:
            return _interleaved_main(args, url)
        finally:
            if server is not None:
                server.stop()
    results = []
    try:
        for i in range(args.runs):
            result = one_run(
                url,
                args.rows,
                args.pending,
                args.baseline,
                args.pause,
                args.busy_share,
                args.batch_target,
            )
            results.append(result)
            print_sizes(result["sizes"])
            b, p = result["base"], result["prune"]
            print(
                f"run {i + 1}: removed {result['removed']:,} in {result['prune_s']:.1f} s "
                f"({result['batches']} batches; seeding took {result['seed_s']:.0f} s); "
                f"claim p50 {b['p50']:.2f} -> {p['p50']:.2f} ms, "
                f"p99 {b['p99']:.2f} -> {p['p99']:.2f} ms; "
                f"worker {b['jobs_per_s']:,.0f} -> {p['jobs_per_s']:,.0f} jobs/s; "
                f"VACUUM {result['vacuum_s']:.1f} s; load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    finally:
        if server is not None:
            server.stop()

    def ratios(key: str) -> list[float]:
        return [r["prune"][key] / r["base"][key] for r in results]

    print(
        "\nduring pruning / baseline, per run: claim p99 "
        + ", ".join(f"{x:.2f}" for x in ratios("p99"))
        + "; throughput "
        + ", ".join(f"{x:.2f}" for x in ratios("jobs_per_s"))
    )
    return 0


def _interleaved_main(args: argparse.Namespace, url: str) -> int:
    from ratchet import RetentionSettings

    settings = RetentionSettings(
        pause_between_batches=timedelta(milliseconds=args.pause),
        busy_share=args.busy_share,
        batch_target=timedelta(milliseconds=args.batch_target),
    )
    phases = (
        "idle",
        "prune",
        *(() if args.no_burn else ("burn",)),
        *(("nice",) if args.nice else ()),
        *(f"prune@{share}" for share in args.also_share),
    )
    for i in range(args.runs):
        result = interleaved_run(
            url,
            args.rows,
            args.pending,
            args.interleave,
            phases,
            settings,
            args.limit,
            args.worker_rate,
            args.pin,
        )
        loads = [w["load"] for w in result["windows"]]
        print(
            f"run {i + 1}: removed {result['removed']:,} (seeding {result['seed_s']:.0f} s);"
            f" busy_share {args.busy_share}, batch_target {args.batch_target:.0f} ms;"
            f" worker {'flat out' if not args.worker_rate else f'{args.worker_rate:.0f} jobs/s'}"
            f"{', pinned' if args.pin else ''};"
            f" load average {min(loads):.1f} to {max(loads):.1f}",
            flush=True,
        )
        summarise(result["windows"], phases)
        print(f"  VACUUM (ANALYZE) after the prune: {result['vacuum_s']:.1f} s")
        print_sizes(result["sizes"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
