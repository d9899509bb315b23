"""Recovery: expired leases go back to pending (with backoff) or to dead, in bounded batches."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import psycopg

from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.engine.settle import jobs_settle, settle_needed


@dataclass(frozen=True)
class RecoveryResult:
    """Jobs moved by one sweep."""

    retried: int
    dead: int
    expired_by_queue: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.retried + self.dead


def recovery_sweep(conn: psycopg.Connection, *, batch: int = 500, max_batches: int = 100) -> RecoveryResult:
    """Sweep expired leases, ``batch`` rows per statement, until none are left or
    ``max_batches`` ran. Safe to run from many processes at once (``SKIP LOCKED``)."""
    retried = dead = 0
    by_queue: Counter[str] = Counter()
    for _ in range(max_batches):
        with conn.transaction():
            with operation("recovery_sweep"):
                rows = conn.execute(QUERIES["recovery_sweep"], {"batch": batch}).fetchall()
            jobs_settle(conn, [row[0] for row in rows if settle_needed(conn, {row[1]})])
        for _id, queue, status in rows:
            by_queue[queue] += 1
            if status == "dead":
                dead += 1
            else:
                retried += 1
        if len(rows) < batch:
            break
    tenants_wake(conn, batch=batch)
    return RecoveryResult(retried=retried, dead=dead, expired_by_queue=dict(by_queue))


def tenants_wake(conn: psycopg.Connection, *, batch: int = 500) -> int:
    """Bring inactive tenants whose delayed jobs came due back into the weighted selection."""
    with operation("tenant_shares_wake"):
        return len(conn.execute(QUERIES["tenant_shares_wake"], {"batch": batch}).fetchall())
