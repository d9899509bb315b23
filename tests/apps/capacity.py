"""Handlers for the capacity tests: two queues whose jobs sleep and record when they ran.

Each job writes one row to ``public.capacity_runs`` (created by
:func:`create_runs_table`) with the database time its handler started and
ended, so a test can count how many jobs of each queue ran at any instant.
Payload: ``{"sleep": seconds}``.
"""

from __future__ import annotations

import os
import threading
import time

import psycopg

from fairsched.worker.app import App, Job

app = App()
_local = threading.local()

TABLE = """
CREATE TABLE IF NOT EXISTS public.capacity_runs (
    job_id bigint PRIMARY KEY,
    queue text NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at timestamptz NOT NULL
)
"""


def create_runs_table(conn: psycopg.Connection) -> None:
    """The table the handlers record their runs in."""
    conn.execute(TABLE)


def _conn() -> psycopg.Connection:
    conn: psycopg.Connection | None = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = psycopg.connect(os.environ["FAIRSCHED_DATABASE_URL"], autocommit=True)
        _local.conn = conn
    return conn


def _run(job: Job) -> None:
    row = _conn().execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    time.sleep(job.payload.get("sleep", 0.2))
    _conn().execute(
        "INSERT INTO public.capacity_runs (job_id, queue, started_at, ended_at)"
        " VALUES (%s, %s, %s, clock_timestamp()) ON CONFLICT (job_id) DO NOTHING",
        (job.id, job.queue, row[0]),
    )


@app.handler("emails")
def emails(job: Job) -> None:
    _run(job)


@app.handler("reports")
def reports(job: Job) -> None:
    _run(job)
