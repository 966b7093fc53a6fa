"""What observability costs: worker throughput with the exporters on versus off, side by side.

Run on demand::

    uv run python benchmarks/bench_observability.py [--runs 5] [--jobs 20000] [--only sqlite,postgres]
        [--defaults] [--variants off,metrics,tracing,both]

One worker (in this process, the settings of ``bench_sqlite.py``, or with ``--defaults`` the
worker's own defaults, what ``ratchet worker module:app`` runs) runs ``--jobs`` no-op jobs on a
fresh database per run, once per variant; the variants alternate within each round (interleaved),
so a change in the machine's load hits them alike. ``metrics``: the Prometheus collector installed
and scraped (rendered as text) every second. ``tracing``: the OpenTelemetry tracer on the SDK with
its default sampler (every trace) and a ``BatchSpanProcessor`` feeding an exporter that drops the
spans. ``both``: the two together. ``tracing10`` and ``both10``: the same with a parent-based sampler that
keeps one trace in ten. The jobs are submitted 20 to a submission with the variant
already set up, so a traced run's attempts have their submission's trace as parent. Printed: jobs/s
per variant (median and every run), and each variant's throughput relative to ``off`` (the median
of the per-round ratios, and their spread). PostgreSQL is a throwaway server
(``ratchet.testing.servers``) unless ``--pg-url``.

It also times what the instrumentation costs a worker with no exporter: the check the poller and
the writer make once per poll and per outcome write.

Variants are entries of :data:`VARIANTS`: a function that prepares an app and returns what to
close afterwards.
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


def variant_tracing(app: Ratchet, ratio: float | None = None) -> Closer:
    """OpenTelemetry on the SDK as it comes (every trace sampled; with ``ratio``, a parent-based
    sampler keeping that share of the traces), spans batched then dropped."""
    from bench_tracing import DropSpans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    from ratchet.exporters.otel import OpenTelemetryTracer

    if ratio is None:
        provider = TracerProvider()
    else:
        provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)))
    provider.add_span_processor(BatchSpanProcessor(DropSpans()))
    app.enable_tracing(OpenTelemetryTracer(tracer_provider=provider))
    return provider.shutdown


def variant_both(app: Ratchet, ratio: float | None = None) -> Closer:
    close_tracing = variant_tracing(app, ratio)
    close_metrics = variant_metrics(app)

    def close() -> None:
        close_metrics()
        close_tracing()

    return close


#: name -> set-up function. "off" must come first: the ratios are relative to it.
VARIANTS: dict[str, Callable[[Ratchet], Closer]] = {
    "off": variant_off,
    "metrics": variant_metrics,
    "tracing": variant_tracing,
    "both": variant_both,
    "tracing10": lambda app: variant_tracing(app, 0.1),
    "both10": lambda app: variant_both(app, 0.1),
}
#: Jobs per submission: each submission is one trace when tracing is on.
PER_SUBMISSION = 20


def process(
    url: str, n: int, setup: Callable[[Ratchet], Closer], defaults: bool
) -> tuple[float, float]:
    """Jobs per second of one in-process worker running ``n`` no-op jobs under ``setup``, and
    the CPU time of this process per job (µs; every thread, the database client included), which
    a loaded machine disturbs less than the wall time."""
    app = Ratchet(url, allowed_modules=["bench_jobs"])
    app.store.migrate()
    close = setup(app)
    for chunk in range(0, n, PER_SUBMISSION):
        app.submit_many(
            [app.enqueue(bench_jobs.noop, i) for i in range(chunk, min(n, chunk + PER_SUBMISSION))]
        )
    cpu = time.process_time()
    rate = drain(app, n, timeout=900, defaults=defaults)
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


def compare(
    label: str,
    databases: Callable[[], str],
    n: int,
    runs: int,
    variants: list[str],
    defaults: bool,
) -> None:
    rates: dict[str, list[float]] = {name: [] for name in variants}
    cpus: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(runs):
        names = list(variants)
        if round_ % 2:  # alternate the order too, so neither always runs first
            names.reverse()
        for name in names:
            rate, cpu = process(databases(), n, VARIANTS[name], defaults)
            rates[name].append(rate)
            cpus[name].append(cpu)
    settings = "worker defaults" if defaults else "bench_sqlite settings"
    print(
        f"{label}: {n:,} no-op jobs, {settings}, {runs} interleaved rounds, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    for name in variants:
        print(
            f"  {name:<10} median {statistics.median(rates[name]):>8,.0f} jobs/s   runs: "
            f"{', '.join(f'{v:,.0f}' for v in rates[name])}"
        )
        print(
            f"  {'':<10} CPU    {statistics.median(cpus[name]):>8,.1f} us/job   runs: "
            f"{', '.join(f'{v:,.1f}' for v in cpus[name])}"
        )
    for name in variants:
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
    parser.add_argument(
        "--defaults", action="store_true", help="the worker's default settings (app.worker())"
    )
    parser.add_argument(
        "--variants", default="off,metrics", help=f"comma list of {', '.join(VARIANTS)}"
    )
    args = parser.parse_args()
    variants = ["off"] + [v for v in args.variants.split(",") if v != "off"]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants: {', '.join(sorted(unknown))}")
    only = set((args.only or "sqlite,postgres,idle").split(","))
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        f", load average {os.getloadavg()[0]:.1f}"
    )
    if "idle" in only:
        idle_check_cost()
    if "sqlite" in only:
        with sqlite_databases() as databases:
            compare("SQLite", databases, args.jobs, args.runs, variants, args.defaults)
    if "postgres" in only:
        with postgres_databases(args.pg_url) as databases:
            compare("PostgreSQL", databases, args.jobs, args.runs, variants, args.defaults)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
