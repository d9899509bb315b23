"""Traces (docs/tracing.md): one trace from the code that enqueues a job through every
attempt of it, read from the SDK's in-memory exporter. The jobs run on the real claim,
run and settle path: ``fairsched.testing.drain`` claims with the client, runs each handler
as a worker slot does and records the attempt with the finisher's statements (real
worker processes: ``tests/processes/test_tracing_workers.py``)."""

from __future__ import annotations

import psycopg
import pytest
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from psycopg.conninfo import make_conninfo
from tracing_support import Recorded, named, recorded

from fairsched import App, Client, Job, JobSpec, RetryableError, UnknownQueue
from fairsched.engine.enqueue import jobs_enqueue
from fairsched.testing import RunStatus, drain
from fairsched.tracing import TRACE_CONTEXT_MAX_BYTES

SECRET = "payload-secret-41d7e2"
"""In every payload; it must appear in no span."""

tracer = trace.get_tracer(__name__)
app = App()
seen_baggage: list[object] = []


@app.handler("q")
def work(job: Job) -> None:
    with tracer.start_as_current_span("handler work"):
        seen_baggage.append(baggage.get_baggage("order"))
        if job.payload.get("fail_attempts", 0) >= job.attempt:
            raise RetryableError(f"not yet {SECRET}")


def ours(spans: list[Recorded]) -> str:
    """fairsched's spans, as text (the handler's own spans say what the application chose)."""
    return repr([span for span in spans if span.attributes.get("messaging.system") == "fairsched"])


def stored(db: psycopg.Connection, job_id: int) -> dict[str, str] | None:
    row = db.execute("SELECT trace_context FROM fairsched.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    value: dict[str, str] | None = row[0]
    return value


def names(carrier: dict[str, str] | None, span: Recorded) -> bool:
    """Whether a stored trace context's ``traceparent`` names ``span`` (whatever its flags)."""
    return carrier is not None and carrier["traceparent"].startswith(
        f"00-{span.trace_id:032x}-{span.span_id:016x}-"
    )


def only(spans: list[Recorded], name: str) -> Recorded:
    [span] = named(spans, name)
    return span


def job_attributes(job_id: int, tenant: str, attempt: int) -> dict[str, object]:
    return {
        "messaging.system": "fairsched",
        "messaging.destination.name": "q",
        "messaging.message.id": str(job_id),
        "fairsched.tenant": tenant,
        "fairsched.job.attempt": attempt,
    }


def test_one_trace_runs_from_the_request_through_the_job(
    client: Client, db: psycopg.Connection, spans: InMemorySpanExporter
) -> None:
    with tracer.start_as_current_span("POST /orders") as request:
        job_id = client.enqueue("q", {"secret": SECRET}, tenant="acme")
    [outcome] = drain(client, app, "q")
    assert outcome.status == RunStatus.SUCCEEDED

    got = recorded(spans)
    ended = ["enqueue q", "POST /orders", "claim q", "handler work", "run q", "complete q"]
    assert [span.name for span in got] == ended
    assert {span.trace_id for span in got} == {request.get_span_context().trace_id}
    enqueue, claim, run, complete = (only(got, n) for n in ("enqueue q", "claim q", "run q", "complete q"))
    assert enqueue.parent_id == only(got, "POST /orders").span_id
    assert claim.parent_id == run.parent_id == complete.parent_id == enqueue.span_id
    assert only(got, "handler work").parent_id == run.span_id
    assert set(stored(db, job_id) or {}) == {"traceparent"}
    assert names(stored(db, job_id), enqueue)

    assert [enqueue.kind, claim.kind, run.kind, complete.kind] == ["PRODUCER", "CLIENT", "CONSUMER", "CLIENT"]
    assert enqueue.attributes == {
        "messaging.system": "fairsched",
        "messaging.operation.name": "enqueue",
        "messaging.operation.type": "send",
        "messaging.destination.name": "q",
        "messaging.message.id": str(job_id),
        "fairsched.tenant": "acme",
    }
    for span, operation in ((claim, "receive"), (run, "process"), (complete, "settle")):
        assert span.attributes.items() >= job_attributes(job_id, "acme", 1).items()
        assert span.attributes["messaging.operation.type"] == operation
        assert span.attributes["messaging.client.id"].startswith("fairsched-testing:")
        assert span.status == "UNSET"
    assert complete.attributes["fairsched.job.status"] == "succeeded"
    assert claim.start_ns <= claim.end_ns <= run.start_ns <= run.end_ns <= complete.start_ns
    assert SECRET not in ours(got)


def test_the_producer_and_worker_roles_carry_the_trace(
    client: Client, fresh_db: str, spans: InMemorySpanExporter
) -> None:
    """The producer writes the context with its jobs, the worker reads it with its leases."""
    with (
        Client(make_conninfo(fresh_db, options="-c role=fairsched_producer"), pool_size=2) as producer,
        Client(make_conninfo(fresh_db, options="-c role=fairsched_worker"), pool_size=2) as worker,
    ):
        with tracer.start_as_current_span("POST /orders") as request:
            producer.enqueue("q", {}, tenant="acme")
        [outcome] = drain(worker, app, "q")
    assert outcome.status == RunStatus.SUCCEEDED
    got = recorded(spans)
    assert {span.trace_id for span in got} == {request.get_span_context().trace_id}
    enqueue = only(got, "enqueue q")
    assert [span.name for span in got if span.parent_id == enqueue.span_id] == [
        "claim q",
        "run q",
        "complete q",
    ]


def test_every_attempt_joins_the_trace_and_a_failure_names_its_class_not_its_text(
    client: Client, db: psycopg.Connection, spans: InMemorySpanExporter
) -> None:
    with tracer.start_as_current_span("POST /orders"):
        job_id = client.enqueue("q", {"fail_attempts": 1}, tenant="acme")
    outcomes = drain(client, app, "q")
    assert [o.status for o in outcomes] == [RunStatus.RETRY_SCHEDULED, RunStatus.SUCCEEDED]

    got = recorded(spans)
    assert len({span.trace_id for span in got}) == 1
    enqueue = only(got, "enqueue q")
    attempts = [
        (s.name, s.attributes.get("fairsched.job.attempt")) for s in got if s.parent_id == enqueue.span_id
    ]
    assert attempts == [
        ("claim q", 1),
        ("run q", 1),
        ("fail q", 1),
        ("claim q", 2),
        ("run q", 2),
        ("complete q", 2),
    ]
    failed_run, _ = named(got, "run q")
    assert (failed_run.status, failed_run.status_description) == ("ERROR", "fairsched.errors.RetryableError")
    assert failed_run.attributes["error.type"] == "fairsched.errors.RetryableError"
    fail = only(got, "fail q")
    assert fail.status == "UNSET"  # recording the failure worked
    assert (
        fail.attributes.items()
        >= {
            "fairsched.job.status": "pending",
            "fairsched.error.code": "fairsched.errors.RetryableError",
        }.items()
    )
    assert SECRET not in ours(got)
    assert names(stored(db, job_id), enqueue)


def test_a_batch_shares_its_enqueue_span(
    client: Client, db: psycopg.Connection, spans: InMemorySpanExporter
) -> None:
    with tracer.start_as_current_span("import"):
        ids = client.enqueue_many("q", [JobSpec({}, tenant=t) for t in ("acme", "globex", "acme")])
    drain(client, app, "q")

    got = recorded(spans)
    enqueue = only(got, "enqueue q")
    assert enqueue.attributes["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in enqueue.attributes and "fairsched.tenant" not in enqueue.attributes
    assert all(names(stored(db, job_id), enqueue) for job_id in ids)
    runs = named(got, "run q")
    assert sorted(int(run.attributes["messaging.message.id"]) for run in runs) == sorted(ids)
    assert {run.parent_id for run in runs} == {enqueue.span_id}
    assert len({span.trace_id for span in got}) == 1


def test_a_job_enqueued_outside_a_trace_gets_one_trace_per_attempt(
    client: Client, db: psycopg.Connection, spans: InMemorySpanExporter
) -> None:
    with client.connection() as conn:  # the engine's enqueue, with no span around it
        [job_id] = jobs_enqueue(
            conn, "q", [JobSpec({"fail_attempts": 1}, tenant="acme")], max_payload_bytes=4096
        )
    assert stored(db, job_id) is None
    drain(client, app, "q")

    got = recorded(spans)
    claims = named(got, "claim q")
    assert [claim.parent_id for claim in claims] == [None, None]
    children = [[s.name for s in got if s.parent_id == claim.span_id] for claim in claims]
    assert children == [["run q", "fail q"], ["run q", "complete q"]]
    for claim in claims:
        assert len([s for s in got if s.trace_id == claim.trace_id]) == 4  # with the handler's span
    assert claims[0].trace_id != claims[1].trace_id
    assert stored(db, job_id) is None


def test_what_a_handler_enqueues_continues_the_trace(client: Client, spans: InMemorySpanExporter) -> None:
    chained = App()

    @chained.handler("q")
    def follow_up(job: Job) -> None:
        if job.payload.get("first"):
            client.enqueue("q", {}, tenant=job.tenant)

    with tracer.start_as_current_span("POST /orders") as request:
        client.enqueue("q", {"first": True}, tenant="acme")
    assert len(drain(client, chained, "q")) == 2

    got = recorded(spans)
    assert {span.trace_id for span in got} == {request.get_span_context().trace_id}
    first_run, second_run = named(got, "run q")
    second_enqueue = named(got, "enqueue q")[1]
    assert second_enqueue.parent_id == first_run.span_id
    assert second_run.parent_id == second_enqueue.span_id


def test_baggage_travels_with_the_job_and_an_oversized_one_is_left_behind(
    client: Client, db: psycopg.Connection, spans: InMemorySpanExporter
) -> None:
    seen_baggage.clear()
    small = context.attach(baggage.set_baggage("order", "o-42"))
    try:
        with tracer.start_as_current_span("POST /orders"):
            small_id = client.enqueue("q", {}, tenant="acme")
    finally:
        context.detach(small)
    # 30 entries of 150 bytes: within W3C baggage's 8192 bytes, past what a job stores
    large_baggage = context.get_current()
    for i in range(30):
        large_baggage = baggage.set_baggage(f"k{i}", "x" * 150, large_baggage)
    large = context.attach(baggage.set_baggage("order", "o-43", large_baggage))
    try:
        with tracer.start_as_current_span("POST /orders"):
            large_id = client.enqueue("q", {}, tenant="acme")
    finally:
        context.detach(large)
    drain(client, app, "q")

    small_stored, large_stored = stored(db, small_id), stored(db, large_id)
    assert small_stored is not None and small_stored["baggage"] == "order=o-42"
    assert names(small_stored, named(recorded(spans), "enqueue q")[0])
    assert set(large_stored or {}) == {"traceparent"}
    assert names(large_stored, named(recorded(spans), "enqueue q")[1])
    assert seen_baggage == ["o-42", None]


def test_the_database_refuses_a_trace_context_that_is_not_a_small_object(
    client: Client, db: psycopg.Connection
) -> None:
    job_id = client.enqueue("q", {}, tenant="acme")
    before = stored(db, job_id)
    for value in ('["00-ab"]', '"00-ab"', f'{{"traceparent": "{"0" * TRACE_CONTEXT_MAX_BYTES}"}}'):
        with pytest.raises(psycopg.errors.CheckViolation, match="jobs_trace_context_check"):
            db.execute("UPDATE fairsched.jobs SET trace_context = %s::jsonb WHERE id = %s", (value, job_id))
    assert stored(db, job_id) == before


def test_failed_operations_mark_their_spans(
    client: Client, db: psycopg.Connection, spans: InMemorySpanExporter
) -> None:
    with pytest.raises(UnknownQueue):
        client.enqueue("nowhere", {"secret": SECRET}, tenant="acme")
    job_id = client.enqueue("q", {}, tenant="acme")
    [lease] = client.claim("q", owner="w1")
    db.execute(
        "UPDATE fairsched.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s", (job_id,)
    )
    assert client.complete(lease) is False

    got = recorded(spans)
    refused = only(got, "enqueue nowhere")
    assert (refused.status, refused.status_description) == ("ERROR", "fairsched.errors.UnknownQueue")
    lost = only(got, "complete q")
    assert (lost.status, lost.status_description) == ("ERROR", "lease_lost")
    assert "fairsched.job.status" not in lost.attributes
    assert SECRET not in ours(got)
