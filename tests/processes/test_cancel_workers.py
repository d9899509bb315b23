"""Cancellation with real worker processes: a queued job never runs, a running sync
handler stops at its next progress call, a running async handler's task is cancelled,
a handler that returns anyway completes, and a serial aggregate moves on after a cancel."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from worker_support import Workers, job_row, running_workers, wait_for

from fairsched import Client, QueueSettings
from fairsched.engine.cancel import CancelOutcome
from fairsched.engine.enqueue import JobSpec
from fairsched.errors import JobFinished

APP = "apps.cancel:app"
QUEUES = ("cancel_sync", "cancel_async", "cancel_ignore", "cancel_race")


@pytest.fixture
def workers(fresh_db: str, tmp_path: Path) -> Iterator[Workers]:
    with running_workers(fresh_db, tmp_path, APP) as started:
        yield started


@pytest.fixture
def queues(client: Client) -> Client:
    for name in QUEUES:
        client.declare_queue(name, QueueSettings(lease_seconds=30, max_attempts=5))
    client.declare_queue("cancel_serial", QueueSettings(policies=["serial"], lease_seconds=30))
    return client


def _status(db: psycopg.Connection, job_id: int) -> object:
    return job_row(db, job_id)["status"]


def _outcomes(db: psycopg.Connection, job_id: int) -> list[str]:
    rows = db.execute("SELECT outcome FROM fairsched.attempts WHERE job_id = %s", [job_id]).fetchall()
    return [row[0] for row in rows]


@pytest.mark.parametrize("queue", ["cancel_sync", "cancel_async"])
def test_a_running_handler_is_stopped_and_the_job_ends_cancelled(
    queues: Client, workers: Workers, db: psycopg.Connection, queue: str
) -> None:
    workers.start({queue: 2})
    job_id = queues.enqueue(queue, {}, tenant="t")
    wait_for(lambda: _status(db, job_id) == "running", "the job runs")
    assert queues.cancel(job_id, by="test") == CancelOutcome.REQUESTED
    # Well before the handler's 60 s or the lease's 30 s: the worker saw the request.
    wait_for(lambda: _status(db, job_id) == "cancelled", "the job ends cancelled", timeout=15)
    assert _outcomes(db, job_id) == ["cancelled"]
    events = db.execute("SELECT kind, detail FROM fairsched.job_events WHERE job_id = %s", [job_id])
    assert events.fetchall() == [("cancel_requested", {"by": "test"})]
    # The slot is free again: the next job runs.
    other = queues.enqueue(queue, {}, tenant="t")
    wait_for(lambda: _status(db, other) == "running", "the next job runs")


def test_a_queued_job_never_runs(queues: Client, workers: Workers, db: psycopg.Connection) -> None:
    first = queues.enqueue("cancel_ignore", {}, tenant="t")
    queued = queues.enqueue("cancel_ignore", {}, tenant="t")
    assert queues.cancel(queued) == CancelOutcome.CANCELLED
    workers.start({"cancel_ignore": 2})
    wait_for(lambda: _status(db, first) == "running", "the first job runs")
    queues.cancel(first)
    wait_for(lambda: _status(db, first) == "succeeded", "the first job returns and completes")
    row = job_row(db, queued)
    assert row["status"] == "cancelled" and row["attempt_count"] == 0


def test_cancelling_a_running_serial_head_lets_the_next_one_run(
    queues: Client, tmp_path: Path, fresh_db: str, db: psycopg.Connection
) -> None:
    ids = queues.enqueue_many(
        "cancel_serial", [JobSpec({}, "t", aggregate_key="k", aggregate_seq=s) for s in (1, 2, 3)]
    )
    with running_workers(fresh_db, tmp_path, "apps.cancel_serial:app") as serial_workers:
        serial_workers.start({"cancel_serial": 2})
        wait_for(lambda: _status(db, ids[0]) == "running", "the head runs")
        assert _status(db, ids[1]) == "waiting"
        queues.cancel(ids[1])  # a waiting successor: cancelled at once
        queues.cancel(ids[0])  # the running head: stopped
        wait_for(lambda: _status(db, ids[0]) == "cancelled", "the head ends cancelled", timeout=15)
        wait_for(lambda: _status(db, ids[2]) == "running", "seq 3 runs next")
        assert _status(db, ids[1]) == "cancelled"


def test_cancels_racing_completions_end_each_job_exactly_one_way(
    queues: Client, workers: Workers, db: psycopg.Connection
) -> None:
    """Jobs of 0.9 s, each cancelled at a random moment from its start to just after its
    end (workers see requests once a second): every job ends either succeeded (its
    completion came first; a later cancel is refused as finished) or cancelled (stopped),
    and its one attempt record says the same."""
    workers.start({"cancel_race": 4})
    rng = random.Random(11)
    ids = queues.enqueue_many("cancel_race", [JobSpec({"ms": 900}, "t") for _ in range(20)])
    offsets = {job_id: rng.uniform(0, 1.1) for job_id in ids}
    started: dict[int, float] = {}
    answers: dict[int, str] = {}
    deadline = time.monotonic() + 60
    while len(answers) < len(ids) and time.monotonic() < deadline:
        rows = db.execute("SELECT id, status FROM fairsched.jobs WHERE id = ANY(%s)", [ids]).fetchall()
        now = time.monotonic()
        for job_id, status in rows:
            if status != "pending":
                started.setdefault(job_id, now)
            if job_id in started and job_id not in answers and now >= started[job_id] + offsets[job_id]:
                try:
                    answers[job_id] = queues.cancel(job_id)
                except JobFinished:
                    answers[job_id] = "finished"
        time.sleep(0.01)
    wait_for(lambda: not ({_status(db, job_id) for job_id in ids} & {"pending", "running"}), "all ended")
    for job_id in ids:
        status = _status(db, job_id)
        assert status in ("succeeded", "cancelled"), (job_id, status)
        assert _outcomes(db, job_id) == [status], job_id
        if answers[job_id] == "finished":
            assert status == "succeeded"
    assert {_status(db, job_id) for job_id in ids} == {"succeeded", "cancelled"}, "both outcomes seen"
    with pytest.raises(JobFinished, match="already finished"):
        queues.cancel(ids[0])
