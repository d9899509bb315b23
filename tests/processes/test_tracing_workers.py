"""Traces across processes (docs/tracing.md): a job enqueued in a request's trace here is
claimed, run and completed by a real ``fairsched worker`` process in the same trace; and a
worker without OpenTelemetry (or without an SDK) imports none of it and runs as before."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psycopg
import pytest
from apps.without_otel import REMOTE
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tracing_support import Recorded, named, read_spans, recorded
from worker_support import running_workers, statuses, wait_for

from fairsched import Client, QueueSettings

FAST = QueueSettings(lease_seconds=30, backoff_base_seconds=0.0, backoff_max_seconds=0.0)
tracer = trace.get_tracer(__name__)


def of_job(spans: list[Recorded], job_id: int) -> list[str]:
    """The names of a job's spans, in the order they ended."""
    return [s.name for s in spans if s.attributes.get("messaging.message.id") == str(job_id)]


def test_one_trace_runs_from_the_request_through_a_worker_process(
    client: Client, db: psycopg.Connection, fresh_db: str, spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    for queue in ("traced", "traced_async"):
        client.declare_queue(queue, FAST)
    with tracer.start_as_current_span("POST /orders") as request:
        sync_id = client.enqueue("traced", {"fail_attempts": 1}, tenant="acme")
        async_id = client.enqueue("traced_async", {}, tenant="globex")
    span_file = tmp_path / "worker-spans.jsonl"
    with running_workers(fresh_db, tmp_path, app="apps.traced:app") as workers:
        worker = workers.start(
            {"traced": 2, "traced_async": 2}, settings={"TRACED_SPANS_FILE": str(span_file)}
        )
        wait_for(lambda: statuses(db).get("succeeded") == 2, "both jobs succeeded")
        assert worker.stop() == 0

    here, there = recorded(spans), read_spans(span_file)
    trace_id = request.get_span_context().trace_id
    assert {s.trace_id for s in here + there} == {trace_id}
    enqueues = {int(s.attributes["messaging.message.id"]): s for s in named(here, "enqueue traced")}
    enqueues |= {int(s.attributes["messaging.message.id"]): s for s in named(here, "enqueue traced_async")}
    assert of_job(there, sync_id) == [
        "claim traced",
        "run traced",
        "fail traced",
        "claim traced",
        "run traced",
        "complete traced",
    ]
    assert of_job(there, async_id) == ["claim traced_async", "run traced_async", "complete traced_async"]
    for job_id in (sync_id, async_id):
        job_spans = [s for s in there if s.attributes.get("messaging.message.id") == str(job_id)]
        assert {s.parent_id for s in job_spans} == {enqueues[job_id].span_id}
        assert {s.attributes["messaging.client.id"] for s in job_spans} == {worker.owner}
    runs = {s.span_id: s for s in there if s.name.startswith("run ")}
    handlers = named(there, "handler work")
    assert len(handlers) == 3 and all(h.parent_id in runs for h in handlers)  # sync thread and async task
    failed = [run for run in runs.values() if run.status == "ERROR"]
    assert [(r.attributes["fairsched.job.attempt"], r.attributes["error.type"]) for r in failed] == [
        (1, "fairsched.errors.RetryableError")
    ]


@pytest.mark.parametrize("mode", ["absent", "api"])
def test_a_worker_without_opentelemetry_imports_none_of_it(
    client: Client, db: psycopg.Connection, fresh_db: str, tmp_path: Path, mode: str
) -> None:
    """``absent``: every ``opentelemetry`` module unimportable, as without the extra; ``api``:
    the API importable, no SDK configured. The process enqueues (outside any span) and
    runs a sync and an async job through the worker's claim, run and finish. With the API,
    a trace that came from elsewhere is still carried on: into the job enqueued in it, and
    from its run into the follow-up job its handler enqueues."""
    for queue in ("plain", "plain_async"):
        client.declare_queue(queue, FAST)
    report = tmp_path / "report.json"
    with running_workers(fresh_db, tmp_path, app="apps.without_otel:app") as workers:
        worker = workers.start(
            {"plain": 2, "plain_async": 2},
            settings={"WITHOUT_OTEL_MODE": mode, "WITHOUT_OTEL_REPORT": str(report)},
            command=(sys.executable, "-m", "apps.without_otel"),
        )
        jobs = 2 if mode == "absent" else 4
        wait_for(lambda: statuses(db).get("succeeded") == jobs, f"{jobs} jobs succeeded")
        assert worker.stop() == 0

    imported = json.loads(report.read_text())
    stored = db.execute("SELECT trace_context FROM fairsched.jobs ORDER BY id").fetchall()
    if mode == "absent":
        assert stored == [(None,), (None,)]
        assert imported["loaded"] == []
        assert "opentelemetry" in imported["tried"]  # fairsched did look for it
    else:
        remote = {"traceparent": REMOTE}
        assert stored == [(None,), (None,), (remote,), (remote,)]
        assert imported["loaded"] and not [m for m in imported["loaded"] if m.startswith("opentelemetry.sdk")]
