"""An OpenTelemetry SDK span exporter that appends each finished span to a file as one JSON line,
so that a test can read the spans of a worker process it started."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


class JsonLinesSpanExporter(SpanExporter):
    """Appends every exported span (``ReadableSpan.to_json``) to ``path``, one line each."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(json.loads(s.to_json(indent=None))) + "\n" for s in spans)
        with self._lock, self.path.open("a", encoding="utf-8") as out:
            out.write(lines)
            out.flush()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def read_spans(path: str | Path) -> list[dict[str, Any]]:
    """The spans a :class:`JsonLinesSpanExporter` wrote (none if the file does not exist)."""
    file = Path(path)
    if not file.exists():
        return []
    return [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line]
