"""The claim: one short statement that leases the next jobs of a queue.

The statement is the queue's policy stack rendered by :mod:`fairsched.engine.composer`
(job-first, or tenant-first when a policy orders tenants; a claim of one job takes the
tenant-first statement's single shape). Here it is chosen, run on its generic plan
(claim sessions), and retried after taking dry tenants out when a tenant-first claim
came back short; the policies' ``on_claim`` hooks run on what it leased. See
``docs/claim-design.md``.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence

import psycopg
from psycopg import sql

from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.engine.composer import compose_claim
from fairsched.engine.lease import Lease, lease_row
from fairsched.engine.settle import tenants_deactivate_dry
from fairsched.engine.stackfunctions import claim_function, stack_function_ready
from fairsched.policy.registry import queue_stack, stack_tenant_order

MAX_BATCH = 1000
"""Upper bound of one claim's batch."""

DRY_RETRIES = 3
"""Tenant-first claims that came back short retry after taking dry tenants out."""


def claim_statement(names: Sequence[str], params: Mapping[str, object]) -> sql.SQL:
    """The statement a stack's claim with ``params`` (:func:`claim_params`) runs (inside
    its stack function, :func:`claim_execute`)."""
    return compose_claim(tuple(names), single=params["limit"] == 1)


def tenant_first(names: Sequence[str]) -> bool:
    """Whether a stack's claim takes the tenant-first shape (a policy orders tenants)."""
    return stack_tenant_order(names) is not None


_GENERIC_SESSIONS: weakref.WeakSet[psycopg.Connection] = weakref.WeakSet()
"""The connections :func:`claim_session_configure` made claim sessions."""


def claim_session_configure(conn: psycopg.Connection) -> None:
    """Make ``conn`` a claim session: its prepared statements run on their generic plans,
    without JIT.

    Planning a claim costs more than running it (the tenant-first statement plans in
    ~0.8 ms and runs in ~0.3), and the plan cache keeps choosing custom plans for it,
    because a generic plan cannot see the limit. The claims' generic plans are the
    same index-ordered plans (``tests/test_claim_plans.py`` checks the plans a claim
    session runs). Not seeing the limit, a generic plan's cost grows with the backlog:
    past a few 100k jobs it passes ``jit_above_cost``, and compiling its expressions
    (~70 ms) would cost each claim fifty times the claim. :class:`~fairsched.client.Client`
    opens its claim pool's connections with this.
    """
    conn.execute(QUERIES["claim_session_generic"])
    _GENERIC_SESSIONS.add(conn)


def claim_execute(cur: psycopg.Cursor[Lease], names: Sequence[str], params: dict[str, object]) -> list[Lease]:
    """Run a stack's claim statement on ``cur``, through the stack's claim function
    (:mod:`fairsched.engine.stackfunctions`: workers may write no table themselves).

    Outside a claim session (:func:`claim_session_configure`) the tenant-first
    statement still runs on its generic plan without JIT, set for its own transaction;
    the job-first statement plans in ~0.2 ms and keeps the defaults there (its custom
    plans see the limit: their cost estimates stay small whatever the backlog).
    """
    function = claim_function(tuple(names), single=params["limit"] == 1)
    statement = stack_function_ready(cur.connection, function)
    if cur.connection in _GENERIC_SESSIONS or not tenant_first(names):
        return cur.execute(statement, params).fetchall()
    with cur.connection.transaction():
        cur.connection.execute(QUERIES["claim_plan_generic"])
        return cur.execute(statement, params).fetchall()


def claim_params(queue: str, *, owner: str, limit: int, lease_seconds: float | None) -> dict[str, object]:
    """The parameters every claim shape takes."""
    return {"queue": queue, "owner": owner, "limit": limit, "lease_seconds": lease_seconds}


def jobs_claim(
    conn: psycopg.Connection,
    queue: str,
    *,
    owner: str,
    limit: int = 1,
    lease_seconds: float | None = None,
) -> list[Lease]:
    """Lease up to ``limit`` claimable jobs of ``queue`` to ``owner``.

    A tenant-first claim that comes back short takes tenants with nothing
    claimable out of the selection (so they are not walked again).
    """
    stack = queue_stack(conn, queue)
    leases: list[Lease] = []
    for _ in range(DRY_RETRIES + 1):
        params = claim_params(queue, owner=owner, limit=limit - len(leases), lease_seconds=lease_seconds)
        with operation("jobs_claim"), conn.cursor(row_factory=lease_row) as cur:
            leases += claim_execute(cur, stack.names, params)
        if not stack.tenant_ordered or len(leases) >= limit:
            break
        if not tenants_deactivate_dry(conn, queue, limit=limit, names=stack.names):
            break
    if leases:
        ids = [lease.id for lease in leases]
        for policy in stack.policies:
            policy.on_claim(conn, queue, ids)
    return leases
