"""Handlers for the tracing tests' worker processes, with an SDK tracer provider whose spans
go, one JSON line each, to the file named by ``$TRACED_SPANS_FILE``
(``tracing_support.JsonLinesExporter``).

Each handler works inside a span of its own (``handler work``), so a test sees what the
worker made current while the handler ran. A payload's ``fail_attempts`` makes attempts up
to that number fail with a retryable error.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from tracing_support import JsonLinesExporter

from fairsched.errors import RetryableError
from fairsched.worker.app import App, Job

_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(Path(os.environ["TRACED_SPANS_FILE"]))))
trace.set_tracer_provider(_provider)
tracer = trace.get_tracer(__name__)

app = App()


@app.handler("traced")
def work(job: Job) -> None:
    with tracer.start_as_current_span("handler work"):
        if job.payload.get("fail_attempts", 0) >= job.attempt:
            raise RetryableError("not yet")


@app.handler("traced_async")
async def work_async(job: Job) -> None:
    with tracer.start_as_current_span("handler work"):
        await asyncio.sleep(0)
