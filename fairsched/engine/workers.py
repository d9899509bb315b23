"""The worker registry (``fairsched.workers``): which worker processes run, serving which
queues with how many slots. Workers report at start and every
:data:`REPORT_SECONDS`; a worker not heard from for :data:`LIVE_SECONDS` counts as gone."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import psycopg
from psycopg.types.json import Jsonb

from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES

REPORT_SECONDS = 10.0
"""How often a running worker renews its row."""
LIVE_SECONDS = 60.0
"""A worker whose row is older than this is not counted."""


@dataclass(frozen=True)
class QueueWorkers:
    """The live workers serving a queue, their slots for it, and their claims per second
    (between each worker's last two reports)."""

    workers: int
    slots: int
    claims_per_second: float = 0.0


def worker_seen(
    conn: psycopg.Connection, owner: str, queues: Mapping[str, int], claimed: Mapping[str, int]
) -> None:
    """Register (or renew) worker ``owner`` serving ``queues`` (queue → slots), having
    claimed ``claimed`` jobs of each since it started."""
    params = {"owner": owner, "queues": Jsonb(dict(queues)), "claimed": Jsonb(dict(claimed))}
    with operation("worker_seen"):
        conn.execute(QUERIES["worker_seen"], params)


def worker_gone(conn: psycopg.Connection, owner: str) -> None:
    """Worker ``owner`` stopped: its row goes."""
    with operation("worker_gone"):
        conn.execute(QUERIES["worker_gone"], {"owner": owner})


def workers_by_queue(conn: psycopg.Connection) -> dict[str, QueueWorkers]:
    """Per queue, the live workers and their slots."""
    with operation("workers_by_queue"):
        rows = conn.execute(QUERIES["workers_by_queue"], {"within": LIVE_SECONDS}).fetchall()
    return {
        queue: QueueWorkers(int(workers), int(slots), float(rate)) for queue, workers, slots, rate in rows
    }
