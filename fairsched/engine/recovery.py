"""Recovery: expired leases go back to pending (with backoff) or to dead, in bounded batches.

One queue cannot hold up the others: when a batch fails (a queue's settings or policy
state the statement cannot compute with, a policy hook that raises), the sweep goes on
queue by queue, each in its own transactions. A queue that fails alone is logged and
counted in ``fairsched_recovery_failures_total{queue}``; its expired leases stay until a
sweep succeeds, and every other queue's are recovered meanwhile.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from fairsched import metrics
from fairsched.db.connection import operation, redact
from fairsched.db.sql import QUERIES
from fairsched.engine.settle import jobs_settle, settle_needed
from fairsched.errors import DatabaseUnavailable, FairschedError
from fairsched.policy.registry import registry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecoveryResult:
    """Jobs moved by one sweep, and the queues that could not be swept (with the reason)."""

    retried: int
    dead: int
    expired_by_queue: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    cancelled: int = 0
    """Expired leases of jobs with a cancel request: ended cancelled."""

    @property
    def total(self) -> int:
        return self.retried + self.dead + self.cancelled


@dataclass
class _Tally:
    retried: int = 0
    dead: int = 0
    cancelled: int = 0
    by_queue: Counter[str] = field(default_factory=Counter)

    def add(self, rows: list[tuple[Any, ...]]) -> None:
        for _id, queue, status in rows:
            self.by_queue[queue] += 1
            if status == "dead":
                self.dead += 1
            elif status == "cancelled":
                self.cancelled += 1
            else:
                self.retried += 1


def recovery_sweep(conn: psycopg.Connection, *, batch: int = 500, max_batches: int = 100) -> RecoveryResult:
    """Sweep expired leases, ``batch`` rows per statement, until none are left or
    ``max_batches`` ran. Safe to run from many processes at once (``SKIP LOCKED``).

    When a batch fails, every queue is swept on its own instead (``max_batches`` each):
    a queue that fails again is in ``failed``, logged and counted, and the others are
    recovered. An error no queue is at fault for (a lost connection, a session limit, a
    missing privilege) fails the whole sweep.
    """
    tally = _Tally()
    failed: dict[str, str] = {}
    try:
        _batches(conn, tally, {"batch": batch, "queue": None}, max_batches)
    except Exception as e:
        _reraise_if_fatal(conn, e)
        with operation("recovery_queues"):
            queues = [name for (name,) in conn.execute(QUERIES["prune_queues"]).fetchall()]
        for queue in queues:
            try:
                _batches(conn, tally, {"batch": batch, "queue": queue}, max_batches)
            except Exception as e:
                _reraise_if_fatal(conn, e)
                failed[queue] = _recovery_failed(queue, e)
    policies_sweep(conn, batch=batch)
    return RecoveryResult(tally.retried, tally.dead, dict(tally.by_queue), failed, tally.cancelled)


def _batches(
    conn: psycopg.Connection,
    tally: _Tally,
    params: dict[str, Any],
    max_batches: int,
) -> None:
    """Run the sweep (``params``: every queue, or one) batch by batch, each in its own
    transaction with the settling of
    the jobs it moved, until a batch comes back short."""
    for _ in range(max_batches):
        with conn.transaction():
            with operation("recovery_sweep"):
                rows = conn.execute(QUERIES["recovery_sweep"], params).fetchall()
            jobs_settle(conn, [row[0] for row in rows if settle_needed(conn, {row[1]})])
        tally.add(rows)
        if len(rows) < params["batch"]:
            return


_NO_QUEUES_FAULT = (psycopg.OperationalError, pg_errors.InsufficientPrivilege, pg_errors.UndefinedTable)
"""Driver errors that would fail every queue alike: a lost connection or server, a session
limit (lock or statement timeout), a missing privilege, a missing schema."""


def _reraise_if_fatal(conn: psycopg.Connection, error: Exception) -> None:
    """Errors no queue is at fault for fail the sweep as a whole (see :data:`_NO_QUEUES_FAULT`)."""
    cause = error if isinstance(error, psycopg.Error) else error.__cause__
    if conn.broken or isinstance(error, DatabaseUnavailable) or isinstance(cause, _NO_QUEUES_FAULT):
        raise error


def _recovery_failed(queue: str, error: Exception) -> str:
    """Log and count one queue's failed sweep; returns the reason."""
    reason = redact(" ".join(str(error).split()))
    metrics.RECOVERY_FAILURES.labels(queue).inc()
    expected = isinstance(error, FairschedError | psycopg.Error)
    log.warning(
        "recovery of queue %s failed (%s); its expired leases stay until a sweep succeeds, "
        "other queues are recovered",
        queue,
        reason,
        exc_info=None if expected else error,
    )
    return reason


def policies_sweep(conn: psycopg.Connection, *, batch: int = 500) -> int:
    """Every installed policy's periodic upkeep (its ``sweep``, each at most ``batch``
    rows); returns how many rows they changed."""
    return sum(policy.sweep(conn, batch=batch) for policy in registry().values())
