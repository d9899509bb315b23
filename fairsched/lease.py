"""Leases: what a claim hands out, and the fenced transitions on it.

Every transition requires ``status = 'running'``, the lease owner, the lease
token and an unexpired lease (database time). Zero rows updated means the lease
is lost: the caller gets ``False``, and a completion, failure or release is
recorded as a rejected stale completion.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from fairsched import metrics
from fairsched.db import operation
from fairsched.sql import QUERIES


@dataclass(frozen=True)
class Lease:
    """A claimed job and the proof of ownership every later transition must present."""

    id: int
    queue: str
    token: int
    owner: str
    expires_at: datetime
    tenant: str
    payload: Any
    attempt: int
    max_attempts: int
    idempotency_key: str
    priority: int
    aggregate_key: str | None
    aggregate_seq: int | None
    created_at: datetime
    started_at: datetime
    lease_seconds: float


class FailureKind(enum.StrEnum):
    """How a failure is retried: never, with the queue's budget, or with a small budget."""

    PERMANENT = "permanent"
    RETRYABLE = "retryable"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class FailOutcome:
    """What a recorded failure did: the lease held or not, and the job's new status."""

    held: bool
    status: str | None = None
    retry_at: datetime | None = None


def lease_renew(conn: psycopg.Connection, lease: Lease, progress: Any) -> datetime | None:
    """Heartbeat: the new expiry, or ``None`` when the lease is lost.

    The lease is extended only when ``progress`` differs from the last reported
    value, and never past the queue's ``max_runtime`` from the attempt's start.
    """
    with operation("lease_renew"):
        row = conn.execute(
            QUERIES["lease_renew"],
            {
                "id": lease.id,
                "owner": lease.owner,
                "token": lease.token,
                "progress": Jsonb(progress),
                "lease_seconds": lease.lease_seconds,
            },
        ).fetchone()
    if row is None:
        metrics.HEARTBEAT_FAILURES.labels(lease.queue).inc()
        return None
    expires_at: datetime = row[0]
    return expires_at


def leases_complete(conn: psycopg.Connection, leases: Sequence[Lease]) -> set[int]:
    """Mark leases succeeded in one statement; returns the ids whose lease held.

    All leases must share one owner.
    """
    if not leases:
        return set()
    owners = {lease.owner for lease in leases}
    if len(owners) != 1:
        raise ValueError("leases_complete takes leases of a single owner")
    with operation("leases_complete"):
        rows = conn.execute(
            QUERIES["leases_complete"],
            {
                "ids": [lease.id for lease in leases],
                "tokens": [lease.token for lease in leases],
                "owner": owners.pop(),
            },
        ).fetchall()
    done = {row[0] for row in rows}
    for lease in leases:
        if lease.id not in done:
            metrics.STALE_COMPLETIONS.labels(lease.queue, "complete").inc()
    return done


def lease_fail(
    conn: psycopg.Connection, lease: Lease, *, kind: FailureKind, code: str, error: str
) -> FailOutcome:
    """Record a failed attempt: dead (permanent or exhausted) or pending after backoff."""
    with operation("lease_fail"):
        row = conn.execute(
            QUERIES["lease_fail"],
            {
                "id": lease.id,
                "owner": lease.owner,
                "token": lease.token,
                "kind": kind.value,
                "code": code,
                "error": error,
            },
        ).fetchone()
    if row is None:
        metrics.STALE_COMPLETIONS.labels(lease.queue, "fail").inc()
        return FailOutcome(held=False)
    status, available_at = row
    return FailOutcome(held=True, status=status, retry_at=available_at if status == "pending" else None)


def lease_release(conn: psycopg.Connection, lease: Lease) -> bool:
    """Give the job back unfinished (the attempt is not counted); ``False`` if lost."""
    with operation("lease_release"):
        row = conn.execute(
            QUERIES["lease_release"], {"id": lease.id, "owner": lease.owner, "token": lease.token}
        ).fetchone()
    if row is None:
        metrics.STALE_COMPLETIONS.labels(lease.queue, "release").inc()
        return False
    return True
