"""Claim heads: where claims start their index scans, kept past the dead entries.

Every claim leaves a dead entry at the head of the index it scanned (the row left
``status = 'pending'``), and until VACUUM removes them each later claim walks them
again. ``fairsched.claim_heads`` holds, per queue, a key at or below every pending
job's key in a job order: the engine keeps the head of the default order
(:data:`DEFAULT_HEAD`), a policy the head of its own order
(:meth:`~fairsched.policy.Policy.claim_head`) and a tenant order its floor (a pass at
or below every active tenant's); claims start their scans there. Transitions lower them
through triggers in their own transactions; only :func:`heads_refresh` raises them,
under a lock those transactions also take, on a snapshot taken after it. See
``docs/claim-design.md``.

Claims run on generic plans, which read their job order from an index only while the
planner's statistics know of the backlog: :func:`statistics_refresh` analyzes the jobs
table when they do not.
"""

from __future__ import annotations

from functools import lru_cache

import psycopg
from psycopg import sql

from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.policy import ClaimHead, OrderTerm
from fairsched.policy.registry import registry

STATISTICS_MIN_PENDING = 1000
"""A backlog the jobs table's statistics must know of: below it, a claim that sorts the
queue's pending jobs sorts few."""

DEFAULT_ORDER: tuple[OrderTerm, ...] = (
    OrderTerm("priority", descending=True),
    OrderTerm("available_at"),
    OrderTerm("id"),
)
"""The job order of a stack none of whose policies gives one: highest priority first,
then the earliest due, then the lowest id."""

DEFAULT_HEAD = ClaimHead(
    columns=(
        ("order_rank", "-2147483647"),
        ("order_available_at", "'-infinity'"),
        ("order_id", "0"),
    ),
    behind=QUERIES["claim_heads_behind"],
    refresh=QUERIES["claim_heads_refresh"],
)
"""The head of :data:`DEFAULT_ORDER` (``013_default_claim_head.sql``)."""


def heads() -> tuple[ClaimHead, ...]:
    """Every head kept: the default order's, then each installed policy's and tenant
    order's floor, in the registry's order."""
    kept = [DEFAULT_HEAD]
    for policy in registry().values():
        order = policy.tenant_order()
        kept += [h for h in (policy.claim_head(), order.floor if order else None) if h is not None]
    return tuple(kept)


@lru_cache(maxsize=8)
def _behind(kept: tuple[ClaimHead, ...]) -> sql.Composed:
    """One read-only statement for every head of ``kept``: ``(head, queue_name)`` of the
    queues it is behind on, ``head`` its index in ``kept``."""
    return sql.SQL("\nUNION ALL\n").join(
        sql.SQL("SELECT {} AS head, b.queue_name FROM ({}) AS b").format(sql.Literal(n), sql.SQL(h.behind))
        for n, h in enumerate(kept)
    )


def heads_refresh(conn: psycopg.Connection) -> int:
    """Raise the claim heads and floors that sit below their queue's lowest live key.

    One read-only look finds, for every head, the queues behind; each of their refreshes
    is its own short transaction (a function of the head's owner): lock the row (skipped
    while a transaction that makes jobs pending or activates a tenant holds it), then read
    from the current head on. Returns how many heads were raised (a queue's heads of two
    job orders count two). ``conn`` must be in autocommit mode.
    """
    kept = heads()
    with operation("claim_heads_behind"):
        behind = conn.execute(_behind(kept)).fetchall()
    refreshed = 0
    for n, queue in behind:
        with operation("claim_heads_refresh"):
            row = conn.execute(kept[n].refresh, {"queue": queue}).fetchone()
        refreshed += bool(row and row[0])
    return refreshed


def statistics_refresh(conn: psycopg.Connection, min_pending: int = STATISTICS_MIN_PENDING) -> bool:
    """ANALYZE the jobs table when the planner takes its pending jobs for fewer than a
    tenth of what there are, and there are at least ``min_pending``; returns whether it
    ran. Without statistics (a table never analyzed) the planner guesses from the
    table's size, and where it guesses about one pending job a job-first claim's generic
    plan sorts every pending job of its queue on each claim. Skipped, returning
    ``False``, while a VACUUM or ANALYZE holds the table.
    """
    with operation("jobs_statistics_refresh"):
        row = conn.execute(QUERIES["jobs_statistics_refresh"], {"min_pending": min_pending}).fetchone()
    return bool(row and row[0])
