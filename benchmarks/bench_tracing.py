"""What tracing costs: worker throughput and single-enqueue rate with OpenTelemetry on versus off.

Run on demand::

    uv run python benchmarks/bench_tracing.py [--runs 5] [--jobs 20000]

``off``: no tracer (the default). ``otel``: the OpenTelemetry tracer on the SDK's
``TracerProvider`` (its default sampler: every trace) with a ``BatchSpanProcessor`` (its defaults)
feeding an exporter that drops the spans; ``otel10``: the same with a parent-based sampler that
keeps one trace in ten (``ParentBased(TraceIdRatioBased(0.1))``), so what is measured is
Ratchet's instrumentation and the SDK, not a collector. The jobs are submitted in submissions of
20 (traced, each stores its submission's trace context and each attempt span is parented on
it), so ``otel10`` keeps about a tenth of the attempts. One worker in this process (the settings
of ``bench_sqlite.py``) runs ``--jobs`` no-op jobs on a fresh SQLite file per run; the variants
alternate within each round, in reverse order every other round, so a change in the machine's
load hits them alike. Printed: jobs/s per variant (median and every run), the per-round ratio
of each traced variant to ``off`` (median, min, max), this process's CPU time per job, the full
garbage collections during each run and the share of the spans each traced run kept.
"""

from __future__ import annotations

import argparse
import gc
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
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from ratchet import Ratchet
from ratchet.domain.model import ClaimedJob
from ratchet.exporters.otel import OpenTelemetryTracer

VARIANTS = ("off", "otel", "otel10")
TRACED = VARIANTS[1:]
#: This process's CPU time per job while the worker ran them (microseconds), by variant: on a
#: loaded machine it moves far less than the wall-clock rate.
CPU: dict[str, list[float]] = {v: [] for v in VARIANTS}
#: Full (oldest-generation) garbage collections while the worker ran, by variant.
FULL_GC: dict[str, list[int]] = {v: [] for v in VARIANTS}
#: The share of the spans the exporter received, by traced variant.
SAMPLED: dict[str, list[float]] = {v: [] for v in TRACED}
#: Jobs per submission. A sampler decides once per trace and each submission is a trace, so
#: with few large submissions ``otel10`` would record all of the jobs or none; with 20 a run of
#: 20,000 jobs has 1,000 traces and records close to a tenth of them.
PER_SUBMISSION = 20


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
    sampler = ParentBased(TraceIdRatioBased(0.1)) if variant == "otel10" else None
    provider = TracerProvider(sampler=sampler) if sampler is not None else TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    app.enable_tracing(OpenTelemetryTracer(tracer_provider=provider))
    return app, provider, exporter


def process(variant: str, n: int) -> float:
    """Jobs/s of one worker running ``n`` no-op jobs submitted beforehand."""
    with tempfile.TemporaryDirectory(prefix="ratchet-bench-") as workdir:
        app, provider, exporter = make_app(workdir, variant)
        submissions = submit(app, n)
        gc.collect()
        collections = [g["collections"] for g in gc.get_stats()]
        cpu = time.process_time()
        rate = drain(app, n)
        CPU[variant].append((time.process_time() - cpu) / n * 1e6)
        FULL_GC[variant].append(gc.get_stats()[2]["collections"] - collections[2])
        if provider is not None:
            provider.shutdown()  # flushes: every attempt (and submission) made a span
            spans = n + submissions
            if variant == "otel":
                assert exporter.spans == spans, exporter.spans
            else:  # a submission and its attempts share a trace: sampled or not together
                assert exporter.spans < spans, exporter.spans
            SAMPLED[variant].append(exporter.spans / spans)
        app.close()
        return rate


def submit(app: Ratchet, n: int) -> int:
    """Submit ``n`` no-op jobs in submissions of :data:`PER_SUBMISSION`; returns how many
    submissions that made (traced, each is a trace: a sampler decides per submission)."""
    builders = [app.enqueue(bench_jobs.noop, i) for i in range(n)]
    for chunk in range(0, n, PER_SUBMISSION):
        app.submit_many(builders[chunk : chunk + PER_SUBMISSION])
    return -(-n // PER_SUBMISSION)


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


def span_cost(n: int) -> None:
    """CPU microseconds the tracer adds to one attempt (start, activate, end) and to one
    submission (span, context capture), on the SDK with a batch processor: what tracing adds to
    a job whatever the database, measured without a worker."""
    for sampling, sampler in (
        ("every trace", None),
        ("1 in 10", ParentBased(TraceIdRatioBased(0.1))),
    ):
        provider = TracerProvider(sampler=sampler) if sampler is not None else TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(DropSpans()))
        _span_cost(OpenTelemetryTracer(tracer_provider=provider), sampling, n)
        provider.shutdown()


def _span_cost(tracer: OpenTelemetryTracer, sampling: str, n: int) -> None:
    from ratchet.testing import FakeClock
    from ratchet.testing.store_contract import new_job

    with tracer.submission("enqueue", {"ratchet.job.count": 1}) as span:
        context = span.trace_context
    fresh = new_job(FakeClock(), trace_context=context)
    job = ClaimedJob(
        fresh.job_id, 1, 1, fresh.target, fresh.payload, fresh.priority, 0, fresh.backoff,
        fresh.backoff_delay, None, fresh.scheduled_time, fresh.created_at,
        trace_context=context,
    )  # fmt: skip
    for label, one in (
        ("attempt span", lambda: _attempt(tracer, job)),
        ("submit span", lambda: _submit(tracer)),
    ):
        best = []
        for _ in range(5):
            start = time.process_time()
            for _ in range(n):
                one()
            best.append((time.process_time() - start) / n * 1e6)
        print(f"{label:<14} {sampling:<11} CPU median {statistics.median(best):.1f} us (runs: "
              + ", ".join(f"{b:.1f}" for b in best) + ")")  # fmt: skip


def _attempt(tracer: OpenTelemetryTracer, job: ClaimedJob) -> None:
    span = tracer.attempt(job, "node-1")
    with span.activate():
        pass
    span.end("SUCCEEDED")


def _submit(tracer: OpenTelemetryTracer) -> None:
    with tracer.submission("enqueue", {"ratchet.job.count": 1}):
        pass


def compare(label: str, measure: object, n: int, runs: int) -> None:
    results: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(runs):
        order = VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS))
        for variant in order:
            results[variant].append(measure(variant, n))  # type: ignore[operator]
    for variant, values in results.items():
        print(
            f"{label:<14} {variant:<6} median {statistics.median(values):>8,.0f}/s   runs: "
            + ", ".join(f"{v:,.0f}" for v in values)
        )
    for variant in TRACED:
        print_ratio(label, variant, results[variant], results["off"], f"over {runs} rounds")
    if label == "processing":
        for variant, values in CPU.items():
            print(
                f"{'  CPU per job':<14} {variant:<6} median {statistics.median(values):>8,.0f} us"
                "  runs: " + ", ".join(f"{v:,.0f}" for v in values)
            )
        for variant in TRACED:
            print_ratio("  CPU per job", variant, CPU[variant], CPU["off"], "")
        for variant, counts in FULL_GC.items():
            print(f"{'  full GCs':<14} {variant:<6} runs: " + ", ".join(map(str, counts)))
        for variant, shares in SAMPLED.items():
            print(f"{'  spans kept':<14} {variant:<6} runs: "
                  + ", ".join(f"{share:.1%}" for share in shares))  # fmt: skip


def print_ratio(label: str, variant: str, traced: list[float], off: list[float], tail: str) -> None:
    ratios = [t / o for t, o in zip(traced, off, strict=True)]
    print(
        f"{label:<14} {variant}/off median {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}) {tail}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--only", help="comma list: process,enqueue,spans (default: all)")
    args = parser.parse_args()
    only = set((args.only or "process,enqueue,spans").split(","))
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        f", load average {os.getloadavg()[0]:.1f}"
    )
    if "process" in only:
        compare("processing", process, args.jobs, args.runs)
    if "enqueue" in only:
        compare("single enqueue", enqueue, min(args.jobs, 3000), args.runs)
    if "spans" in only:
        span_cost(5000)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
