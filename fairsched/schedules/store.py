"""Schedules as the database holds them: read, and run one now (``fairsched schedule``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.engine.enqueue import JobSpec, jobs_enqueue
from fairsched.errors import InvalidInput
from fairsched.schedules.spec import ScheduleSettings
from fairsched.schedules.ticks import run_key


@dataclass(frozen=True)
class StoredSchedule:
    """A schedule's settings and where it stands: the next tick due, the last enqueued."""

    settings: ScheduleSettings
    next_tick: datetime | None
    last_tick: datetime | None
    last_job_id: int | None


def _stored(row: Mapping[str, Any]) -> StoredSchedule:
    settings = ScheduleSettings.model_construct(
        name=row["name"],
        cron=row["cron"],
        timezone=row["timezone"],
        queue=row["queue_name"],
        tenant=row["tenant"],
        payload=json.loads(row["payload"]),
        priority=row["priority"],
        jitter=float(row["jitter_seconds"]),
        enabled=row["enabled"],
    )
    return StoredSchedule(settings, row["next_tick"], row["last_tick"], row["last_job_id"])


def schedules_read(conn: psycopg.Connection, *, lock: bool = False) -> dict[str, StoredSchedule]:
    """Every schedule by name (``lock``: locked until the transaction ends)."""
    query = QUERIES["schedules_lock" if lock else "schedules_list"]
    with operation("schedules_read"), conn.cursor(row_factory=dict_row) as cur:
        return {row["name"]: _stored(row) for row in cur.execute(query).fetchall()}


def schedule_get(conn: psycopg.Connection, name: str) -> StoredSchedule:
    """One schedule; :class:`InvalidInput` naming it when there is none."""
    with operation("schedule_get"), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(QUERIES["schedule_get"], {"name": name}).fetchone()
    if row is None:
        raise InvalidInput(f"no schedule named {name[:70]!r} (fairsched schedule list shows them)")
    return _stored(row)


def schedule_run(conn: psycopg.Connection, name: str, *, max_payload_bytes: int) -> int:
    """Enqueue one job of schedule ``name`` now, apart from its ticks (a key of its own;
    the ticks' state is left as it is), disabled or not; returns the job id."""
    schedule = schedule_get(conn, name).settings
    with operation("schedules_now"):
        row = conn.execute(QUERIES["schedules_now"]).fetchone()
    assert row is not None
    job = JobSpec(
        schedule.payload, schedule.tenant, priority=schedule.priority, idempotency_key=run_key(name, row[0])
    )
    return jobs_enqueue(conn, schedule.queue, [job], max_payload_bytes=max_payload_bytes)[0]
