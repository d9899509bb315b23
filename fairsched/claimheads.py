"""Claim heads: where claims start their index scans, kept past the dead entries.

Every claim leaves a dead entry at the head of the index it scanned (the row left
``status = 'pending'``), and until VACUUM removes them each later claim walks them
again. ``fairsched.claim_heads`` holds, per queue, a key at or below every pending
job's key in each built-in job order, and ``fairsched.pass_floors`` a pass at or below
every active tenant's; claims start their scans there. Transitions lower them through
triggers in their own transactions; only :func:`heads_refresh` raises them, under a
lock those transactions also take, on a snapshot taken after it. See
``migrations/043_claim_heads.sql`` for the argument and ``docs/claim-design.md``.
"""

from __future__ import annotations

import psycopg

from fairsched.db import operation
from fairsched.sql import QUERIES

_REFRESHES = (("claim_heads_lock", "claim_heads_refresh"), ("pass_floors_lock", "pass_floors_refresh"))
"""The lock and refresh statements of a queue's job heads, then of its pass floor."""


def heads_refresh(conn: psycopg.Connection) -> int:
    """Raise the claim heads and pass floors that sit below their queue's lowest live key.

    A read-only look finds the queues behind; each of their refreshes is its own short
    transaction: lock the row (skipped while a transaction that makes jobs pending or
    activates a tenant holds it), then read from the current head on. Returns how many
    rows were refreshed. ``conn`` must be in autocommit mode.
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
        for lock, refresh in due:
            with operation(refresh), conn.transaction():
                if conn.execute(QUERIES[lock], {"queue": queue}).fetchone() is None:
                    continue
                conn.execute(QUERIES[refresh], {"queue": queue})
                refreshed += 1
    return refreshed
