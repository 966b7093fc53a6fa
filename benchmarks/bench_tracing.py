"""What tracing costs: worker throughput and single-enqueue rate with OpenTelemetry on versus off.

Run on demand::

    uv run python benchmarks/bench_tracing.py [--runs 5] [--jobs 20000]

``off``: no tracer (the default). ``otel``: the OpenTelemetry tracer on the SDK's
``TracerProvider`` with a ``BatchSpanProcessor`` (its defaults) feeding an exporter that drops
the spans, so what is measured is Ratchet's instrumentation and the SDK, not a collector. In
``otel`` the jobs are submitted traced (each stores its trace context; each attempt span is
parented on it). One worker in this process (the settings of ``bench_sqlite.py``) runs
``--jobs`` no-op jobs on a fresh SQLite file per run; the variants alternate within each round,
first one then the other, so a change in the machine's load hits them alike. Printed: jobs/s per
variant (median and every run) and the per-round ratio ``otel / off`` (median, min, max).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_jobs
from bench_sqlite import drain
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from ratchet import Ratchet
from ratchet.exporters.otel import OpenTelemetryTracer

VARIANTS = ("off", "otel")


class DropSpans(SpanExporter):
    """Counts the spans it is given and keeps none."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def make_app(workdir: str, variant: str) -> tuple[Ratchet, TracerProvider | None, DropSpans]:
    app = Ratchet(f"sqlite:///{os.path.join(workdir, 'jobs.db')}", allowed_modules=["bench_jobs"])
    exporter = DropSpans()
    if variant == "off":
        return app, None, exporter
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    app.enable_tracing(OpenTelemetryTracer(tracer_provider=provider))
    return app, provider, exporter


def process(variant: str, n: int) -> float:
    """Jobs/s of one worker running ``n`` no-op jobs submitted beforehand."""
    with tempfile.TemporaryDirectory(prefix="ratchet-bench-") as workdir:
        app, provider, exporter = make_app(workdir, variant)
        builders = [app.enqueue(bench_jobs.noop, i) for i in range(n)]
        for chunk in range(0, n, 5000):
            app.submit_many(builders[chunk : chunk + 5000])
        rate = drain(app, n)
        if provider is not None:
            provider.shutdown()  # flushes: every attempt (and submission) made a span
            assert exporter.spans == n + n // 5000 + (1 if n % 5000 else 0), exporter.spans
        app.close()
        return rate


def enqueue(variant: str, n: int) -> float:
    """Single submissions per second (each its own transaction and, traced, its own span)."""
    with tempfile.TemporaryDirectory(prefix="ratchet-bench-") as workdir:
        app, provider, _ = make_app(workdir, variant)
        start = time.perf_counter()
        for i in range(n):
            app.enqueue(bench_jobs.noop, i).submit()
        elapsed = time.perf_counter() - start
        if provider is not None:
            provider.shutdown()
        app.close()
        return n / elapsed


def compare(label: str, measure: object, n: int, runs: int) -> None:
    results: dict[str, list[float]] = {v: [] for v in VARIANTS}
    ratios = []
    for r in range(runs):
        order = VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS))
        for variant in order:
            results[variant].append(measure(variant, n))  # type: ignore[operator]
        ratios.append(results["otel"][-1] / results["off"][-1])
    for variant, values in results.items():
        print(
            f"{label:<14} {variant:<5} median {statistics.median(values):>8,.0f}/s   runs: "
            + ", ".join(f"{v:,.0f}" for v in values)
        )
    print(
        f"{label:<14} otel/off median {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}) over {runs} interleaved rounds"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--only", help="comma list: process,enqueue (default: both)")
    args = parser.parse_args()
    only = set((args.only or "process,enqueue").split(","))
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        f", load average {os.getloadavg()[0]:.1f}"
    )
    if "process" in only:
        compare("processing", process, args.jobs, args.runs)
    if "enqueue" in only:
        compare("single enqueue", enqueue, min(args.jobs, 3000), args.runs)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
