"""fairsched job cancel: by ids, by queue and tenant, finished jobs named (exit 1), bad
input refused with one line and nothing changed."""

from __future__ import annotations

import json

import psycopg
from cli_support import cli, one_error_line

from fairsched import Client


def _statuses(db: psycopg.Connection) -> dict[int, str]:
    return dict(db.execute("SELECT id, status FROM fairsched.jobs").fetchall())


def test_cancel_by_ids_reports_each_outcome(client: Client, fresh_db: str, db: psycopg.Connection) -> None:
    queued = client.enqueue("q", {}, tenant="t")
    running = client.enqueue("q", {}, tenant="t")
    [lease] = client.claim("q", owner="w")
    assert lease.id == queued
    result = cli(fresh_db, "job", "cancel", str(queued), str(running), "--by", "ops:ana", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "cancelled": [running],
        "requested": [queued],
        "finished": {},
        "not_found": [],
    }
    events = db.execute("SELECT job_id, kind, detail FROM fairsched.job_events ORDER BY job_id").fetchall()
    assert events == [
        (queued, "cancel_requested", {"by": "ops:ana"}),
        (running, "cancelled", {"by": "ops:ana"}),
    ]


def test_finished_and_unknown_jobs_are_named_and_exit_1(
    client: Client, fresh_db: str, db: psycopg.Connection
) -> None:
    done = client.enqueue("q", {}, tenant="t")
    [lease] = client.claim("q", owner="w")
    assert client.complete(lease)
    result = cli(fresh_db, "job", "cancel", str(done), "424242")
    assert result.exit_code == 1
    assert f"error: job {done} already finished (succeeded): not cancelled" in result.stderr
    assert "error: no job with id 424242" in result.stderr
    assert _statuses(db) == {done: "succeeded"}


def test_cancel_a_tenant(client: Client, fresh_db: str, db: psycopg.Connection) -> None:
    mine = [client.enqueue("q", {}, tenant="a") for _ in range(3)]
    theirs = client.enqueue("q", {}, tenant="b")
    result = cli(fresh_db, "job", "cancel", "--queue", "q", "--tenant", "a")
    assert result.exit_code == 0, result.output
    assert "cancelled: 3; asked to stop (running): 0" in result.stdout
    assert _statuses(db) == {**{job_id: "cancelled" for job_id in mine}, theirs: "pending"}


def test_bad_input_is_one_line_and_changes_nothing(
    client: Client, fresh_db: str, db: psycopg.Connection
) -> None:
    job_id = client.enqueue("q", {}, tenant="t")
    for args, message in [
        (["0"], "a job id is an integer from 1 to 2^63-1, got 0"),
        (["--queue", "q"], "cancel_many needs ids, or both queue and tenant"),
        ([str(job_id), "--queue", "q", "--tenant", "t"], "not both"),
        ([str(job_id), "--by", ""], "by must be a non-empty string"),
    ]:
        result = cli(fresh_db, "job", "cancel", *args)
        assert result.exit_code == 1, (args, result.output)
        assert message in one_error_line(result)
    assert _statuses(db) == {job_id: "pending"}
