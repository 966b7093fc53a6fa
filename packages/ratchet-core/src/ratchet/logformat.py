"""Log formats of the worker (``ratchet worker --log-format text|json``), standard library only.

Every record carries the job it is about (``ratchet_job_id``, ``ratchet_attempt``,
``ratchet_node_id``: see :func:`ratchet.engine.context.install_log_record_factory`), whether it
was made inside the job's attempt or by the worker about the job (the watchdog, the completer,
fencing, takeovers). The text format shows ``[job=ID attempt=N]``; the JSON format writes one
object per line with those fields as keys (docs/observability.md, "Logs").
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from ratchet.domain.errors import ConfigurationError
from ratchet.engine.context import install_log_record_factory

#: The text format of ``ratchet worker``.
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s%(ratchet_job)s %(message)s"
#: The ``--log-format`` choices.
LOG_FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``,
    ``job_id``, ``attempt``, ``node_id`` (null when the record is about no job), ``thread``,
    ``exception`` (the formatted traceback, when there is one) and, with ``trace_ids``, the
    ``trace_id`` and ``span_id`` of the OpenTelemetry span current where the record was made.

    Making one installs the log record factory that gives records those fields.

    :param trace_ids: add the current span's ids (needs ``opentelemetry-api``).
    """

    def __init__(self, *, trace_ids: bool = False) -> None:
        super().__init__()
        install_log_record_factory()
        self._current_span: Any = None
        if trace_ids:
            try:
                from opentelemetry.trace import get_current_span
            except ImportError as exc:
                raise ConfigurationError(
                    "trace ids in log records need the OpenTelemetry API: "
                    "pip install opentelemetry-api (the ratchet-core[otel] extra)"
                ) from exc
            self._current_span = get_current_span

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "job_id": getattr(record, "ratchet_job_id", None),
            "attempt": getattr(record, "ratchet_attempt", None),
            "node_id": getattr(record, "ratchet_node_id", None),
            "thread": record.threadName,
        }
        if self._current_span is not None:
            context = self._current_span().get_span_context()
            if context.is_valid:
                document["trace_id"] = format(context.trace_id, "032x")
                document["span_id"] = format(context.span_id, "016x")
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            document["exception"] = record.exc_text
        if record.stack_info:
            document["stack"] = self.formatStack(record.stack_info)
        return json.dumps(document, default=str, ensure_ascii=False)


def worker_formatter(log_format: str, *, trace_ids: bool = False) -> logging.Formatter:
    """The formatter of ``ratchet worker --log-format``.

    :raises ValueError: ``log_format`` is not one of :data:`LOG_FORMATS`.
    """
    if log_format == "json":
        return JsonFormatter(trace_ids=trace_ids)
    if log_format == "text":
        # defaults: records made without Ratchet's record factory
        return logging.Formatter(TEXT_FORMAT, defaults={"ratchet_job": ""})
    raise ValueError(f"unknown log format {log_format!r}: use one of {', '.join(LOG_FORMATS)}")


def configure_worker_logging(
    level: str, log_format: str = "text", *, trace_ids: bool = False
) -> None:
    """Send the process's log records to stderr in ``log_format`` at ``level``, each carrying
    the job it is about (what ``ratchet worker`` does before it loads the app)."""
    handler = logging.StreamHandler()
    handler.setFormatter(worker_formatter(log_format, trace_ids=trace_ids))
    logging.basicConfig(level=level.upper(), handlers=[handler])
    install_log_record_factory()
