"""OpenTelemetry traces: a :class:`~ratchet.ports.Tracer` over the official ``opentelemetry-api``.

A built-in plugin: it answers ``ratchet_job_tracer`` when the app's ``tracing`` setting is ``"otel"``
(``Ratchet(..., tracing="otel")`` or ``ratchet worker --otel``), and imports OpenTelemetry only
then, so the core runs without it. Install it with the ``otel`` extra of ``ratchet-core`` (or
``pip install opentelemetry-api``); the
application configures the SDK and its exporter (OTLP, say), as for any instrumented library.

Each submission gets a PRODUCER span (``ratchet enqueue``, ``ratchet schedule``, ``ratchet
submit_many``, ``ratchet workflow``, ``ratchet batch``, ``ratchet replace``, ``ratchet
recurring``), a child of the caller's current span. Its W3C trace context (``traceparent`` and
``tracestate``) is stored with every job it submits. Each attempt gets a CONSUMER span
``ratchet run <target>`` whose parent is that stored context, so the trace runs from the code
that enqueued the job to every attempt, whichever process or host runs it.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from ratchet import hookimpl
from ratchet.domain.errors import ConfigurationError
from ratchet.domain.lifecycle import JobPriority
from ratchet.domain.model import MAX_TRACE_CONTEXT, ClaimedJob
from ratchet.domain.text import json_object_of
from ratchet.ports import AttemptSpan, SpanValue, SubmitSpan

if TYPE_CHECKING:
    from opentelemetry.trace import Span, TracerProvider

    from ratchet.config import RatchetConfig

#: The ``tracing`` setting this plugin answers to.
NAME = "otel"
#: The instrumentation scope of every span.
SCOPE = "ratchet"
_DESCRIPTION_CHARS = 300
#: The attribute value of each priority (an enum's ``name`` is a slow property).
_PRIORITY_NAMES = {priority: priority.name for priority in JobPriority}
#: Parsed parent contexts kept per tracer: the jobs of one submission share their stored trace
#: context, so their attempts parse it once.
_PARENT_CACHE = 1024


@hookimpl
def ratchet_job_tracer(config: RatchetConfig) -> OpenTelemetryTracer | None:
    """The OpenTelemetry tracer when ``config.tracing == "otel"``, else None."""
    return OpenTelemetryTracer() if config.tracing == NAME else None


def encode_carrier(carrier: Mapping[str, str]) -> str | None:
    """The stored form of W3C trace headers (a compact JSON object), or None when there are
    none; a ``tracestate`` that would not fit is left out (the ``traceparent`` always fits)."""
    if "traceparent" not in carrier:
        return None
    text = json.dumps(dict(carrier), separators=(",", ":"), sort_keys=True)
    if len(text) > MAX_TRACE_CONTEXT:
        text = json.dumps({"traceparent": carrier["traceparent"]}, separators=(",", ":"))
    return text


def stored_context(span: Span) -> str | None:
    """What a job stores of ``span``: its W3C ``traceparent`` (and ``tracestate``), as
    :func:`encode_carrier` writes them; None for an invalid span (no tracer provider set up)."""
    context = span.get_span_context()
    if not context.is_valid:
        return None
    traceparent = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    if context.trace_state:
        return encode_carrier(
            {"traceparent": traceparent, "tracestate": context.trace_state.to_header()}
        )
    return f'{{"traceparent":"{traceparent}"}}'


def decode_carrier(text: str | None) -> dict[str, str]:
    """The W3C trace headers of a stored trace context (empty when it is absent or unreadable:
    the attempt then starts a trace of its own)."""
    return {k: v for k, v in json_object_of(text).items() if isinstance(v, str)}


class OpenTelemetryTracer:
    """Ratchet's spans through the OpenTelemetry API (the global tracer provider by default).

    :param tracer_provider: where spans go (default: the global one, which the application
        sets up; until it does, spans are no-ops and jobs store no trace context).
    :raises ConfigurationError: ``opentelemetry-api`` is not installed.
    """

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        try:
            from opentelemetry import trace
            from opentelemetry.trace.propagation.tracecontext import (
                TraceContextTextMapPropagator,
            )
        except ImportError as exc:
            raise ConfigurationError(
                "tracing='otel' needs the OpenTelemetry API: pip install opentelemetry-api (the "
                "ratchet-core[otel] extra), and the opentelemetry-sdk with an exporter to send "
                "the spans somewhere"
            ) from exc
        from opentelemetry import context as context_api

        from ratchet import __version__

        self._trace = trace
        self._context_api = context_api
        self._consumer = trace.SpanKind.CONSUMER
        self._tracer = trace.get_tracer(SCOPE, __version__, tracer_provider=tracer_provider)
        self._propagator = TraceContextTextMapPropagator()
        self._parent = functools.lru_cache(maxsize=_PARENT_CACHE)(self._extract)

    def _extract(self, trace_context: str | None) -> Any:
        """The OpenTelemetry context a stored trace context names (an empty one without)."""
        empty = self._context_api.Context()
        return self._propagator.extract(decode_carrier(trace_context), context=empty)

    def submission(
        self, operation: str, attributes: dict[str, SpanValue]
    ) -> AbstractContextManager[SubmitSpan]:
        """A PRODUCER span ``ratchet <operation>`` around a submission (child of the current
        span); an exception leaving the block is recorded on it and sets its status."""
        return self._submission(operation, attributes)

    @contextmanager
    def _submission(self, operation: str, attributes: dict[str, SpanValue]) -> Iterator[SubmitSpan]:
        kind = self._trace.SpanKind.PRODUCER
        attrs = {"ratchet.operation": operation, **attributes}
        with self._tracer.start_as_current_span(
            f"ratchet {operation}", kind=kind, attributes=attrs
        ) as span:
            yield _Submission(span, stored_context(span))

    def attempt(self, job: ClaimedJob, node_id: str) -> AttemptSpan:
        """A CONSUMER span ``ratchet run <target>`` for one attempt, parented on the context the
        job stored at submission (a new trace without one)."""
        parent = self._parent(job.trace_context)
        attributes: dict[str, Any] = {
            "ratchet.job.id": str(job.job_id),
            "ratchet.job.target": job.target,
            "ratchet.job.attempt": job.attempt,
            "ratchet.job.epoch": job.epoch,
            "ratchet.job.priority": _PRIORITY_NAMES[job.priority],
            "ratchet.node.id": node_id,
        }
        if job.takeovers:
            attributes["ratchet.job.takeovers"] = job.takeovers
        span = self._tracer.start_span(
            f"ratchet run {job.target}",
            context=parent,
            kind=self._consumer,
            attributes=attributes,
        )
        return _Attempt(self._trace, self._context_api, span)


class _Submission:
    """:class:`~ratchet.ports.SubmitSpan` over an OpenTelemetry span."""

    __slots__ = ("_span", "trace_context")

    def __init__(self, span: Span, trace_context: str | None) -> None:
        self._span = span
        self.trace_context = trace_context

    def set_attribute(self, key: str, value: SpanValue) -> None:
        self._span.set_attribute(key, value)


class _Active:
    """Makes a context current for a block (what ``use_span`` does, without its generator)."""

    __slots__ = ("_api", "_context", "_token")

    def __init__(self, api: Any, context: Any) -> None:
        self._api = api
        self._context = context
        self._token: object = None

    def __enter__(self) -> None:
        self._token = self._api.attach(self._context)

    def __exit__(self, *exc_info: object) -> None:
        self._api.detach(self._token)


class _Attempt:
    """:class:`~ratchet.ports.AttemptSpan` over an OpenTelemetry span; ends once."""

    __slots__ = ("_context_api", "_ended", "_lock", "_span", "_trace")

    def __init__(self, trace: Any, context_api: Any, span: Span) -> None:
        self._trace = trace
        self._context_api = context_api
        self._span = span
        self._lock = threading.Lock()
        self._ended = False

    def activate(self) -> AbstractContextManager[None]:
        return _Active(self._context_api, self._trace.set_span_in_context(self._span))

    def failed(self, error_type: str, message: str, traceback: str, *, timed_out: bool) -> None:
        # The exception event of the OpenTelemetry conventions, built from the sanitised text
        # (record_exception would read the raw exception).
        self._span.add_event(
            "exception",
            attributes={
                "exception.type": error_type,
                "exception.message": message,
                "exception.stacktrace": traceback,
                "ratchet.job.timed_out": timed_out,
            },
        )
        description = f"{error_type}: {message}"[:_DESCRIPTION_CHARS]
        self._span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, description))

    def end(self, outcome: str) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
        # A success leaves the status unset, as OpenTelemetry asks of instrumentation
        # libraries; a failure set it to ERROR in failed().
        self._span.set_attribute("ratchet.job.outcome", outcome)
        self._span.end()
