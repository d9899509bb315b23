"""Claim heads: where claims start their index scans, kept past the dead entries.

Every claim leaves a dead entry at the head of the index it scanned (the row left
``status = 'pending'``), and until VACUUM removes them each later claim walks them
again. ``fairsched.claim_heads`` holds, per queue, a key at or below every pending
job's key in each built-in job order, and ``fairsched.pass_floors`` a pass at or below
every active tenant's; claims start their scans there. Transitions lower them through
triggers in their own transactions; only :func:`heads_refresh` raises them, under a
lock those transactions also take, on a snapshot taken after it. See
``docs/claim-design.md``.

Claims run on generic plans, which read their job order from an index only while the
planner's statistics know of the backlog: :func:`statistics_refresh` analyzes the jobs
table when they do not.
"""

from __future__ import annotations

import psycopg

from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES

STATISTICS_MIN_PENDING = 1000
"""A backlog the jobs table's statistics must know of: below it, a claim that sorts the
queue's pending jobs sorts few."""

_REFRESHES = ("claim_heads_refresh", "pass_floors_refresh")
"""The refresh statements of a queue's job heads, then of its pass floor."""


def heads_refresh(conn: psycopg.Connection) -> int:
    """Raise the claim heads and pass floors that sit below their queue's lowest live key.

    A read-only look finds the queues behind; each of their refreshes is its own short
    transaction (a function of 008_roles.sql): lock the row (skipped while a transaction
    that makes jobs pending or activates a tenant holds it), then read from the current
    head on. Returns how many rows were refreshed. ``conn`` must be in autocommit mode.
    """
    with operation("claim_heads_behind"):
        behind = conn.execute(QUERIES["claim_heads_behind"]).fetchall()
    refreshed = 0
    for queue, heads_behind, floor_behind in behind:
        due = [
            step
            for step, behind_now in zip(_REFRESHES, (heads_behind, floor_behind), strict=True)
            if behind_now
        ]
        for refresh in due:
            with operation(refresh):
                row = conn.execute(QUERIES[refresh], {"queue": queue}).fetchone()
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
