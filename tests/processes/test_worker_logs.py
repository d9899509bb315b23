"""Worker logs: ``--log-format json`` lines name the job they are about (as the database
knows it) and never its payload; ``--log-level`` leaves lower levels out; bad values are
refused. Real ``fairsched worker`` processes running the probe app."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from apps.probe import LOG_MESSAGE
from cli_support import cli_process
from worker_support import WorkerProcess, Workers, statuses, wait_for

from fairsched import Client, QueueSettings
from fairsched.logs import JOB_FIELDS

SECRET = "payload-secret-7f3a9c"
"""In every payload; it must appear nowhere in the logs."""
NO_RETRY_DELAY = QueueSettings(lease_seconds=5, backoff_base_seconds=0.0, backoff_max_seconds=0.0)


def json_lines(worker: WorkerProcess) -> list[dict[str, Any]]:
    """Every line the worker wrote, each parsed as one JSON object (fails on any other)."""
    lines = []
    for text in worker.output().splitlines():
        try:
            line = json.loads(text)
        except json.JSONDecodeError:
            pytest.fail(f"not a JSON line: {text!r}")
        assert isinstance(line, dict), text
        lines.append(line)
    assert lines, "the worker logged nothing"
    return lines


def job_identity(line: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(line.get(field) for field in JOB_FIELDS)


def attempts(db: psycopg.Connection, job_ids: list[int], *, succeeded: bool) -> set[tuple[Any, ...]]:
    """(job_id, queue, tenant, attempt, lease_token) of the jobs' attempts that succeeded
    (or did not), as the database recorded them."""
    rows = db.execute(
        "SELECT a.job_id, j.queue_name, j.tenant, a.attempt, a.lease_token"
        "  FROM fairsched.attempts AS a JOIN fairsched.jobs AS j ON j.id = a.job_id"
        " WHERE a.job_id = ANY(%s) AND (a.outcome = 'succeeded') = %s",
        (job_ids, succeeded),
    ).fetchall()
    return {tuple(row) for row in rows}


def test_json_lines_name_the_job_as_the_database_knows_it_and_never_its_payload(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    for queue in ("probe", "aprobe"):
        client.declare_queue(queue, NO_RETRY_DELAY)
    ok = client.enqueue("probe", {"log": "info", "secret": SECRET}, tenant="acme")
    retried = client.enqueue(
        "probe", {"log": "info", "fail": "retryable", "fail_attempts": 1, "secret": SECRET}, tenant="globex"
    )
    dead = client.enqueue("probe", {"fail": "permanent", "secret": SECRET}, tenant="acme")
    task = client.enqueue("aprobe", {"log": "warning", "secret": SECRET}, tenant="initech")

    worker = workers.start({"probe": 2, "aprobe": 1}, extra_args=("--log-format", "json"))
    wait_for(lambda: statuses(db) == {"succeeded": 3, "dead": 1}, "three jobs done, one dead")
    assert worker.stop() == 0
    assert SECRET not in worker.output()
    lines = json_lines(worker)

    for line in lines:
        assert {"time", "level", "logger", "message"} <= line.keys(), line
        assert datetime.fromisoformat(line["time"]).utcoffset() is not None, line
    starting = next(line for line in lines if "starting" in line["message"])
    assert starting["level"] == "INFO" and starting["logger"] == "fairsched.worker.process"
    assert not set(JOB_FIELDS) & starting.keys(), "a line about no job names one"

    # What the handlers logged themselves (sync in a slot thread, async on the loop).
    by_handlers = [line for line in lines if line["logger"] == "apps.probe"]
    assert all(line["message"] == LOG_MESSAGE for line in by_handlers)
    every_attempt = attempts(db, [ok, retried, task], succeeded=True) | attempts(
        db, [retried], succeeded=False
    )
    assert Counter(job_identity(line) for line in by_handlers) == Counter(every_attempt)
    assert {line["level"] for line in by_handlers if line.get("job_id") == task} == {"WARNING"}

    # What the worker logged about the failed attempts.
    failures = [line for line in lines if line["logger"] == "fairsched.worker.finisher"]
    assert all(" failed " in line["message"] for line in failures), failures
    assert Counter(job_identity(line) for line in failures) == Counter(
        attempts(db, [retried, dead], succeeded=False)
    )


def test_log_level_warning_leaves_info_lines_out(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    """The format from the environment, the level from the command line."""
    client.declare_queue("probe", NO_RETRY_DELAY)
    client.enqueue("probe", {"log": "info"}, tenant="acme")
    loud = client.enqueue("probe", {"log": "warning"}, tenant="acme")
    worker = workers.start(
        {"probe": 1}, settings={"FAIRSCHED_LOG_FORMAT": "json"}, extra_args=("--log-level", "warning")
    )
    wait_for(lambda: statuses(db) == {"succeeded": 2}, "both jobs done")
    assert worker.stop() == 0
    lines = json_lines(worker)
    assert {line["level"] for line in lines} <= {"WARNING", "ERROR", "CRITICAL"}, lines
    by_handlers = [line for line in lines if line["logger"] == "apps.probe"]
    assert [line.get("job_id") for line in by_handlers] == [loud], lines


@pytest.mark.parametrize(
    ("args", "env", "config", "code", "named"),
    [
        (["--log-format", "xml"], {}, None, 2, "'text', 'json'"),
        (["--log-level", "loud"], {}, None, 2, "'debug', 'info', 'warning', 'error', 'critical'"),
        ([], {"FAIRSCHED_LOG_FORMAT": "xml"}, None, 1, "log_format: Input should be 'text' or 'json'"),
        ([], {"FAIRSCHED_LOG_LEVEL": "loud"}, None, 1, "log_level: Input should be 'debug', 'info'"),
        ([], {}, 'log_level = "loud"\n', 1, "log_level: Input should be 'debug', 'info'"),
    ],
    ids=["option-format", "option-level", "env-format", "env-level", "config-level"],
)
def test_bad_log_values_are_refused_naming_the_accepted_ones(
    tmp_path: Path, args: list[str], env: dict[str, str], config: str | None, code: int, named: str
) -> None:
    env = {**env, "FAIRSCHED_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none", "COLUMNS": "300"}
    if config is not None:
        path = tmp_path / "fairsched.toml"
        path.write_text(config)
        env["FAIRSCHED_CONFIG"] = str(path)
    command = ["worker", "--app", "apps.probe:app", "--queue", "probe=1", *args]
    result = cli_process(command, env, timeout=60)
    assert result.returncode == code, result.stderr
    assert named in " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.stderr).split()), result.stderr
