"""Dead jobs: kept with their history; listed, shown, replayed (same id) or discarded."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import class_row, dict_row

from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.engine.settle import jobs_settle
from fairsched.errors import JobNotFound


@dataclass(frozen=True)
class DeadJob:
    """A dead job as listed (no payload)."""

    id: int
    queue_name: str
    tenant: str
    attempt_count: int
    last_error_code: str | None
    last_error: str | None
    created_at: datetime
    finished_at: datetime | None


def dead_list(
    conn: psycopg.Connection,
    *,
    queue: str | None = None,
    tenant: str | None = None,
    code: str | None = None,
    since: datetime | None = None,
    limit: int = 100,
) -> list[DeadJob]:
    """Dead jobs, newest first, filtered by queue, tenant, error code and death time."""
    params = {"queue": queue, "tenant": tenant, "code": code, "since": since, "limit": limit}
    with operation("dead_list"), conn.cursor(row_factory=class_row(DeadJob)) as cur:
        return cur.execute(QUERIES["dead_list"], params).fetchall()


def job_show(conn: psycopg.Connection, job_id: int) -> dict[str, Any]:
    """A job's current row and its full history (attempts and events)."""
    with operation("job_show"), conn.cursor(row_factory=dict_row) as cur:
        job = cur.execute(QUERIES["job_get"], {"id": job_id}).fetchone()
        if job is None:
            raise JobNotFound(f"no job with id {job_id}")
        job["history"] = cur.execute(QUERIES["job_history"], {"id": job_id}).fetchall()
    return job


def _dead_transition(conn: psycopg.Connection, name: str, job_id: int, by: str) -> None:
    with conn.transaction():
        with operation(name):
            row = conn.execute(QUERIES[name], {"id": job_id, "by": by}).fetchone()
        if row is None:
            raise JobNotFound(f"job {job_id} is not dead (or does not exist)")
        jobs_settle(conn, [job_id], left_running=False)


def dead_replay(conn: psycopg.Connection, job_id: int, *, by: str = "api") -> None:
    """Run a dead job again: pending now, fresh attempt budget, same id, history kept."""
    _dead_transition(conn, "dead_replay", job_id, by)


def dead_discard(conn: psycopg.Connection, job_id: int, *, by: str = "api") -> None:
    """Resolve a dead job without running it; it stays in the table as ``discarded``."""
    _dead_transition(conn, "dead_discard", job_id, by)


@dataclass(frozen=True)
class BlockedAggregate:
    """An aggregate held by its dead head (poison mode ``block``)."""

    queue_name: str
    tenant: str
    aggregate_key: str
    blocked_job_id: int
    since: datetime | None


def aggregates_blocked(conn: psycopg.Connection, *, queue: str | None = None) -> list[BlockedAggregate]:
    """Aggregates held by a dead job, longest-blocked first."""
    with operation("aggregates_blocked"), conn.cursor(row_factory=class_row(BlockedAggregate)) as cur:
        return cur.execute(QUERIES["aggregates_blocked"], {"queue": queue}).fetchall()


def aggregate_unblock(conn: psycopg.Connection, queue: str, tenant: str, key: str, *, by: str = "api") -> int:
    """Run a blocked aggregate's dead head again (same id); returns the job id."""
    with conn.transaction():
        with operation("aggregate_unblock"):
            row = conn.execute(
                QUERIES["aggregate_unblock"], {"queue": queue, "tenant": tenant, "key": key, "by": by}
            ).fetchone()
        if row is None:
            raise JobNotFound(f"aggregate {key!r} of tenant {tenant!r} on {queue!r} is not blocked")
        jobs_settle(conn, [row[0]], left_running=False)
    job_id: int = row[0]
    return job_id


def aggregate_skip(conn: psycopg.Connection, queue: str, tenant: str, key: str, *, by: str = "api") -> int:
    """Discard a blocked aggregate's dead head and run its next job; returns the discarded id."""
    with conn.transaction():
        with operation("aggregate_skip"):
            row = conn.execute(
                QUERIES["aggregate_skip"], {"queue": queue, "tenant": tenant, "key": key, "by": by}
            ).fetchone()
        if row is None:
            raise JobNotFound(f"aggregate {key!r} of tenant {tenant!r} on {queue!r} is not blocked")
        jobs_settle(conn, [row[0]], left_running=False)
    job_id: int = row[0]
    return job_id
