"""Leases: what a claim hands out, and the fenced transitions on it.

Every transition requires ``status = 'running'``, the lease owner, the lease
token and an unexpired lease (database time). Zero rows updated means the lease
is lost: the caller gets ``False``, and a completion, failure or release is
recorded as a rejected stale completion.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import psycopg
from psycopg.rows import RowMaker
from psycopg.types.json import Jsonb

from fairsched import metrics
from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.policy import BasePolicy
from fairsched.policy.registry import queue_stack

if TYPE_CHECKING:
    from psycopg._cursor_base import BaseCursor  # the cursor type row factories take


class Lease(NamedTuple):
    """A claimed job and the proof of ownership every later transition must present.

    A named tuple: a claim builds one per job from its row as it comes (see
    :func:`lease_row`) for ~0.6 µs, where a frozen dataclass built by keywords took ~8.
    """

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


def lease_row(cursor: BaseCursor[Any, Any]) -> RowMaker[Lease]:
    """Row factory of the claim statements, whose ``RETURNING`` lists :class:`Lease`'s
    fields in order (checked once per result, by name)."""
    if cursor.description is not None:
        names = tuple(column.name for column in cursor.description)
        if names != Lease._fields:
            raise TypeError(f"a claim returned columns {names}, not Lease's {Lease._fields}")
    return Lease._make


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
    ``None`` means no progress was reported: it never renews.
    """
    with operation("lease_renew"):
        row = conn.execute(
            QUERIES["lease_renew"],
            {
                "id": lease.id,
                "owner": lease.owner,
                "token": lease.token,
                "progress": None if progress is None else Jsonb(progress),
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
    # The statement settles the shares itself: a transaction only for serial
    # aggregates and policies' on_finish hooks.
    needed = settle_needed(
        conn, {lease.queue for lease in leases}, shares=False, aggregates=in_aggregates(leases)
    )
    with settling(conn, needed):
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
        if needed:
            jobs_settle(conn, sorted(done), shares=False)
    for lease in leases:
        if lease.id not in done:
            metrics.STALE_COMPLETIONS.labels(lease.queue, "complete").inc()
    return done


@dataclass(frozen=True)
class Failure:
    """A failed attempt to record: the lease, how to retry, and the bounded error."""

    lease: Lease
    kind: FailureKind
    code: str
    error: str


def lease_fail(
    conn: psycopg.Connection, lease: Lease, *, kind: FailureKind, code: str, error: str
) -> FailOutcome:
    """Record a failed attempt: dead (permanent or exhausted) or pending after backoff."""
    return leases_fail(conn, [Failure(lease, kind, code, error)])[lease.id]


def leases_fail(conn: psycopg.Connection, failures: Sequence[Failure]) -> dict[int, FailOutcome]:
    """Record failed attempts of one owner in one statement; the outcome of each job id."""
    if not failures:
        return {}
    owners = {f.lease.owner for f in failures}
    if len(owners) != 1:
        raise ValueError("leases_fail takes leases of a single owner")
    needed = settle_needed(
        conn, {f.lease.queue for f in failures}, aggregates=in_aggregates(f.lease for f in failures)
    )
    with settling(conn, needed):
        with operation("leases_fail"):
            rows = conn.execute(
                QUERIES["leases_fail"],
                {
                    "ids": [f.lease.id for f in failures],
                    "tokens": [f.lease.token for f in failures],
                    "kinds": [f.kind.value for f in failures],
                    "codes": [f.code for f in failures],
                    "errors": [f.error for f in failures],
                    "owner": owners.pop(),
                },
            ).fetchall()
        if rows and needed:
            jobs_settle(conn, sorted(row[0] for row in rows))
    moved = {job_id: (status, available_at) for job_id, status, available_at in rows}
    outcomes: dict[int, FailOutcome] = {}
    for failure in failures:
        job_id = failure.lease.id
        if job_id not in moved:
            metrics.STALE_COMPLETIONS.labels(failure.lease.queue, "fail").inc()
            outcomes[job_id] = FailOutcome(held=False)
            continue
        status, available_at = moved[job_id]
        retry_at = available_at if status == "pending" else None
        outcomes[job_id] = FailOutcome(held=True, status=status, retry_at=retry_at)
    return outcomes


def lease_release(conn: psycopg.Connection, lease: Lease) -> bool:
    """Give the job back unfinished (the attempt is not counted); ``False`` if lost."""
    needed = settle_needed(conn, {lease.queue}, aggregates=in_aggregates([lease]))
    with settling(conn, needed):
        with operation("lease_release"):
            row = conn.execute(
                QUERIES["lease_release"], {"id": lease.id, "owner": lease.owner, "token": lease.token}
            ).fetchone()
        if row is not None and needed:
            jobs_settle(conn, [lease.id])
    if row is None:
        metrics.STALE_COMPLETIONS.labels(lease.queue, "release").inc()
        return False
    return True


def tenants_deactivate_dry(conn: psycopg.Connection, queue: str, *, limit: int) -> list[str]:
    """Take the lowest-pass active tenants with nothing claimable out of the selection.

    Two statements: lock (skipping rows a transaction making jobs pending holds),
    then decide on a snapshot taken after the lock. Returns the tenants looked at.
    """
    with operation("tenant_shares_deactivate"), conn.transaction():
        rows = conn.execute(QUERIES["tenant_shares_lock_dry"], {"queue": queue, "limit": limit}).fetchall()
        tenants = [row[0] for row in rows]
        if tenants:
            conn.execute(QUERIES["tenant_shares_deactivate"], {"queue": queue, "tenants": tenants})
    return tenants


def tenants_activate(
    conn: psycopg.Connection, queue: str, tenants: Sequence[str], dues: Sequence[datetime]
) -> None:
    """Tenants that got pending jobs (due at ``dues``) join the weighted selection.

    Call inside the transaction that makes the jobs pending: the share rows stay
    KEY SHARE locked until it commits, so a concurrent deactivation skips them.
    """
    if not tenants:
        return
    with operation("tenant_shares_activate"):
        conn.execute(
            QUERIES["tenant_shares_activate"],
            {"queue": queue, "tenants": list(tenants), "dues": list(dues)},
        )


def aggregates_advance(
    conn: psycopg.Connection, keys: Sequence[tuple[str, str, str]]
) -> list[tuple[int, str, str, datetime]]:
    """Promote the next job of free aggregates ``(queue, tenant, key)``; returns the promoted."""
    if not keys:
        return []
    with operation("aggregates_advance"):
        rows = conn.execute(
            QUERIES["aggregates_advance"],
            {
                "queues": [k[0] for k in keys],
                "tenants": [k[1] for k in keys],
                "keys": [k[2] for k in keys],
            },
        ).fetchall()
    return [(row[0], row[1], row[2], row[3]) for row in rows]


def settling(conn: psycopg.Connection, needed: bool) -> AbstractContextManager[object]:
    """A transaction around a transition and its settling, when there is state to settle."""
    return conn.transaction() if needed else nullcontext()


def settle_needed(
    conn: psycopg.Connection, queues: set[str], *, shares: bool = True, aggregates: bool = True
) -> bool:
    """Whether jobs of these queues leaving ``running`` touch any policy state (other
    than the weighted shares, with ``shares=False``; other than serial aggregates, with
    ``aggregates=False``: none of the jobs belongs to one)."""
    for queue in queues:
        stack = queue_stack(conn, queue)
        if (stack.weighted and shares) or (stack.serial and aggregates):
            return True
        if any(type(p).on_finish is not BasePolicy.on_finish for p in stack.policies):
            return True
    return False


def in_aggregates(leases: Iterable[Lease]) -> bool:
    """Whether any of these leases' jobs belongs to a serial aggregate."""
    return any(lease.aggregate_key is not None for lease in leases)


def jobs_settle(
    conn: psycopg.Connection, ids: Sequence[int], *, left_running: bool = True, shares: bool = True
) -> None:
    """Policy state after jobs left ``running`` (or came back to ``pending``).

    Frees weighted running slots and charges run time (unless ``shares=False``: the
    transition's statement did), advances serial
    aggregates (a dead head blocks in poison mode ``block``), brings tenants
    with pending work back into the selection, and calls each policy's
    ``on_finish``. Run it in the transaction of the transition.
    """
    if not ids:
        return
    with operation("jobs_settle"):
        rows = conn.execute(QUERIES["jobs_settle_state"], {"ids": list(ids)}).fetchall()
    by_queue: dict[str, list[tuple[int, str, str, bool, str | None, datetime]]] = {}
    for job_id, queue, tenant, status, serial, key, available_at in rows:
        by_queue.setdefault(queue, []).append((job_id, tenant, status, serial, key, available_at))
    for queue, jobs in by_queue.items():
        stack = queue_stack(conn, queue)
        queue_ids = [job[0] for job in jobs]
        pending = [(job[1], job[5]) for job in jobs if job[2] == "pending"]
        if stack.weighted and left_running and shares:
            with operation("tenant_shares_finish"):
                conn.execute(QUERIES["tenant_shares_finish"], {"ids": queue_ids})
        if any(job[3] for job in jobs):
            with operation("aggregates_finish"):
                locked = conn.execute(QUERIES["aggregates_finish"], {"ids": queue_ids}).fetchall()
            promoted = aggregates_advance(conn, [(r[0], r[1], r[2]) for r in locked])
            pending += [(tenant, due) for _id, _queue, tenant, due in promoted]
        if stack.weighted and pending:
            tenants_activate(conn, queue, [p[0] for p in pending], [p[1] for p in pending])
        for policy in stack.policies:
            policy.on_finish(conn, queue, queue_ids)
