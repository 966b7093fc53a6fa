"""The OpenTelemetry tracer in one process (the SDK's in-memory exporter): timeouts, recurring
occurrences, the stored form of the trace context, and the core without OpenTelemetry."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import weakref
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import recurring_jobs
import sample_jobs
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from timeout_harness import running_worker, wait_for

from ratchet import Ratchet
from ratchet.domain.model import MAX_TRACE_CONTEXT, ClaimedJob
from ratchet.engine.running import Attempt
from ratchet.exporters.otel import (
    OpenTelemetryTracer,
    decode_carrier,
    encode_carrier,
    stored_context,
)
from ratchet.ports import AttemptSpan
from ratchet.testing import FakeClock


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer(exporter: InMemorySpanExporter) -> OpenTelemetryTracer:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OpenTelemetryTracer(tracer_provider=provider)


def spans(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


@pytest.fixture
def app(sqlite_url: str, tracer: OpenTelemetryTracer) -> Iterator[Ratchet]:
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs", "timeout_jobs", "recurring_jobs"])
    app.enable_tracing(tracer)
    yield app
    app.close()


def sdk_spans_started(
    tracer: OpenTelemetryTracer, monkeypatch: pytest.MonkeyPatch
) -> list[Callable[[], object]]:
    """Weak references to the SDK span of every attempt ``tracer`` starts from now on."""
    started: list[Callable[[], object]] = []
    attempt = tracer.attempt

    def recording(job: ClaimedJob, node_id: str) -> AttemptSpan:
        span = attempt(job, node_id)
        started.append(weakref.ref(span._span))  # type: ignore[attr-defined]
        return span

    monkeypatch.setattr(tracer, "attempt", recording)
    return started


def test_a_timed_out_attempt_ends_its_span_at_the_deadline(
    app: Ratchet,
    tracer: OpenTelemetryTracer,
    exporter: InMemorySpanExporter,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import timeout_jobs as tj

    started = sdk_spans_started(tracer, monkeypatch)
    with running_worker(app) as worker:
        handle = (
            app.enqueue(tj.sleep_in_c, str(tmp_path / "log"), 1.5)
            .with_timeout(timedelta(milliseconds=300))
            .submit()
        )
        wait_for(lambda: spans(exporter, "ratchet run"), 10, "the attempt's span to end")
        ended_while_running = worker.stats.zombies_active + len(worker.slots.attempts())
        wait_for(lambda: worker.stats.zombies_active == 0, 10, "the zombie call to return")
        # The call's thread lets go of it as it returns; the watchdog has let go already.
        wait_for(lambda: started[0]() is None, 10, "the ended span to be let go")
    [span] = spans(exporter, "ratchet run")
    assert ended_while_running >= 1, "the span ended at the deadline, not when the call returned"
    assert span.attributes["ratchet.job.id"] == str(handle.id)
    assert span.attributes["ratchet.job.outcome"] == "TIMED_OUT"
    assert span.status.status_code is StatusCode.ERROR
    [event] = span.events
    assert str(event.attributes["exception.type"]).endswith("JobTimeoutError")
    assert event.attributes["ratchet.job.timed_out"] is True


def test_an_ended_attempt_span_is_let_go_while_the_attempt_lives_on(
    app: Ratchet,
    tracer: OpenTelemetryTracer,
    exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A finished attempt can outlive its run (the watchdog's heap keeps one whose later steps
    were due until it sweeps them, about a thousand); its ended span must not stay that long
    (it would reach the oldest GC generation)."""
    started = sdk_spans_started(tracer, monkeypatch)
    app.submit_many([app.enqueue(sample_jobs.record, i).with_priority(i) for i in range(3)])
    app.enqueue(sample_jobs.fail_always, "boom").with_max_retries(0).submit()
    worker = app.worker()
    attempts: list[Attempt] = []
    begin = worker.watchdog.begin

    def kept(job: ClaimedJob, started_at: datetime) -> Attempt:
        attempts.append(begin(job, started_at))
        return attempts[-1]

    monkeypatch.setattr(worker.watchdog, "begin", kept)
    worker.record([o for o in (worker.execute(job) for job in worker.poll_once()) if o])
    assert len(attempts) == 4 and all(a.finished for a in attempts)
    runs = spans(exporter, "ratchet run")
    assert sorted(str(run.attributes["ratchet.job.priority"]) for run in runs) == [  # type: ignore[index]
        "LOW",
        "LOWEST",
        "NORMAL",
        "NORMAL",
    ]
    assert [ref() for ref in started] == [None] * 4


def test_a_failed_attempt_records_only_the_sanitised_error(
    app: Ratchet, exporter: InMemorySpanExporter
) -> None:
    secret = "postgresql://shop:hunter2@db/orders password=s3cr3t"
    handle = app.enqueue(sample_jobs.fail_always, secret).with_max_retries(0).submit()
    assert app.worker().run_due() == 1
    assert handle.status().value == "FAILED"
    [span] = spans(exporter, "ratchet run")
    [event] = span.events
    recorded = " ".join(str(v) for v in event.attributes.values()) + str(span.status.description)
    assert event.attributes["exception.type"] == "RuntimeError"
    assert "fail_always" in str(event.attributes["exception.stacktrace"])
    assert "hunter2" not in recorded and "s3cr3t" not in recorded, recorded


def test_each_recurring_occurrence_is_a_trace_of_its_own(
    sqlite_url: str, tracer: OpenTelemetryTracer, exporter: InMemorySpanExporter
) -> None:
    clock = FakeClock()
    app = Ratchet(sqlite_url, allowed_modules=["recurring_jobs"], clock=clock, tracing=None)
    try:
        app.enable_tracing(tracer)
        master = app.schedule_recurring("0 * * * * ?", "UTC", recurring_jobs.heartbeat).submit()
        clock.advance(timedelta(minutes=2))
        fires = app.materialize_recurring("node-1")
        assert len(fires) >= 1
        roots = spans(exporter, "ratchet recurring")
        assert len(roots) == len(fires)
        assert all(r.parent is None for r in roots), "no caller span: each a root"
        assert len({r.context.trace_id for r in roots}) == len(roots)
        assert {r.attributes["ratchet.recurring.id"] for r in roots} == {str(master.id)}
        worker = app.worker()
        worker.record([worker.execute(job) for job in worker.poll_once()])
        attempts = spans(exporter, "ratchet run")
        assert sorted(a.parent.span_id for a in attempts) == sorted(  # type: ignore[union-attr]
            r.context.span_id for r in roots
        )
    finally:
        app.close()


def test_a_job_submitted_untraced_runs_in_a_trace_of_its_own(
    app: Ratchet, tracer: OpenTelemetryTracer, exporter: InMemorySpanExporter
) -> None:
    app.tracer = None  # submitted without tracing: the job stores no context
    handle = app.enqueue(sample_jobs.record, 1).submit()
    app.enable_tracing(tracer)
    worker = app.worker()
    worker.record([worker.execute(job) for job in worker.poll_once()])
    [span] = spans(exporter, "ratchet run")
    assert span.parent is None and span.attributes["ratchet.job.id"] == str(handle.id)
    assert span.attributes["ratchet.job.outcome"] == "SUCCEEDED"


def test_an_unreadable_stored_context_reads_as_none() -> None:
    assert decode_carrier(None) == {} and decode_carrier("not json") == {}
    assert decode_carrier('["a"]') == {} and decode_carrier('{"traceparent": 7}') == {}


header = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=700)


@given(
    traceparent=st.text(st.sampled_from("0123456789abcdef-"), min_size=1, max_size=55),
    tracestate=header,
)
def test_the_stored_context_always_fits_and_keeps_the_traceparent(
    traceparent: str, tracestate: str
) -> None:
    carrier = {"traceparent": traceparent, "tracestate": tracestate}
    text = encode_carrier(carrier)
    assert text is not None and len(text) <= MAX_TRACE_CONTEXT
    decoded = decode_carrier(text)
    assert decoded["traceparent"] == traceparent
    fits = len(json.dumps(carrier, separators=(",", ":"))) <= MAX_TRACE_CONTEXT
    assert decoded == (carrier if fits else {"traceparent": traceparent})
    assert encode_carrier({}) is None, "no traceparent: nothing to store"


@given(
    flags=st.sampled_from([0, 1, 2, 3]),
    state=st.lists(
        st.tuples(
            st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True),
            st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True),
        ),
        max_size=3,
        unique_by=lambda kv: kv[0],
    ),
)
def test_the_stored_context_is_what_the_w3c_propagator_injects(
    flags: int, state: list[tuple[str, str]]
) -> None:
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    context = trace.SpanContext(
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
        is_remote=False,
        trace_flags=trace.TraceFlags(flags),
        trace_state=trace.TraceState(state),
    )
    span = trace.NonRecordingSpan(context)
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(span))
    assert stored_context(span) == encode_carrier(carrier)
    assert stored_context(trace.INVALID_SPAN) is None


def test_jobs_of_one_submission_share_one_parsed_parent(
    tracer: OpenTelemetryTracer, exporter: InMemorySpanExporter, sqlite_url: str
) -> None:
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"])
    app.enable_tracing(tracer)
    try:
        app.submit_many([app.enqueue(sample_jobs.record, i) for i in range(3)])
        worker = app.worker()
        worker.record([worker.execute(job) for job in worker.poll_once()])
    finally:
        app.close()
    [submit] = spans(exporter, "ratchet submit_many")
    runs = spans(exporter, "ratchet run")
    assert len(runs) == 3
    assert {run.parent.span_id for run in runs if run.parent} == {submit.context.span_id}
    assert {run.context.trace_id for run in runs} == {submit.context.trace_id}
    assert len({run.context.span_id for run in runs}) == 3, "each attempt has its own span"


def test_an_enqueue_many_is_one_submission_span_that_its_jobs_runs_follow(
    tracer: OpenTelemetryTracer, exporter: InMemorySpanExporter, sqlite_url: str
) -> None:
    app = Ratchet(sqlite_url, allowed_modules=["sample_jobs"])
    app.enable_tracing(tracer)
    try:
        app.enqueue_many(sample_jobs.record, [(i,) for i in range(3)])
        worker = app.worker()
        worker.record([worker.execute(job) for job in worker.poll_once()])
    finally:
        app.close()
    [submit] = spans(exporter, "ratchet submit_many")
    assert submit.attributes is not None
    assert submit.attributes["ratchet.job.count"] == 3
    assert submit.attributes["ratchet.job.target"] == "sample_jobs:record"
    runs = spans(exporter, "ratchet run")
    assert len(runs) == 3
    assert {run.parent.span_id for run in runs if run.parent} == {submit.context.span_id}


BLOCK_OTEL = textwrap.dedent(
    """
    import sys, tempfile

    class NoOpenTelemetry:
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ImportError(f"{name} is not installed here")
            return None

    sys.meta_path.insert(0, NoOpenTelemetry())
    sys.path.insert(0, sys.argv[1])
    import sample_jobs
    from ratchet import ConfigurationError, Ratchet

    url = f"sqlite:///{tempfile.mkdtemp()}/jobs.db"
    app = Ratchet(url, allowed_modules=["sample_jobs"])
    handle = app.enqueue(sample_jobs.record, 5).submit()
    worker = app.worker()
    worker.record([worker.execute(job) for job in worker.poll_once()])
    assert handle.result() == 5
    assert not [m for m in sys.modules if m.startswith("opentelemetry")]
    try:
        Ratchet(url, allowed_modules=["sample_jobs"], tracing="otel")
    except ConfigurationError as exc:
        print(exc)
    app.close()
    """
)


def test_the_core_runs_without_opentelemetry_and_says_what_to_install() -> None:
    support = Path(sample_jobs.__file__).parent
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_OTEL, str(support)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (
        "tracing='otel' needs the OpenTelemetry API: pip install opentelemetry-api" in done.stdout
    )
