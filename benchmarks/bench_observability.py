"""What observability costs: worker throughput with the exporters on versus off, side by side.

Run on demand::

    uv run python benchmarks/bench_observability.py [--runs 5] [--jobs 20000] [--only sqlite,postgres]

One worker (in this process, the settings of ``bench_sqlite.py``) runs ``--jobs`` no-op jobs on a
fresh database per run, once per variant; the variants alternate within each round (interleaved),
so a change in the machine's load hits them alike. ``metrics``: the Prometheus collector installed
and scraped (rendered as text) every second. Printed: jobs/s per variant (median and every run),
and each variant's throughput relative to ``off`` (the median of the per-round ratios, and their
spread). PostgreSQL is a throwaway server (``ratchet.testing.servers``) unless ``--pg-url``.

It also times what the instrumentation costs a worker with no exporter: the check the poller and
the writer make once per poll and per outcome write.

Variants are entries of :data:`VARIANTS`: a function that prepares an app and returns what to
close afterwards. A tracing variant is added there.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import timeit
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_jobs
from bench_sqlite import BATCH_SIZE, drain

from ratchet import Ratchet

Closer = Callable[[], None]


def variant_off(app: Ratchet) -> Closer:
    return lambda: None


def variant_metrics(app: Ratchet) -> Closer:
    """The Prometheus collector, scraped every second (Prometheus' default is 15 s)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from ratchet.exporters.prometheus import RatchetCollector

    registry = CollectorRegistry()
    registry.register(RatchetCollector().install(app))
    stop = threading.Event()

    def scrape() -> None:
        while not stop.wait(1.0):
            generate_latest(registry)

    thread = threading.Thread(target=scrape, daemon=True)
    thread.start()

    def close() -> None:
        stop.set()
        thread.join()

    return close


#: name -> set-up function. "off" must come first: the ratios are relative to it.
VARIANTS: dict[str, Callable[[Ratchet], Closer]] = {
    "off": variant_off,
    "metrics": variant_metrics,
}


def process(url: str, n: int, setup: Callable[[Ratchet], Closer]) -> tuple[float, float]:
    """Jobs per second of one in-process worker running ``n`` no-op jobs under ``setup``, and
    the CPU time of this process per job (µs; every thread, the database client included), which
    a loaded machine disturbs less than the wall time."""
    app = Ratchet(url, allowed_modules=["bench_jobs"])
    app.store.migrate()
    builders = [app.enqueue(bench_jobs.noop, i) for i in range(n)]
    for chunk in range(0, n, 5000):
        app.submit_many(builders[chunk : chunk + 5000])
    close = setup(app)
    cpu = time.process_time()
    rate = drain(app, n, timeout=900)
    cpu = (time.process_time() - cpu) / n * 1e6
    close()
    app.close()
    return rate, cpu


@contextmanager
def sqlite_databases() -> Iterator[Callable[[], str]]:
    with tempfile.TemporaryDirectory(prefix="ratchet-bench-obs-") as workdir:
        yield lambda: f"sqlite:///{os.path.join(workdir, uuid.uuid4().hex)}.db"


@contextmanager
def postgres_databases(url: str | None) -> Iterator[Callable[[], str]]:
    from bench_postgres import Bench

    server = None
    if url is None:
        from ratchet.testing.servers import PostgresServer

        server = PostgresServer(settings={"max_connections": "200"}).start()
        url = server.url()
    bench = Bench(url)
    opened: list[object] = []

    def fresh() -> str:
        context = bench.database()
        opened.append(context)
        return context.__enter__()

    try:
        yield fresh
    finally:
        for context in reversed(opened):
            context.__exit__(None, None, None)  # type: ignore[attr-defined]
        if server is not None:
            server.cleanup()


def compare(label: str, databases: Callable[[], str], n: int, runs: int) -> None:
    rates: dict[str, list[float]] = {name: [] for name in VARIANTS}
    cpus: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for round_ in range(runs):
        names = list(VARIANTS)
        if round_ % 2:  # alternate the order too, so neither always runs first
            names.reverse()
        for name in names:
            rate, cpu = process(databases(), n, VARIANTS[name])
            rates[name].append(rate)
            cpus[name].append(cpu)
    print(
        f"{label}: {n:,} no-op jobs, {runs} interleaved rounds, load average {os.getloadavg()[0]:.1f}"
    )
    for name in VARIANTS:
        print(
            f"  {name:<10} median {statistics.median(rates[name]):>8,.0f} jobs/s   runs: "
            f"{', '.join(f'{v:,.0f}' for v in rates[name])}"
        )
        print(
            f"  {'':<10} CPU    {statistics.median(cpus[name]):>8,.1f} us/job   runs: "
            f"{', '.join(f'{v:,.1f}' for v in cpus[name])}"
        )
    for name in VARIANTS:
        if name == "off":
            continue
        for what, values, base in (
            ("throughput", rates[name], rates["off"]),
            ("CPU per job", cpus[name], cpus["off"]),
        ):
            ratios = [v / o for v, o in zip(values, base, strict=True)]
            print(
                f"  {name} / off, {what}: median {statistics.median(ratios):.3f}  "
                f"(min {min(ratios):.3f}, max {max(ratios):.3f}; per round "
                f"{', '.join(f'{r:.3f}' for r in ratios)})"
            )


def idle_check_cost() -> None:
    """What a worker with no exporter pays: ``meter.enabled``, once per poll and per write."""
    with tempfile.TemporaryDirectory(prefix="ratchet-bench-obs-") as workdir:
        app = Ratchet(f"sqlite:///{workdir}/idle.db", allowed_modules=["bench_jobs"])
        worker = app.worker()
        calls = 200_000
        seconds = min(timeit.repeat(lambda: worker.meter.enabled, number=calls, repeat=5))
        app.close()
    print(
        f"no exporter: meter.enabled costs {seconds / calls * 1e9:,.0f} ns per check "
        f"(two checks per poll/write pair, which carry up to {BATCH_SIZE} jobs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--only", help="comma list: sqlite,postgres,idle (default: all)")
    parser.add_argument("--pg-url", help="an existing PostgreSQL server (needs CREATEDB)")
    args = parser.parse_args()
    only = set((args.only or "sqlite,postgres,idle").split(","))
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        f", load average {os.getloadavg()[0]:.1f}"
    )
    if "idle" in only:
        idle_check_cost()
    if "sqlite" in only:
        with sqlite_databases() as databases:
            compare("SQLite", databases, args.jobs, args.runs)
    if "postgres" in only:
        with postgres_databases(args.pg_url) as databases:
            compare("PostgreSQL", databases, args.jobs, args.runs)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
