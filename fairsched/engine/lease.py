"""Leases: what a claim hands out, and the fenced transitions on it.

Every transition requires ``status = 'running'``, the lease owner, the lease
token and an unexpired lease (database time). Zero rows updated means the lease
is lost: the caller gets ``False``, and a completion, failure or release is
recorded as a rejected stale completion. What a transition does to the policies'
state (shares, aggregates, ``on_finish``) is :mod:`fairsched.engine.settle`'s.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import psycopg
from psycopg.rows import RowMaker
from psycopg.types.json import Jsonb

from fairsched import metrics
from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.engine.settle import jobs_settle, settle_needed, settling
from fairsched.engine.stackfunctions import StackFunction, complete_function, stack_function_ready
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
    trace_context: dict[str, str] | None = None
    """The trace context the attempt's spans continue (:mod:`fairsched.tracing`): the one
    stored at enqueue, else the claim span's; ``None`` without tracing."""


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
    """Mark leases succeeded, one statement per policy stack among their queues (one in
    all, usually); returns the ids whose lease held.

    All leases must share one owner. A stack whose tenant order settles at completion
    completes through its own function (:mod:`fairsched.engine.stackstatements`), the
    others through the engine's ``fairsched.leases_complete``.
    """
    if not leases:
        return set()
    owners = {lease.owner for lease in leases}
    if len(owners) != 1:
        raise ValueError("leases_complete takes leases of a single owner")
    queues = {lease.queue for lease in leases}
    functions = {queue: complete_function(queue_stack(conn, queue).names) for queue in queues}
    groups: dict[StackFunction | None, list[Lease]] = {}
    for lease in leases:
        groups.setdefault(functions[lease.queue], []).append(lease)
    # A transaction only for held jobs' policies, policies' on_finish hooks, and tenant
    # orders that settle what they counted after the statement.
    needed = {
        function: settle_needed(
            conn,
            {lease.queue for lease in group},
            tenant_order_settled=function is not None,
            held=in_aggregates(group),
        )
        for function, group in groups.items()
    }
    done: set[int] = set()
    with settling(conn, any(needed.values())):
        for function, group in groups.items():
            statement = (
                QUERIES["leases_complete"] if function is None else stack_function_ready(conn, function)
            )
            with operation("leases_complete"):
                rows = conn.execute(
                    statement,
                    {
                        "ids": [lease.id for lease in group],
                        "tokens": [lease.token for lease in group],
                        "owner": lease.owner,
                    },
                ).fetchall()
            completed = {row[0] for row in rows}
            if needed[function]:
                jobs_settle(conn, sorted(completed), tenant_order_settled=function is not None)
            done |= completed
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


def leases_fail(conn: psycopg.Connection, failures: Sequence[Failure]) -> dict[int, FailOutcome]:
    """Record failed attempts of one owner in one statement; the outcome of each job id."""
    if not failures:
        return {}
    owners = {f.lease.owner for f in failures}
    if len(owners) != 1:
        raise ValueError("leases_fail takes leases of a single owner")
    needed = settle_needed(
        conn, {f.lease.queue for f in failures}, held=in_aggregates(f.lease for f in failures)
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
    needed = settle_needed(conn, {lease.queue}, held=in_aggregates([lease]))
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


def in_aggregates(leases: Iterable[Lease]) -> bool:
    """Whether any of these leases' jobs belongs to an aggregate (a policy may hold it)."""
    return any(lease.aggregate_key is not None for lease in leases)
