"""Handlers for worker-process tests; the payload says what each job does.

Every step a handler takes is written to ``public.probe_events`` (DB time), and
an external side effect to ``public.probe_sends`` keyed by the job's
idempotency key, both created by :func:`create_probe_tables`. Payload keys:

- ``record``: write ``start`` / ``end`` events;
- ``send``: perform the side effect (insert keyed by idempotency key);
- ``sleep``: seconds to sleep, without progress;
- ``steps`` / ``step_seconds``: work in steps, reporting progress after each;
- ``stall_after``: stop reporting progress after that many steps, then wait
  (checking ``job.lost``) until the lease is lost, and write ``lost``;
- ``fail``: ``permanent`` / ``retryable`` / ``unknown`` error on every attempt;
- ``fail_attempts``: only attempts up to this number fail;
- ``slow_attempts``: only attempts up to this number sleep / stall;
- ``log``: a level (``info``, ``warning``, ...): log :data:`LOG_MESSAGE` at that level
  through :mod:`logging`, as application code does (the payload itself is not logged).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from typing import Any

import psycopg

from fairsched.errors import LeaseLost, PermanentError, RetryableError
from fairsched.worker.app import App, Job

app = App()
_local = threading.local()
log = logging.getLogger(__name__)
LOG_MESSAGE = "probe handler at work"

TABLES = """
CREATE TABLE IF NOT EXISTS public.probe_events (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id bigint NOT NULL,
    attempt integer NOT NULL,
    idempotency_key text NOT NULL,
    pid integer NOT NULL,
    event text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS public.probe_sends (
    idempotency_key text PRIMARY KEY,
    job_id bigint NOT NULL,
    attempt integer NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""


def create_probe_tables(conn: psycopg.Connection) -> None:
    """The tables the probe handlers write to."""
    conn.execute(TABLES)


def _conn() -> psycopg.Connection:
    conn: psycopg.Connection | None = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = psycopg.connect(os.environ["FAIRSCHED_DATABASE_URL"], autocommit=True)
        _local.conn = conn
    return conn


def event(job: Job, name: str) -> None:
    """Record that ``job`` reached ``name`` (DB time)."""
    _conn().execute(
        "INSERT INTO public.probe_events (job_id, attempt, idempotency_key, pid, event)"
        " VALUES (%s, %s, %s, %s, %s)",
        (job.id, job.attempt, job.idempotency_key, os.getpid(), name),
    )


def send(job: Job) -> None:
    """The external side effect: at most one per idempotency key, whatever the attempts."""
    _conn().execute(
        "INSERT INTO public.probe_sends (idempotency_key, job_id, attempt) VALUES (%s, %s, %s)"
        " ON CONFLICT (idempotency_key) DO NOTHING",
        (job.idempotency_key, job.id, job.attempt),
    )


def _fail(kind: str) -> None:
    if kind == "permanent":
        raise PermanentError("unsupported payload version")
    if kind == "retryable":
        raise RetryableError("downstream timed out")
    raise RuntimeError("unexpected failure")


@app.handler("probe")
def probe(job: Job) -> None:
    p: dict[str, Any] = job.payload
    slow = job.attempt <= p.get("slow_attempts", 1_000_000)
    if p.get("log"):
        log.log(logging.getLevelName(p["log"].upper()), LOG_MESSAGE)
    if p.get("record"):
        event(job, "start")
    if p.get("send"):
        send(job)
        event(job, "sent")
    if slow and p.get("sleep"):
        time.sleep(p["sleep"])
    for step in range(p.get("steps", 0)):
        if slow and step == p.get("stall_after"):
            event(job, "stalled")
            while not job.lost:
                time.sleep(0.02)
            event(job, "lost")
            try:
                job.progress(step)
            except LeaseLost:
                event(job, "progress_raised")
            return
        time.sleep(p.get("step_seconds", 0.05))
        job.progress(step)
    if p.get("fail") and job.attempt <= p.get("fail_attempts", 1_000_000):
        _fail(p["fail"])
    if p.get("record"):
        event(job, "end")


@app.handler("aprobe")
async def aprobe(job: Job) -> None:
    p: dict[str, Any] = job.payload
    if p.get("log"):
        log.log(logging.getLevelName(p["log"].upper()), LOG_MESSAGE)
    for step in range(p.get("steps", 1)):
        await asyncio.sleep(p.get("step_seconds", 0.01))
        job.progress(step)
    if p.get("fail"):
        _fail(p["fail"])
    if p.get("record"):
        await asyncio.to_thread(event, job, "end")
