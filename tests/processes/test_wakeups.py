"""How a worker learns of new jobs: NOTIFY wakes it at once, polling drains without it.

No wall-clock bound on the wake-up: the worker polls every 300 s, so a job it runs within
the test's 60 s was claimed because of the notification.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from apps.probe import create_probe_tables
from worker_support import Workers, job_row, statuses, wait_for, wait_listening

from fairsched import Client, JobSpec, QueueSettings, Settings

CLAIMERS_QUIET = """SELECT count(*) > 0
       AND bool_and(state = 'idle' AND now() - state_change > interval '1 second')
  FROM pg_stat_activity
 WHERE datname = current_database() AND application_name = 'fairsched-worker'
   AND query LIKE 'SELECT * FROM "fairsched"."stack_claim%'"""
"""Every worker connection that claimed has been idle for a second since its last claim."""


@pytest.fixture
def client(fresh_db: str, db: psycopg.Connection) -> Iterator[Client]:
    create_probe_tables(db)
    with Client(fresh_db, settings=Settings()) as c:
        yield c


def test_a_notification_wakes_a_worker_that_polls_every_five_minutes(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    client.declare_queue("probe", QueueSettings(lease_seconds=30))
    first = client.enqueue("probe", {}, tenant="t")
    workers.start({"probe": 2}, settings={"FAIRSCHED_POLL_INTERVAL_SECONDS": "300"})
    wait_listening(db, 1)
    wait_for(lambda: job_row(db, first)["status"] == "succeeded", "the first job done")
    wait_for(lambda: db.execute(CLAIMERS_QUIET).fetchone() == (True,), "the worker waiting for news")
    second = client.enqueue("probe", {}, tenant="t")
    wait_for(lambda: job_row(db, second)["status"] == "succeeded", "the notified job done", timeout=60)


def test_polling_drains_a_queue_that_sends_no_notification(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    client.declare_queue("probe", QueueSettings(lease_seconds=30, notify=False))
    workers.start({"probe": 4})
    wait_listening(db, 1)
    client.enqueue_many("probe", [JobSpec({}, "t") for _ in range(20)])
    wait_for(lambda: statuses(db) == {"succeeded": 20}, "20 jobs drained by polling")
