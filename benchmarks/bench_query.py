"""Query API benchmark on PostgreSQL: pages of 1,000,000 jobs, filtered pages, queue health.

Run on demand::

    uv run python benchmarks/bench_query.py [--runs 3] [--jobs 1000000] [--url postgresql://...]

Without ``--url`` it starts a throwaway PostgreSQL on loopback. Each run builds a fresh database
with ``--jobs`` jobs by set-based inserts (80 % SUCCEEDED, 5 % FAILED, 10 % PENDING, 3 %
CANCELED, 2 % RUNNING; 20 targets; one job in ten tagged; time-ordered ids as the app makes
them), runs ``VACUUM ANALYZE``, then times each query through the store's ``QueryStore`` methods
(what ``app.jobs`` calls): the median of ``--repeat`` calls after two warm-up calls. For
contrast, the deep page is also read with ``OFFSET`` in the same run. Figures are milliseconds,
the median over runs, with every run's value.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

PAGE = 50
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def build(url: str, n: int) -> None:
    """``n`` jobs with their queue rows, tags and a history, inserted set-based."""
    from sqlalchemy import text

    from ratchet_postgres import PostgresStore

    store = PostgresStore(url)
    store.migrate()
    t0_ms = int(T0.timestamp() * 1000)
    with store.engine.begin() as conn:
        conn.execute(text("SET LOCAL synchronous_commit = off"))
        # UUIDv7 layout: 48 bits of milliseconds, version 7, then pseudo-random bits.
        conn.execute(
            text(
                """
                INSERT INTO scheduler_job (job_id, target, payload, priority, max_retries,
                    backoff_policy, backoff_ms, idempotency_key, created_at)
                SELECT (lpad(to_hex(:t0 + g), 12, '0') || '7' || substr(md5(g::text), 1, 3)
                        || '8' || substr(md5(g::text), 4, 15))::uuid,
                       'bench.jobs:task_' || (g % 20), '{"args":[],"kwargs":{}}', g % 5, 3,
                       'NONE', 0, 'k' || g, (:t0 + g)::bigint * 1000
                FROM generate_series(1, :n) g
                """
            ),
            {"n": n, "t0": t0_ms},
        )
        # 80 % SUCCEEDED, 5 % FAILED, 3 % CANCELED, the rest live (below)
        conn.execute(
            text(
                """
                INSERT INTO scheduler_job_end (job_id, attempts, terminal_status,
                    terminal_error, terminated_at, result)
                SELECT job_id,
                       CASE WHEN g % 100 < 85 THEN 1 ELSE 0 END,
                       CASE WHEN g % 100 < 80 THEN 'SUCCEEDED' WHEN g % 100 < 85 THEN 'FAILED'
                            ELSE 'CANCELED' END,
                       CASE WHEN g % 100 BETWEEN 80 AND 84 THEN 'RuntimeError: boom' END,
                       created_at + 500000,
                       CASE WHEN g % 100 < 80 THEN 'null' END
                FROM (SELECT job_id, created_at, CAST(substr(idempotency_key, 2) AS BIGINT) AS g
                      FROM scheduler_job) j
                WHERE g % 100 < 88
                """
            )
        )
        conn.execute(
            text(
                """
                INSERT INTO scheduler_job_queue (job_id, status, priority, scheduled_time,
                    attempts, epoch, picked_by, picked_at)
                SELECT job_id,
                       CASE WHEN ord % 12 < 10 THEN 'PENDING' ELSE 'RUNNING' END,
                       priority, created_at,
                       CASE WHEN ord % 12 < 10 THEN 0 ELSE 1 END,
                       CASE WHEN ord % 12 < 10 THEN 0 ELSE 1 END,
                       CASE WHEN ord % 12 < 10 THEN NULL ELSE 'node-' || (ord % 4) END,
                       CASE WHEN ord % 12 < 10 THEN NULL ELSE created_at END
                FROM (SELECT job_id, priority, created_at, row_number() OVER () AS ord
                      FROM scheduler_job j WHERE NOT EXISTS
                          (SELECT 1 FROM scheduler_job_end e WHERE e.job_id = j.job_id)) live
                """
            )
        )
        conn.execute(
            text(
                "INSERT INTO scheduler_job_tag (job_id, tag) SELECT job_id, 'tenant-'"
                " || (get_byte(uuid_send(job_id), 15) % 10) FROM scheduler_job"
                " WHERE get_byte(uuid_send(job_id), 14) % 10 = 0"
            )
        )
    with store.engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE"))
    store.close()


def timed(call: Callable[[], Any], repeat: int) -> float:
    """Median milliseconds of ``call`` over ``repeat`` calls, after two warm-up calls."""
    for _ in range(2):
        call()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def server_ms(store: Any, call: Callable[[], Any]) -> float:
    """Milliseconds the server spends on the statements ``call`` runs (the sum of their
    ``EXPLAIN ANALYZE`` execution times, run again with the same parameters)."""
    from sqlalchemy import event

    seen: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append((statement, params))

    event.listen(store.read_engine, "before_cursor_execute", capture)
    try:
        call()
    finally:
        event.remove(store.read_engine, "before_cursor_execute", capture)
    total = 0.0
    with store.read_engine.connect() as conn:
        for statement, params in seen:
            for _ in range(2):  # the second run, with a warm cache, counts
                plan = conn.exec_driver_sql(
                    "EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params
                ).scalar_one()
            total += plan[0]["Execution Time"] + plan[0]["Planning Time"]
    return total


def measure(url: str, n: int, repeat: int) -> dict[str, tuple[float, float]]:
    """Every figure of one run: (milliseconds through the API, milliseconds in the server)."""
    from sqlalchemy import text

    from ratchet.domain.lifecycle import JobStatus
    from ratchet.domain.query import JobQuery
    from ratchet.sql import schema
    from ratchet_postgres import PostgresStore

    store = PostgresStore(url)
    everything = JobQuery()
    deep_offset = int(n * 0.9)
    with store.engine.connect() as conn:
        deep_after = conn.execute(
            text("SELECT job_id FROM scheduler_job ORDER BY job_id DESC OFFSET :o LIMIT 1"),
            {"o": deep_offset},
        ).scalar_one()
        failed_after = conn.execute(
            text(
                "SELECT job_id FROM scheduler_job_end WHERE terminal_status = 'FAILED'"
                " ORDER BY job_id DESC OFFSET :o LIMIT 1"
            ),
            {"o": int(n * 0.05 * 0.9)},
        ).scalar_one()
    failed = JobQuery(statuses=(JobStatus.FAILED,))
    pending = JobQuery(statuses=(JobStatus.PENDING,))
    several = JobQuery(statuses=(JobStatus.PENDING, JobStatus.FAILED, JobStatus.RUNNING))
    tag = JobQuery(tag="tenant-3")
    target = JobQuery(target="bench.jobs:task_7")
    target_failed = JobQuery(target="bench.jobs:task_2", statuses=(JobStatus.FAILED,))
    week = JobQuery(
        created_after=T0 + timedelta(seconds=n // 2000),
        created_before=T0 + timedelta(seconds=max(n // 1000, n // 2000 + 1)),
    )

    def offset_page() -> None:
        with store.read_engine.connect() as conn:
            cols = store._record_cols()
            J = schema.job
            from sqlalchemy import select

            stmt = (
                select(*cols)
                .select_from(schema.job_with_state)  # the job, its queue row and its end
                .order_by(J.c.job_id.desc())
                .offset(deep_offset)
                .limit(PAGE + 1)
            )
            rows = conn.execute(stmt).all()
            assert len(rows) == PAGE + 1

    def page(query: JobQuery, after: uuid.UUID | None = None) -> Callable[[], None]:
        def call() -> None:
            rows = store.query_jobs(query, after=after, limit=PAGE + 1)
            assert rows, query

        return call

    calls: dict[str, tuple[Callable[[], Any], int]] = {
        "first page, no filter": (page(everything), repeat),
        "page at 90 % deep (keyset)": (page(everything, deep_after), repeat),
        "page at 90 % deep (OFFSET, for contrast)": (offset_page, max(3, repeat // 4)),
        "first page, status FAILED": (page(failed), repeat),
        "page at 90 % of FAILED": (page(failed, failed_after), repeat),
        "first page, status PENDING": (page(pending), repeat),
        "first page, 3 statuses": (page(several), repeat),
        "first page, tag": (page(tag), repeat),
        "first page, target": (page(target), repeat),
        "first page, target + FAILED": (page(target_failed), repeat),
        "first page, created between": (page(week), repeat),
        "queue health": (
            lambda: store.queue_health(now=T0 + timedelta(days=30), window=timedelta(minutes=5)),
            repeat,
        ),
        "count by status (full count)": (store.count_by_status, max(3, repeat // 4)),
    }
    figures: dict[str, tuple[float, float]] = {}
    for what, (call, times) in calls.items():
        figures[what] = (timed(call, times), server_ms(store, call))
    store.close()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing server (SQLAlchemy URL; needs CREATEDB)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=21, help="timed calls per figure")
    args = parser.parse_args(argv)

    import psycopg
    from sqlalchemy.engine import make_url

    server = None
    url = args.url
    if url is None:
        from ratchet.testing.servers import PostgresServer

        server = PostgresServer().start()
        url = server.url()
    admin_url = make_url(url).set(database="postgres").render_as_string(False)
    admin = psycopg.connect(admin_url.replace("postgresql+psycopg://", "postgresql://"),
                            autocommit=True)  # fmt: skip
    version = admin.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
    print(f"PostgreSQL {version}; Python {platform.python_version()}; {platform.machine()};"
          f" {os.cpu_count()} CPUs; {args.jobs:,} jobs; page {PAGE}; load average at start"
          f" {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    results: dict[str, list[tuple[float, float]]] = {}
    try:
        for run in range(args.runs):
            name = f"bench_query_{uuid.uuid4().hex[:8]}"
            admin.execute(f"CREATE DATABASE {name}")
            db_url = make_url(url).set(database=name).render_as_string(False)
            started = time.perf_counter()
            build(db_url, args.jobs)
            print(f"run {run + 1}: built in {time.perf_counter() - started:.0f} s; load average"
                  f" {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
            for what, ms in measure(db_url, args.jobs, args.repeat).items():
                results.setdefault(what, []).append(ms)
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
    finally:
        admin.close()
        if server is not None:
            server.stop()
    print(f"\n| query ({args.jobs:,} jobs, {PAGE} per page) | API ms (median) | runs |"
          " server ms (median) | runs |")  # fmt: skip
    print("|---|---|---|---|---|")
    for what, values in results.items():
        api = [v[0] for v in values]
        db = [v[1] for v in values]
        print(f"| {what} | {statistics.median(api):.2f} | {', '.join(f'{v:.2f}' for v in api)}"
              f" | {statistics.median(db):.2f} | {', '.join(f'{v:.2f}' for v in db)} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
