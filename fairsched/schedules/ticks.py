"""The schedule duty: enqueue every due tick exactly once, from any number of processes.

A pass asks which schedules are due (``next_tick <= now()``, database time), then takes
them one by one, each in its own transaction: lock the schedule's row (``FOR UPDATE SKIP
LOCKED``: a row another process holds is that process's to enqueue), enqueue the tick's
job, move ``next_tick`` past it, commit. A process that comes after the commit finds the
tick no longer due; the job's idempotency key (``schedule:NAME:TICK``) refuses a second
job for the tick besides. Retention may delete the job later: ``next_tick`` has moved on,
so the tick is never enqueued again.

Missed ticks (no worker ran, or the database was away): a pass enqueues the *latest*
tick that has come, once, and skips the ticks before it (docs/schedules.md).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row

from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.engine.enqueue import JobSpec, jobs_enqueue
from fairsched.errors import FairschedError
from fairsched.schedules.cron import Cron

log = logging.getLogger(__name__)

BATCH = 100
"""The most schedules one pass enqueues (the rest are due at once for the next pass)."""


@dataclass(frozen=True)
class Ticked:
    """A tick a pass enqueued: its schedule, the tick, the job, and the ticks it skipped."""

    schedule: str
    tick: datetime
    job_id: int
    skipped_since: datetime | None = None
    """The earliest missed tick skipped for this one (``None``: none was missed)."""


def tick_key(name: str, tick: datetime) -> str:
    """The idempotency key of a schedule's tick (UTC, to the microsecond).

    >>> from datetime import UTC
    >>> tick_key("nightly", datetime(2026, 1, 5, 2, 0, tzinfo=UTC))
    'schedule:nightly:2026-01-05T02:00:00.000000+00:00'
    """
    return f"schedule:{name}:{tick.isoformat(timespec='microseconds')}"


def run_key(name: str, now: datetime) -> str:
    """The idempotency key of ``fairsched schedule run``: never a tick's."""
    return f"schedule:{name}:run:{now.isoformat(timespec='microseconds')}"


def _job(row: Mapping[str, Any], key: str, now: datetime) -> JobSpec:
    jitter = float(row["jitter_seconds"])
    run_at = now + timedelta(seconds=random.uniform(0, jitter)) if jitter > 0 else None
    return JobSpec(
        json.loads(row["payload"]),
        row["tenant"],
        priority=row["priority"],
        run_at=run_at,
        idempotency_key=key,
    )


def denied(error: BaseException) -> bool:
    """Whether ``error`` is PostgreSQL refusing a privilege: the role may not enqueue, or
    read schedules (a worker's role needs the producer's grants for the schedule duty)."""
    cause = error.__cause__ if isinstance(error, FairschedError) else error
    return isinstance(cause, pg_errors.InsufficientPrivilege)


def schedules_enqueue_due(conn: psycopg.Connection, *, max_payload_bytes: int) -> list[Ticked]:
    """One pass over the due schedules (see the module); returns the ticks it enqueued.

    ``conn`` must not be in a transaction. A schedule whose enqueue fails is logged and
    left due (the next pass tries it again); the others go on. A refused privilege
    (:func:`denied`) ends the pass with its error.
    """
    with operation("schedules_due"):
        names = [row[0] for row in conn.execute(QUERIES["schedules_due"], {"limit": BATCH}).fetchall()]
    done = []
    for name in names:
        try:
            ticked = schedule_tick(conn, name, max_payload_bytes=max_payload_bytes)
        except (FairschedError, psycopg.Error) as e:
            if denied(e):
                raise
            log.warning("schedule %s: enqueue failed (%s); retrying at the next pass", name, e)
            continue
        if ticked is not None:
            done.append(ticked)
    return done


def schedule_tick(conn: psycopg.Connection, name: str, *, max_payload_bytes: int) -> Ticked | None:
    """Enqueue schedule ``name``'s latest due tick in one transaction; ``None`` when it is
    not due, or another process holds it."""
    with conn.transaction():
        with operation("schedule_due_lock"), conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(QUERIES["schedule_due_lock"], {"name": name}).fetchone()
        if row is None:
            return None
        cron = Cron.parse(row["cron"], row["timezone"])
        now: datetime = row["now"]
        due: datetime = row["next_tick"]
        tick = max(cron.latest_at_or_before(now) or due, due)
        ids = jobs_enqueue(
            conn,
            row["queue_name"],
            [_job(row, tick_key(name, tick), now)],
            max_payload_bytes=max_payload_bytes,
        )
        with operation("schedule_tick_advance"):
            conn.execute(
                QUERIES["schedule_tick_advance"],
                {"name": name, "tick": tick, "job_id": ids[0], "next_tick": cron.next_after(tick)},
            )
    ticked = Ticked(name, tick, ids[0], due if tick > due else None)
    if ticked.skipped_since is not None:
        log.info(
            "schedule %s: ticks from %s to before %s were missed; enqueued the latest, %s, once",
            name,
            due.isoformat(),
            tick.isoformat(),
            tick.isoformat(),
        )
    return ticked


def schedules_wait(conn: psycopg.Connection) -> float | None:
    """Seconds until the earliest next tick (0 or less: due now; ``None``: no schedule)."""
    with operation("schedules_wait"):
        row = conn.execute(QUERIES["schedules_wait"]).fetchone()
    return None if row is None or row[0] is None else float(row[0])
