"""Traces across processes: jobs submitted here under a span, run by a real ``ratchet worker
--otel`` process whose spans (OpenTelemetry SDK, a file exporter) this test reads back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import procs
import pytest
import sample_jobs
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from span_files import read_spans

from ratchet import JobStatus, Ratchet
from ratchet.exporters.otel import OpenTelemetryTracer


@dataclass
class TracedRun:
    """What the test process submitted and saw, and what the worker process exported."""

    request: ReadableSpan
    submits: list[ReadableSpan]
    attempts: list[dict[str, Any]]
    jobs: dict[str, Any]
    app: Ratchet
    log_lines: list[dict[str, Any]]


def trace_hex(span: ReadableSpan) -> str:
    """The trace id of ``span`` as the SDK writes it in JSON."""
    return f"0x{span.context.trace_id:032x}"


def span_hex(span: ReadableSpan) -> str:
    """The span id of ``span`` as the SDK writes it in JSON."""
    return f"0x{span.context.span_id:016x}"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TracedRun]:
    tmp = tmp_path_factory.mktemp("traced")
    url = f"sqlite:///{tmp / 'jobs.db'}"
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = Ratchet(url, allowed_modules=["sample_jobs"])
    app.enable_tracing(OpenTelemetryTracer(tracer_provider=provider))
    with provider.get_tracer("tests").start_as_current_span("request"):
        jobs = {
            "ok": app.enqueue(sample_jobs.record, 1).submit(),
            "bad": app.enqueue(sample_jobs.fail_always, "boom").submit(),
            "chain": app.enqueue(sample_jobs.record, "head")
            .then(sample_jobs.record, "step")
            .submit(),
            "batch": app.enqueue_batch("traced").for_each([1, 2], sample_jobs.record).submit(),
        }
    spans_file = tmp / "spans.jsonl"
    log = tmp / "worker.log"
    worker = procs.start_worker(
        url,
        "--otel",
        "--log-format",
        "json",
        app="otel_app:app",
        log=log,
        RATCHET_TEST_SPANS=str(spans_file),
    )
    try:
        settled = procs.wait_for(
            lambda: all(j.status.is_terminal for j in app.list_jobs(limit=100)), timeout=300
        )
        assert settled, log.read_text()
    finally:
        [code] = procs.stop([worker])
    assert code == 0, log.read_text()
    finished = list(exporter.get_finished_spans())
    [request] = [s for s in finished if s.name == "request"]
    yield TracedRun(
        request=request,
        submits=[s for s in finished if s.name.startswith("ratchet ")],
        attempts=[s for s in read_spans(spans_file) if s["name"].startswith("ratchet run ")],
        jobs=jobs,
        app=app,
        log_lines=[json.loads(line) for line in log.read_text().splitlines() if line.strip()],
    )
    app.close()


def submit_span(run: TracedRun, operation: str, **attributes: Any) -> ReadableSpan:
    [span] = [
        s
        for s in run.submits
        if s.name == f"ratchet {operation}"
        and all(s.attributes.get(k) == v for k, v in attributes.items())
    ]
    return span


def attempt_spans(run: TracedRun, job_id: object) -> list[dict[str, Any]]:
    return [s for s in run.attempts if s["attributes"]["ratchet.job.id"] == str(job_id)]


def test_the_attempt_in_the_worker_process_is_a_child_of_the_submit_span(run: TracedRun) -> None:
    ok = run.jobs["ok"]
    submit = submit_span(run, "enqueue", **{"ratchet.job.id": str(ok.id)})
    assert submit.context.trace_id == run.request.context.trace_id
    assert submit.parent is not None and submit.parent.span_id == run.request.context.span_id
    assert submit.attributes["ratchet.job.target"] == "sample_jobs:record"
    [attempt] = attempt_spans(run, ok.id)
    assert attempt["resource"]["attributes"]["service.name"] == "ratchet-test-worker"
    assert attempt["context"]["trace_id"] == trace_hex(submit)
    assert attempt["parent_id"] == span_hex(submit)
    attributes = attempt["attributes"]
    assert attributes["ratchet.job.target"] == "sample_jobs:record"
    assert (attributes["ratchet.job.attempt"], attributes["ratchet.job.outcome"]) == (
        1,
        "SUCCEEDED",
    )
    [history] = run.app.attempts(ok.id)
    assert attributes["ratchet.node.id"] == history.node_id, "the worker's node"
    assert attempt["kind"] == "SpanKind.CONSUMER"
    assert attempt["status"]["status_code"] == "UNSET", "success leaves the status unset"
    assert attempt["events"] == []
    assert ok.status() is JobStatus.SUCCEEDED


def test_a_failed_attempt_records_its_exception(run: TracedRun) -> None:
    bad = run.jobs["bad"]
    submit = submit_span(run, "enqueue", **{"ratchet.job.id": str(bad.id)})
    [attempt] = attempt_spans(run, bad.id)
    assert attempt["parent_id"] == span_hex(submit)
    assert attempt["attributes"]["ratchet.job.outcome"] == "DEAD"
    assert attempt["status"]["status_code"] == "ERROR"
    assert attempt["status"]["description"] == "RuntimeError: boom"
    [event] = attempt["events"]
    assert event["name"] == "exception"
    assert event["attributes"]["exception.type"] == "RuntimeError"
    assert event["attributes"]["exception.message"] == "boom"
    assert "fail_always" in event["attributes"]["exception.stacktrace"]
    # The worker's JSON log line about the failure leads to the attempt's span.
    [line] = [x for x in run.log_lines if x["job_id"] == str(bad.id) and x["level"] == "WARNING"]
    assert (line["attempt"], line["trace_id"], line["span_id"]) == (
        1,
        attempt["context"]["trace_id"].removeprefix("0x"),
        attempt["context"]["span_id"].removeprefix("0x"),
    )


def test_workflow_and_batch_children_join_the_trace_of_their_submission(run: TracedRun) -> None:
    trace_id = trace_hex(run.request)
    workflow = submit_span(run, "workflow", **{"ratchet.job.id": str(run.jobs["chain"].id)})
    batch = submit_span(run, "batch", **{"ratchet.batch.id": str(run.jobs["batch"].id)})
    assert workflow.attributes["ratchet.job.count"] == 2
    assert batch.attributes["ratchet.job.count"] == 2
    by_parent: dict[str, list[Any]] = {}
    for attempt in run.attempts:
        assert attempt["context"]["trace_id"] == trace_id, "every attempt is in the request's trace"
        by_parent.setdefault(attempt["parent_id"], []).append(attempt["attributes"])
    chain = by_parent[span_hex(workflow)]
    assert len(chain) == 2, "the head and the step it released later"
    assert str(run.jobs["chain"].id) in {a["ratchet.job.id"] for a in chain}
    children = by_parent[span_hex(batch)]
    assert [a["ratchet.job.outcome"] for a in children] == ["SUCCEEDED", "SUCCEEDED"]
    assert len(run.attempts) == 6, "one attempt per job that ran: ok, bad, 2 chain, 2 children"
