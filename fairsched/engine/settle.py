"""Settling: the policy state beside the jobs, kept in step with their transitions.

Two policies keep state of their own: the weighted policy a share row per tenant
(``fairsched.tenant_shares``: active or not, pass, running) and the serial policy a
head per aggregate (``fairsched.aggregates``). Jobs becoming pending bring their tenants
into the weighted selection (:func:`tenants_activate`), a claim that came back short
takes dry tenants out (:func:`tenants_deactivate_dry`), and jobs leaving ``running``
free their slots, advance their aggregates and call each policy's ``on_finish``
(:func:`jobs_settle`), in the transaction of the transition.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime

import psycopg

from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.engine.stackfunctions import dry_function, stack_function_ready
from fairsched.policy import BasePolicy
from fairsched.policy.registry import queue_stack


def tenants_deactivate_dry(
    conn: psycopg.Connection, queue: str, *, limit: int, names: tuple[str, ...]
) -> list[str]:
    """Take the lowest-pass active tenants with nothing claimable out of the selection:
    no pending job due that passes the filters of the stack ``names``.

    The stack's dry function (:mod:`fairsched.engine.stackfunctions`) runs two statements:
    lock (skipping rows a transaction making jobs pending holds), then decide on a
    snapshot taken after the lock. Returns the tenants looked at.
    """
    statement = stack_function_ready(conn, dry_function(names))
    with operation("tenant_shares_deactivate"):
        rows = conn.execute(statement, {"queue": queue, "limit": limit}).fetchall()
    return [row[0] for row in rows]


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
        if (stack.tenant_ordered and shares) or (stack.serial and aggregates):
            return True
        if any(type(p).on_finish is not BasePolicy.on_finish for p in stack.policies):
            return True
    return False


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
        if stack.tenant_ordered and left_running and shares:
            with operation("tenant_shares_finish"):
                conn.execute(QUERIES["tenant_shares_finish"], {"ids": queue_ids})
        if any(job[3] for job in jobs):
            with operation("aggregates_finish"):
                locked = conn.execute(QUERIES["aggregates_finish"], {"ids": queue_ids}).fetchall()
            promoted = aggregates_advance(conn, [(r[0], r[1], r[2]) for r in locked])
            pending += [(tenant, due) for _id, _queue, tenant, due in promoted]
        if stack.tenant_ordered and pending:
            tenants_activate(conn, queue, [p[0] for p in pending], [p[1] for p in pending])
        for policy in stack.policies:
            policy.on_finish(conn, queue, queue_ids)
