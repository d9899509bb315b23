"""OpenTelemetry spans for enqueue, claim, run and settle (complete, fail, release).

With the ``otel`` extra installed (``opentelemetry-api``) every operation is wrapped in a
span of the application's tracer provider; without it each helper here is a no-op and
nothing of OpenTelemetry is imported (the import is tried once, at the first operation).
Without an SDK configured nothing is emitted, and nothing is built either unless a trace
came from elsewhere (a propagated context, or one a job stored): that one is carried on,
through the enqueue span into the job and from the job into its handler.

The trace context travels with the job: :func:`carrier` is what enqueue stores (the
enqueue span's context, as the application's propagators inject it), a claim returns it
in :attr:`Lease.trace_context <fairsched.engine.lease.Lease.trace_context>`, and the
attempt's claim, run and settle spans are its children, so one trace runs from the
request that enqueued a job through every attempt of it. A job enqueued outside a trace
gets the claim span's context instead: each attempt is then a trace of its own.

Spans carry the queue, the tenant, the job id and the attempt (``messaging.*`` names where
they fit), never the payload or an error's text. See ``docs/tracing.md``.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

    from fairsched.engine.lease import Lease

TRACE_CONTEXT_MAX_BYTES = 4096
"""The most bytes of JSON text a job's stored trace context holds (the database refuses
more): beyond, only ``traceparent`` and ``tracestate`` are kept."""

_W3C_FIELDS = ("traceparent", "tracestate")

LOST = "lost"
"""The outcome of a settle whose lease no longer held."""

OPERATION_TYPES = {
    "enqueue": "send",
    "claim": "receive",
    "run": "process",
    "complete": "settle",
    "fail": "settle",
    "release": "settle",
}
"""Each operation's ``messaging.operation.type``."""


class _Otel(NamedTuple):
    tracer: Tracer
    api: Any  # the opentelemetry.trace module
    propagate: Any  # the opentelemetry.propagate module
    context: Any  # the opentelemetry.context module


@functools.cache
def _otel() -> _Otel | None:
    """The tracer and the API, or ``None`` when OpenTelemetry is not installed."""
    try:
        from opentelemetry import context, propagate, trace
    except ImportError:
        return None
    from fairsched import __version__

    return _Otel(trace.get_tracer("fairsched", __version__), trace, propagate, context)


def _recording(otel: _Otel) -> bool:
    """Whether the application set a tracer provider (an SDK): else no span can be recorded."""
    provider = otel.api.get_tracer_provider()
    return not isinstance(provider, otel.api.ProxyTracerProvider | otel.api.NoOpTracerProvider)


def _in_trace(otel: _Otel) -> bool:
    """Whether a span context is active (without an SDK: one that came from elsewhere)."""
    return bool(otel.api.get_current_span().get_span_context().is_valid)


def _attributes(operation: str, queue: str, more: Mapping[str, object]) -> dict[str, Any]:
    """An operation's attributes, with those of ``more`` that are not ``None``."""
    attributes: dict[str, Any] = {
        "messaging.system": "fairsched",
        "messaging.operation.name": operation,
        "messaging.operation.type": OPERATION_TYPES[operation],
        "messaging.destination.name": queue,
    }
    attributes.update((name, value) for name, value in more.items() if value is not None)
    return attributes


def _lease_attributes(operation: str, lease: Lease) -> dict[str, Any]:
    more = {
        "messaging.message.id": str(lease.id),
        "messaging.client.id": lease.owner,
        "fairsched.tenant": lease.tenant,
        "fairsched.job.attempt": lease.attempt,
    }
    return _attributes(operation, lease.queue, more)


def _failed(otel: _Otel, span: Span, error: BaseException | str) -> None:
    """Mark ``span`` failed with the error's qualified class name (or ``error`` itself, a
    code), never its text: the code the attempt records (:func:`fairsched.engine.retry.error_code`)."""
    if isinstance(error, str):
        kind = error
    else:
        cls = type(error)
        kind = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    span.set_attribute("error.type", kind)
    span.set_status(otel.api.Status(otel.api.StatusCode.ERROR, kind))


def _parent(otel: _Otel, lease: Lease) -> Any:
    """The context an attempt's spans continue: the lease's, else the current one."""
    return otel.propagate.extract(lease.trace_context) if lease.trace_context else None


def _ignore(ids: Sequence[int]) -> None:
    """What :func:`enqueue_span` yields without OpenTelemetry."""


@contextmanager
def enqueue_span(queue: str, tenants: Sequence[object]) -> Iterator[Callable[[Sequence[int]], None]]:
    """Around an enqueue of jobs for ``tenants`` on ``queue`` (one span for the batch; its
    context is what the jobs store): call the yielded function with the ids enqueued."""
    otel = _otel()
    if otel is None or not (_recording(otel) or _in_trace(otel)):
        yield _ignore
        return
    distinct = {tenant for tenant in tenants if isinstance(tenant, str)}  # not validated yet
    more = {
        "fairsched.tenant": distinct.pop() if len(distinct) == 1 else None,
        "messaging.batch.message_count": len(tenants) if len(tenants) != 1 else None,
    }
    with otel.tracer.start_as_current_span(
        f"enqueue {queue}",
        kind=otel.api.SpanKind.PRODUCER,
        attributes=_attributes("enqueue", queue, more),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:

        def enqueued(ids: Sequence[int]) -> None:
            if len(ids) == 1:
                span.set_attribute("messaging.message.id", str(ids[0]))

        try:
            yield enqueued
        except BaseException as e:
            _failed(otel, span, e)
            raise


def carrier() -> dict[str, str] | None:
    """The current trace context as the application's propagators inject it, for a job
    to store; ``None`` when no span context is active (or OpenTelemetry is absent).
    Bounded by :data:`TRACE_CONTEXT_MAX_BYTES`."""
    otel = _otel()
    if otel is None or not _in_trace(otel):
        return None
    fields: dict[str, str] = {}
    otel.propagate.inject(fields)
    return _bounded(fields)


def _bounded(fields: dict[str, str]) -> dict[str, str] | None:
    """``fields`` when their JSON text fits, else the W3C fields alone when they do."""
    for kept in (fields, {k: v for k, v in fields.items() if k in _W3C_FIELDS}):
        # The separators of PostgreSQL's jsonb text, which the database's check measures.
        if kept and len(json.dumps(kept, ensure_ascii=False).encode()) <= TRACE_CONTEXT_MAX_BYTES:
            return kept
    return None


@contextmanager
def claim_spans(queue: str) -> Iterator[Callable[[list[Lease]], list[Lease]]]:
    """Around a claim on ``queue``: pass the yielded function the leases claimed, and use the
    leases it returns. Each leased job gets a claim span (from the claim's start to its
    end) in its stored trace; a job that stored none gets the claim span's context, which
    its attempt's other spans then continue. A claim that leases nothing emits no span."""
    otel = _otel()
    start = time.time_ns()
    if otel is None or not _recording(otel):
        yield _same
        return
    yield lambda leases: [_claim_span(otel, lease, start) for lease in leases]


def _same(leases: list[Lease]) -> list[Lease]:
    return leases


def _claim_span(otel: _Otel, lease: Lease, start: int) -> Lease:
    span = otel.tracer.start_span(
        f"claim {lease.queue}",
        context=_parent(otel, lease),
        kind=otel.api.SpanKind.CLIENT,
        attributes=_lease_attributes("claim", lease),
        start_time=start,
    )
    span.end()
    if lease.trace_context is not None or not span.get_span_context().is_valid:
        return lease
    fields: dict[str, str] = {}
    otel.propagate.inject(fields, context=otel.api.set_span_in_context(span))
    return lease._replace(trace_context=fields)


@contextmanager
def run_span(lease: Lease) -> Iterator[None]:
    """Around a handler's run of ``lease``'s job: the current span while the handler runs,
    in the job's stored context (its baggage too), so what the handler traces or enqueues
    joins the job's trace; failed when the handler raises."""
    otel = _otel()
    if otel is None or (lease.trace_context is None and not _recording(otel)):
        yield
        return
    parent = _parent(otel, lease)
    token = otel.context.attach(parent) if parent is not None else None
    try:
        with otel.tracer.start_as_current_span(
            f"run {lease.queue}",
            kind=otel.api.SpanKind.CONSUMER,
            attributes=_lease_attributes("run", lease),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield
            except BaseException as e:
                _failed(otel, span, e)
                raise
    finally:
        if token is not None:
            otel.context.detach(token)


@contextmanager
def settle_spans(
    operation: str, leases: Sequence[Lease], codes: Mapping[int, str] | None = None
) -> Iterator[dict[int, str]]:
    """Around a complete, fail or release (``operation``) of ``leases``: fill the yielded
    dict with each job id's outcome (its new status, or :data:`LOST`). Each job gets a span
    in its attempt's trace; ``codes``: the error code of each failed attempt."""
    outcomes: dict[int, str] = {}
    otel = _otel()
    if otel is None or not _recording(otel):
        yield outcomes
        return
    start = time.time_ns()
    error: BaseException | None = None
    try:
        yield outcomes
    except BaseException as e:
        error = e
        raise
    finally:
        end = time.time_ns()
        for lease in leases:
            _settle_span(otel, operation, lease, (start, end), outcomes.get(lease.id), codes, error)


def _settle_span(
    otel: _Otel,
    operation: str,
    lease: Lease,
    times: tuple[int, int],
    outcome: str | None,
    codes: Mapping[int, str] | None,
    error: BaseException | None,
) -> None:
    attributes = _lease_attributes(operation, lease)
    if outcome is not None and outcome != LOST:
        attributes["fairsched.job.status"] = outcome
    if codes is not None and lease.id in codes:
        attributes["fairsched.error.code"] = codes[lease.id]
    span = otel.tracer.start_span(
        f"{operation} {lease.queue}",
        context=_parent(otel, lease),
        kind=otel.api.SpanKind.CLIENT,
        attributes=attributes,
        start_time=times[0],
    )
    if error is not None:
        _failed(otel, span, error)
    elif outcome == LOST:
        _failed(otel, span, "lease_lost")
    span.end(end_time=times[1])
