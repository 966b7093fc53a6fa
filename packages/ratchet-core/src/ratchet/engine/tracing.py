"""Where the engine meets an app's :class:`~ratchet.ports.Tracer` (docs/observability.md).

Submissions open a span and store its trace context with their jobs; each attempt gets a span
parented on that context. Without a tracer (the default) every helper here is a ``None`` check
and nothing more. A tracer's failure never fails a job or a submission: it is logged and the
work goes on untraced.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from ratchet.domain.errors import ConfigurationError
from ratchet.domain.model import MAX_TRACE_CONTEXT, ClaimedJob
from ratchet.domain.text import is_storable_text
from ratchet.ports import AttemptSpan, SpanValue, SubmitSpan, Tracer

log = logging.getLogger("ratchet.tracing")

#: The outcome of an attempt span whose outcome was not written: the job was canceled or taken
#: before it started, the run was fenced out, or a drain handed it back.
NOT_RECORDED = "NOT_RECORDED"


class SubmissionScope:
    """What a submission block knows of its span: the trace context its jobs store, and where
    to note an attribute learnt inside the block (nothing, without a tracer)."""

    __slots__ = ("_span", "trace_context")

    def __init__(self, span: SubmitSpan | None, trace_context: str | None) -> None:
        self._span = span
        self.trace_context = trace_context

    def note(self, key: str, value: SpanValue) -> None:
        """Add an attribute to the submission's span (if there is one)."""
        if self._span is not None:
            self._span.set_attribute(key, value)


_UNTRACED: AbstractContextManager[SubmissionScope] = nullcontext(SubmissionScope(None, None))


def submission(
    tracer: Tracer | None, operation: str, attributes: dict[str, SpanValue]
) -> AbstractContextManager[SubmissionScope]:
    """A block that submits jobs: under ``tracer`` (an app's), a span for ``operation`` (an
    exception leaving the block is recorded on it); the block's jobs store its trace context.

    :raises ConfigurationError: the tracer gave a trace context no store can hold.
    """
    if tracer is None:
        return _UNTRACED
    return _traced_submission(tracer, operation, attributes)


@contextmanager
def _traced_submission(
    tracer: Tracer, operation: str, attributes: dict[str, SpanValue]
) -> Iterator[SubmissionScope]:
    with tracer.submission(operation, attributes) as span:
        yield SubmissionScope(span, checked_trace_context(tracer, span))


def checked_trace_context(tracer: Tracer, span: SubmitSpan) -> str | None:
    """The span's trace context, after checking that every store can hold it.

    :raises ConfigurationError: it is not text, is longer than ``MAX_TRACE_CONTEXT`` characters
        or holds characters a store cannot keep.
    """
    value = span.trace_context
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_TRACE_CONTEXT or not is_storable_text(value):
        shown = repr(value) if not isinstance(value, str) else f"{len(value)} characters"
        raise ConfigurationError(
            f"the tracer {type(tracer).__qualname__} gave a trace context a job cannot store "
            f"({shown}); it must be text of at most {MAX_TRACE_CONTEXT} characters without NUL "
            "or lone surrogates: fix the tracer, or turn tracing off (tracing=None)"
        )
    return value


def start_attempt_span(tracer: Tracer, job: ClaimedJob, node_id: str) -> AttemptSpan | None:
    """The span of ``job``'s attempt on ``node_id`` (None if the tracer failed: logged)."""
    try:
        return tracer.attempt(job, node_id)
    except Exception:
        log.exception("the tracer could not start the span of job %s", job.job_id)
        return None


def record_failure(
    span: AttemptSpan, exc: BaseException, error: str, traceback: str, timed_out: bool
) -> None:
    """Record on ``span`` that its attempt failed with ``exc``, described by the sanitised
    ``error`` (``module.Class: message``) and ``traceback`` (a tracer's error is logged)."""
    _, separator, message = error.partition(": ")
    try:
        span.failed(
            type(exc).__name__, message if separator else error, traceback, timed_out=timed_out
        )
    except Exception:
        log.exception("the tracer could not record a failure")


def end_span(span: AttemptSpan, outcome: str) -> None:
    """End ``span`` with ``outcome`` (a tracer's error is logged)."""
    try:
        span.end(outcome)
    except Exception:
        log.exception("the tracer could not end a span")
