"""An app module for traced worker subprocesses: ``ratchet worker otel_app:app --otel``.

It sets up the OpenTelemetry SDK as an application would, with an exporter that appends each
span to the file named by ``RATCHET_TEST_SPANS`` (one JSON object per line); the database URL
comes from ``RATCHET_TEST_URL``. Tracing itself is turned on by ``--otel``.
"""

from __future__ import annotations

import os

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from span_files import JsonLinesSpanExporter

from ratchet import Ratchet

provider = TracerProvider(resource=Resource.create({"service.name": "ratchet-test-worker"}))
provider.add_span_processor(
    SimpleSpanProcessor(JsonLinesSpanExporter(os.environ["RATCHET_TEST_SPANS"]))
)
trace.set_tracer_provider(provider)

app = Ratchet(os.environ["RATCHET_TEST_URL"], allowed_modules=["sample_jobs"])
