"""Dashboard page render times on PostgreSQL with 1,000,000 jobs in the store.

Run on demand::

    uv run python benchmarks/bench_dashboard.py [--runs 1] [--jobs 1000000] [--url postgresql://...]

Without ``--url`` it starts a throwaway PostgreSQL on loopback. Each run builds a fresh database
with ``bench_query.build`` (set-based ``INSERT ... SELECT generate_series``: 80 % SUCCEEDED, 5 %
FAILED, 10 % PENDING, 3 % CANCELED, 2 % RUNNING, one job in ten tagged), adds a few recurring
masters, runs ``VACUUM ANALYZE``, then requests every page through the dashboard's ASGI app in
process (Starlette's TestClient: routing, the queries, the templates; no network). A figure is
the median milliseconds of ``--repeat`` requests after two warm-up requests, over the runs. The
one-time load of the throughput chart's history (twelve queue health windows, in a background
thread) is timed on its own.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_query import build, timed


def pages(url: str) -> dict[str, str]:
    """The paths to time (a failed job's page among them)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as conn:
        failed = conn.execute(
            text(
                "SELECT job_id FROM scheduler_job_end WHERE terminal_status = 'FAILED'"
                " ORDER BY job_id DESC LIMIT 1"
            )
        ).scalar_one()
    engine.dispose()
    return {
        "overview": "/",
        "overview (live refresh)": "/live",
        "jobs, first page": "/jobs",
        "jobs, status FAILED": "/jobs?status=FAILED",
        "jobs, PENDING + RUNNING": "/jobs?status=PENDING&status=RUNNING",
        "jobs, tag": "/jobs?tag=tenant-3",
        "jobs, target": "/jobs?target=bench.jobs%3Atask_7",
        "job (failed)": f"/jobs/{failed}",
        "dead-letter queue": "/dlq",
        "recurring": "/recurring",
        "cluster": "/cluster",
    }


def measure(url: str, repeat: int) -> dict[str, float]:
    import bench_jobs
    from starlette.testclient import TestClient

    from ratchet import Ratchet
    from ratchet_dashboard import DashboardSettings, create_dashboard

    app = Ratchet(url, allowed_modules=["bench_jobs"], auto_migrate=False)
    for hour in range(5):
        app.schedule_recurring(f"0 0 {hour} * * ?", "Europe/Berlin", bench_jobs.noop, hour).submit()
    figures: dict[str, float] = {}
    board = create_dashboard(app, settings=DashboardSettings())
    with TestClient(board, client=("127.0.0.1", 1)) as client:
        # The first overview loads the throughput chart's history in the background, once:
        # let it finish, so that it does not share the machine with the timed requests.
        started = time.perf_counter()
        client.get("/")
        assert board.state.dashboard.throughput.history_loaded.wait(timeout=120)
        figures["chart history (once, in the background)"] = (time.perf_counter() - started) * 1000
        for name, path in pages(url).items():

            def get(path: str = path) -> None:
                response = client.get(path)
                assert response.status_code == 200, (path, response.text[:300])

            figures[name] = timed(get, repeat)
    app.close()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing server (SQLAlchemy URL; needs CREATEDB)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=11, help="timed requests per page")
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
    admin = psycopg.connect(
        admin_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True
    )
    row = admin.execute("SHOW server_version").fetchone()
    print(
        f"PostgreSQL {row[0] if row else '?'}; Python {platform.python_version()}; "
        f"{platform.machine()}; {os.cpu_count()} CPUs; {args.jobs:,} jobs; load average at "
        f"start {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    results: dict[str, list[float]] = {}
    try:
        for run in range(args.runs):
            name = f"bench_dashboard_{uuid.uuid4().hex[:8]}"
            admin.execute(f"CREATE DATABASE {name}")
            db_url = make_url(url).set(database=name).render_as_string(False)
            started = time.perf_counter()
            build(db_url, args.jobs)
            print(
                f"run {run + 1}: built in {time.perf_counter() - started:.0f} s; load average "
                f"{os.getloadavg()[0]:.1f}",
                flush=True,
            )
            for what, ms in measure(db_url, args.repeat).items():
                results.setdefault(what, []).append(ms)
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
    finally:
        admin.close()
        if server is not None:
            server.stop()
    print(f"\n| page ({args.jobs:,} jobs) | ms (median) | runs |")
    print("|---|---|---|")
    for what, values in results.items():
        runs = ", ".join(f"{v:.1f}" for v in values)
        print(f"| {what} | {statistics.median(values):.1f} | {runs} |")
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
