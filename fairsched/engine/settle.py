"""Settling: the policies' state beside the jobs, kept in step with their transitions.

A policy that keeps state of its own keeps it through the interface's transition points
(:mod:`fairsched.policy.interface`): jobs leaving ``running`` (and held jobs inserted,
cancelled or replayed ones) go to each policy's ``settle``, the jobs that became pending
to its ``pending``, and their ids to its ``on_finish`` hook, all in the transaction of
the transition (:func:`jobs_settle`). A tenant-first claim that came back short takes
the tenant order's dry tenants out (:func:`tenants_deactivate_dry`).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext

import psycopg

from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.engine.stackfunctions import dry_function, stack_function_ready
from fairsched.policy import BasePolicy, JobState, Pending
from fairsched.policy.registry import QueueStack, queue_stack


def tenants_deactivate_dry(
    conn: psycopg.Connection, queue: str, *, limit: int, names: tuple[str, ...]
) -> list[str]:
    """Take the tenants the stack ``names`` would choose first that have nothing claimable
    (no pending job due that passes the stack's filters) out of its tenant order.

    The stack's dry function (:mod:`fairsched.engine.stackfunctions`) runs the tenant
    order's two statements: lock (skipping rows a transaction making jobs pending holds),
    then decide on a snapshot taken after the lock. Returns the tenants looked at.
    """
    statement = stack_function_ready(conn, dry_function(names))
    with operation("tenant_shares_deactivate"):
        rows = conn.execute(statement, {"queue": queue, "limit": limit}).fetchall()
    return [row[0] for row in rows]


def settling(conn: psycopg.Connection, needed: bool) -> AbstractContextManager[object]:
    """A transaction around a transition and its settling, when there is state to settle."""
    return conn.transaction() if needed else nullcontext()


def settle_needed(
    conn: psycopg.Connection, queues: set[str], *, tenant_order_settled: bool = False, held: bool = True
) -> bool:
    """Whether jobs of these queues leaving ``running`` touch any policy's state
    (``tenant_order_settled``: the transition's statement settled what the tenant order
    counted; ``held=False``: none of the jobs was held)."""
    for queue in queues:
        stack = queue_stack(conn, queue)
        if any(p.settles(held=held, tenant_order_settled=tenant_order_settled) for p in stack.policies):
            return True
        if any(type(p).on_finish is not BasePolicy.on_finish for p in stack.policies):
            return True
    return False


def jobs_settle(
    conn: psycopg.Connection,
    ids: Sequence[int],
    *,
    left_running: bool = True,
    tenant_order_settled: bool = False,
) -> None:
    """Policy state after jobs left ``running`` (``left_running``), or were cancelled or
    replayed: each policy of their queue's stack settles them, learns of the jobs that are
    pending now, and its ``on_finish`` hook runs. Run it in the transaction of the
    transition."""
    if not ids:
        return
    with operation("jobs_settle"):
        rows = conn.execute(QUERIES["jobs_settle_state"], {"ids": list(ids)}).fetchall()
    by_queue: dict[str, list[JobState]] = {}
    for job_id, queue, tenant, status, key, available_at in rows:
        by_queue.setdefault(queue, []).append(JobState(job_id, tenant, status, key, available_at))
    for queue, jobs in by_queue.items():
        stack = queue_stack(conn, queue)
        settle_jobs(conn, stack, jobs, left_running=left_running, tenant_order_settled=tenant_order_settled)
        for policy in stack.policies:
            policy.on_finish(conn, queue, [job.id for job in jobs])


def settle_jobs(
    conn: psycopg.Connection,
    stack: QueueStack,
    jobs: Sequence[JobState],
    *,
    left_running: bool,
    tenant_order_settled: bool = False,
) -> None:
    """``jobs`` of the queue of ``stack`` through each policy's ``settle``, then the jobs
    pending now (theirs and those a policy made pending) through each one's ``pending``."""
    pending: list[Pending] = [(job.tenant, job.available_at) for job in jobs if job.status == "pending"]
    for policy in stack.policies:
        pending += policy.settle(
            conn, stack.queue, jobs, left_running=left_running, tenant_order_settled=tenant_order_settled
        )
    if pending:
        for policy in stack.policies:
            policy.pending(conn, stack.queue, pending)
