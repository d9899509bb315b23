"""The claim: one short statement that leases the next jobs of a queue.

Candidates are locked with ``FOR UPDATE SKIP LOCKED`` in a ``MATERIALIZED``
CTE (so the planner cannot update more rows than the limit), then moved to
``running`` with ``attempt_count + 1``, ``lease_token + 1`` and an expiry in
database time. The statement is composed with :mod:`psycopg.sql` from the
queue's ordering and cached per shape.
"""

from __future__ import annotations

from functools import lru_cache

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from fairsched.db import operation
from fairsched.lease import Lease

MAX_BATCH = 1000
"""Upper bound of one claim's batch."""

FIFO_ORDER: tuple[str, ...] = ("priority DESC", "available_at", "id")


@lru_cache(maxsize=64)
def compose_claim(order: tuple[str, ...] = FIFO_ORDER) -> sql.Composed:
    """The claim statement for one ordering of ``jobs_claimable_idx``-style columns."""
    order_by = sql.SQL(", ").join(_order_term(term) for term in order)
    return sql.SQL(
        """WITH q AS (
    SELECT lease_seconds, max_runtime_seconds FROM fairsched.queues WHERE name = %(queue)s
), candidate AS MATERIALIZED (
    SELECT id
      FROM fairsched.jobs
     WHERE queue_name = %(queue)s AND status = 'pending' AND available_at <= now()
     ORDER BY {order_by}
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE fairsched.jobs AS j
   SET status = 'running',
       attempt_count = j.attempt_count + 1,
       lease_owner = %(owner)s,
       lease_token = j.lease_token + 1,
       started_at = now(),
       progress = NULL,
       lease_expires_at = now() + make_interval(
           secs => least(coalesce(%(lease_seconds)s::float8, q.lease_seconds), q.max_runtime_seconds))
  FROM candidate c, q
 WHERE j.id = c.id
RETURNING j.id, j.queue_name AS queue, j.lease_token AS token, j.lease_owner AS owner,
          j.lease_expires_at AS expires_at, j.tenant, j.payload, j.attempt_count AS attempt,
          j.max_attempts,
          coalesce(j.idempotency_key, 'fairsched-job-' || j.id) AS idempotency_key,
          j.priority, j.aggregate_key, j.aggregate_seq, j.created_at, j.started_at,
          coalesce(%(lease_seconds)s::float8, q.lease_seconds) AS lease_seconds"""
    ).format(order_by=order_by)


def _order_term(term: str) -> sql.Composable:
    column, _, direction = term.partition(" ")
    if direction not in ("", "DESC", "ASC"):
        raise ValueError(f"bad sort direction in {term!r}")
    ident = sql.Identifier(column)
    return sql.SQL("{} {}").format(ident, sql.SQL(direction)) if direction else ident


def jobs_claim(
    conn: psycopg.Connection,
    queue: str,
    *,
    owner: str,
    limit: int = 1,
    lease_seconds: float | None = None,
) -> list[Lease]:
    """Lease up to ``limit`` claimable jobs of ``queue`` to ``owner``."""
    statement = compose_claim()
    params = {"queue": queue, "owner": owner, "limit": limit, "lease_seconds": lease_seconds}
    with operation("jobs_claim"), conn.cursor(row_factory=class_row(Lease)) as cur:
        return cur.execute(statement, params).fetchall()
