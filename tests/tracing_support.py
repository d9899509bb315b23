"""OpenTelemetry for the tracing tests: an SDK tracer provider whose finished spans a test
reads, in memory in this process (:func:`listening`) or as JSON lines that a worker
process wrote (:class:`JsonLinesExporter`, :func:`read_spans`); both as :class:`Recorded`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


@dataclass(frozen=True)
class Recorded:
    """A finished span, as the assertions read it."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    kind: str
    attributes: dict[str, Any]
    status: str
    status_description: str | None
    start_ns: int
    end_ns: int

    @classmethod
    def of(cls, span: ReadableSpan) -> Recorded:
        context = span.get_span_context()
        assert context is not None
        return cls(
            span.name,
            context.trace_id,
            context.span_id,
            span.parent.span_id if span.parent is not None else None,
            span.kind.name,
            dict(span.attributes or {}),
            span.status.status_code.name,
            span.status.description,
            span.start_time or 0,
            span.end_time or 0,
        )

    def to_json(self) -> str:
        return json.dumps(self.__dict__)


def recorded(exporter: InMemorySpanExporter) -> list[Recorded]:
    """The spans ``exporter`` holds, in the order they ended."""
    return [Recorded.of(span) for span in exporter.get_finished_spans()]


def named(spans: Sequence[Recorded], name: str) -> list[Recorded]:
    """The spans called ``name``."""
    return [span for span in spans if span.name == name]


class _Listened(SimpleSpanProcessor):
    """Exports ended spans to its exporter only while a test listens (tracers obtained
    earlier keep the provider they found: their spans must not fill its memory)."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        super().__init__(exporter)
        self.on = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.on:
            super().on_end(span)


_EXPORTER = InMemorySpanExporter()
_PROCESSOR = _Listened(_EXPORTER)
_PROVIDER = TracerProvider()
_PROVIDER.add_span_processor(_PROCESSOR)


def _unset_tracer_provider() -> None:
    """Back to no global tracer provider, as at the start of a process: what
    opentelemetry-test-utils' ``reset_trace_globals`` does (the API sets a provider once
    per process and offers no way back). The tests after a tracing test then run without
    an SDK, as the rest of the suite does."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


@contextmanager
def listening() -> Iterator[InMemorySpanExporter]:
    """The spans this process ends within the block: an SDK tracer provider is the global
    one for the block's duration (the same provider each time, since tracers obtained
    while it was set keep it)."""
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider), "a tracer provider is set"
    trace.set_tracer_provider(_PROVIDER)
    _EXPORTER.clear()
    _PROCESSOR.on = True
    try:
        yield _EXPORTER
    finally:
        _PROCESSOR.on = False
        _EXPORTER.clear()
        _unset_tracer_provider()


class JsonLinesExporter(SpanExporter):
    """Appends each span to a file as one JSON line (:class:`Recorded`), as it ends."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(Recorded.of(span).to_json() + "\n" for span in spans)
        with self._lock, self._path.open("a") as out:
            out.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing to close: each export opens the file."""


def read_spans(path: Path) -> list[Recorded]:
    """The spans a :class:`JsonLinesExporter` wrote to ``path``."""
    if not path.exists():
        return []
    return [Recorded(**json.loads(line)) for line in path.read_text().splitlines()]
