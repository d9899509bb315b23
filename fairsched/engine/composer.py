"""The claim composer: a queue's policy stack rendered into one claim statement.

Candidates are locked with ``FOR UPDATE SKIP LOCKED`` in a ``MATERIALIZED``
CTE (so the planner cannot update more rows than the limit), then moved to
``running`` with ``attempt_count + 1``, ``lease_token + 1`` and an expiry in
database time. :func:`compose_claim` renders a stack into that statement with
:mod:`psycopg.sql`, cached per stack and shape. Two shapes exist:

- **job-first**: one index-ordered scan of the queue's pending jobs in the
  stack's job order, stopping at the first ``limit`` claimable rows;
- **tenant-first** (a policy orders tenants): the lowest-``pass`` active
  tenants from ``tenant_shares_pass_idx``, a quota per tenant by stride
  (the ``limit`` smallest virtual finish tags), then per tenant an
  index-ordered scan of its pending jobs; the tenants' ``pass`` and
  ``running`` advance in the same statement (last, after the jobs move,
  unless the queue has caps), and a tenant over its cap gets nothing. A
  claim of one job runs its single shape (one tenant, no quota to spread,
  no lock order to keep, charged first).

Both shapes start their scans at the queue's claim heads (``fairsched.claim_heads``:
a key at or below every pending job's, per built-in job order; ``pass_floors``: at or
below every active tenant's pass), past the dead index entries earlier claims left.
See ``docs/claim-design.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from psycopg import sql

from fairsched.policy import OrderTerm, Policy
from fairsched.policy.registry import resolve

FIFO_ORDER: tuple[OrderTerm, ...] = (
    OrderTerm("priority", descending=True),
    OrderTerm("available_at"),
    OrderTerm("id"),
)

AGING_ORDER: tuple[OrderTerm, ...] = (OrderTerm("aging_key"), OrderTerm("id"))

HEADS: dict[tuple[OrderTerm, ...], tuple[str, ...]] = {
    FIFO_ORDER: ("fifo_rank", "fifo_available_at", "fifo_id"),
    AGING_ORDER: ("aging_key", "aging_id"),
}
"""The job orders that have a claim head (``fairsched.claim_heads``), and its columns.
A claim in one of them starts its index scan at the head; any other order scans from
the start of its index."""

NEGATED = frozenset({"priority", "aging_key", "id"})
"""Numeric columns whose descending term renders as its ascending negation, so that
an order is one ascending index key a row comparison can position."""

_JOB_FIRST = """WITH q AS (
    SELECT qs.lease_seconds, qs.max_runtime_seconds,
           {heads}
      FROM fairsched.queues AS qs
      LEFT JOIN fairsched.claim_heads AS h ON h.queue_name = qs.name
     WHERE qs.name = %(queue)s
), candidate AS MATERIALIZED (
    SELECT j.id
      FROM fairsched.jobs AS j
     WHERE j.queue_name = %(queue)s AND j.status = 'pending' AND j.available_at <= now(){head}{filters}
     ORDER BY {order}
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), moved AS (
    UPDATE fairsched.jobs AS j
       SET {set_running},
           share_counted = false
      FROM q
     WHERE j.id = ANY (ARRAY(SELECT c.id FROM candidate AS c))
    RETURNING {returning}
)
SELECT m.*
  FROM unnest(ARRAY(SELECT c.id FROM candidate AS c)) WITH ORDINALITY AS c(id, n)
  JOIN moved AS m USING (id)
 ORDER BY c.n"""

_TENANT_FIRST = """WITH q AS (
    SELECT qs.lease_seconds, qs.max_runtime_seconds, qs.charge, qs.tenant_cap,{capped}
           coalesce(f.pass, '-Infinity') AS pass_floor,
           {heads}
      FROM fairsched.queues AS qs
      LEFT JOIN fairsched.claim_heads AS h ON h.queue_name = qs.name
      LEFT JOIN fairsched.pass_floors AS f ON f.queue_name = qs.name
     WHERE qs.name = %(queue)s
), tenants AS MATERIALIZED (
    SELECT t.tenant, t.weight, t.pass, t.claimed_total,
           CASE WHEN q.charge = 'runtime' THEN t.runtime_estimate ELSE 1 END AS cost,
           least(%(limit)s, coalesce(lim.cap - lim.running, %(limit)s)) AS room
      FROM fairsched.tenant_shares AS t
     CROSS JOIN q
     CROSS JOIN LATERAL (
        SELECT coalesce(t.cap, q.tenant_cap) AS cap,
               CASE WHEN coalesce(t.cap, q.tenant_cap) IS NOT NULL THEN {running} END AS running
     ) AS lim
     WHERE t.queue_name = %(queue)s AND t.active AND t.pass >= (SELECT q.pass_floor FROM q)
       AND (lim.cap IS NULL OR lim.running < lim.cap)
     ORDER BY t.pass, t.claimed_total, t.tenant
     LIMIT %(limit)s
), quota AS {quota_materialized}(
    {quota}
), candidate AS MATERIALIZED (
    SELECT c.id, qt.tenant
      FROM quota AS qt
     CROSS JOIN LATERAL (
        SELECT j.id
          FROM fairsched.jobs AS j
         WHERE j.queue_name = %(queue)s AND j.tenant = qt.tenant
           AND j.status = 'pending' AND j.available_at <= now(){head}{filters}
         ORDER BY {order}
         LIMIT qt.n
           FOR UPDATE SKIP LOCKED) AS c
{charge_and_move}"""

# How many jobs each chosen tenant gets: stride water-filling over the virtual finish
# tags ``pass + k * cost / weight``, the ``limit`` smallest. Each tenant's tags are
# generated only up to a bound the ``limit``-th smallest cannot exceed: the tenants with
# room for the whole limit hold at least ``limit`` tags at or below
# ``max(max pass, (limit + n + sum(pass * weight / cost)) / sum(weight / cost))``, since
# each holds at least ``(T - pass) * weight / cost - 1`` of them below any T at or above
# its pass (k one past the bound absorbs rounding). With none, every tenant's room is
# generated. Ten level tenants and a limit of 50: 70 tags sorted instead of 500.
# A claim of one job takes the one tenant chosen, a CTE the candidate scan inlines.
_QUOTA = """SELECT s.tenant, count(*)::int AS n
      FROM (SELECT t.tenant
              FROM tenants AS t
             CROSS JOIN (SELECT greatest(max(u.pass),
                                         (%(limit)s + count(*) + sum(u.pass * u.weight / u.cost))
                                         / sum(u.weight / u.cost)) AS tag
                           FROM tenants AS u
                          WHERE u.room >= %(limit)s) AS bound
             CROSS JOIN LATERAL generate_series(1, CASE
                    WHEN bound.tag IS NULL THEN t.room
                    ELSE least(t.room, greatest(ceil((bound.tag - t.pass) * t.weight / t.cost), 0) + 1)::int
                    END) AS k(k)
             ORDER BY t.pass + k.k * t.cost / t.weight, t.claimed_total, t.tenant
             LIMIT %(limit)s) AS s
     GROUP BY s.tenant"""
_QUOTA_ONE = "SELECT t.tenant, 1 AS n FROM tenants AS t"

# The charge. On a queue with caps (``q.capped``) it comes first and checks each
# tenant's cap on its latest row version; only jobs of tenants it charged move. On a
# queue without, the jobs move first and the charge runs last, at the end of the
# statement (a data-modifying WITH runs to completion after the main query), so
# concurrent claims hold the share rows only for the charge and their commit, not the
# jobs' move.
_CHARGE = """pass = t.pass + c.n * tn.cost / t.weight,
           running = t.running + c.n,
           claimed_total = t.claimed_total + c.n,
           charged_total = t.charged_total + c.n * tn.cost,
           updated_at = now()"""

# Whether a charge of ``c.n`` more jobs keeps the share row ``t`` within its cap, read on
# the row version the charge's update locked.
_CAP_ALLOWS = """(coalesce(t.cap, q.tenant_cap) IS NULL
            OR {running} + c.n <= coalesce(t.cap, q.tenant_cap))"""

_CAPPED = """
           qs.tenant_cap IS NOT NULL OR EXISTS (
               SELECT FROM fairsched.tenant_shares AS s
                WHERE s.queue_name = qs.name AND s.cap IS NOT NULL) AS capped,"""

# The charge at either end (see ``_CHARGE``). With caps: the candidates counted per
# tenant, their share rows locked in tenant order (one lock order everywhere), charged
# where the cap allows (``charged`` returns the ids of the jobs to move). Without:
# ``charged_last`` charges the moved jobs' tenants, in tenant order.
_CHARGE_EITHER_END = """), locked AS MATERIALIZED (
    SELECT c.tenant, c.n, c.ids
      FROM (SELECT tenant, count(*)::int AS n, array_agg(id) AS ids
              FROM candidate GROUP BY tenant ORDER BY tenant) AS c
     CROSS JOIN LATERAL (
        SELECT
          FROM fairsched.tenant_shares AS t
         WHERE t.queue_name = %(queue)s AND t.tenant = c.tenant
           FOR NO KEY UPDATE) AS l
     WHERE (SELECT q.capped FROM q)
), charged AS (
    UPDATE fairsched.tenant_shares AS t
       SET {charge}
      FROM locked AS c JOIN tenants AS tn USING (tenant), q
     WHERE t.queue_name = %(queue)s AND t.tenant = ANY (ARRAY(SELECT l.tenant FROM locked AS l))
       AND t.tenant = c.tenant
       AND {cap_allows}
    RETURNING c.ids
), moved AS (
    UPDATE fairsched.jobs AS j
       SET {set_running},
           share_counted = true
      FROM q
     WHERE j.id = ANY (ARRAY(SELECT unnest(c.ids) FROM charged AS c
                             UNION ALL
                             SELECT c.id FROM candidate AS c WHERE NOT (SELECT q.capped FROM q)))
    RETURNING {returning}
), charged_last AS (
    UPDATE fairsched.tenant_shares AS t
       SET {charge}
      FROM (SELECT m.tenant, count(*)::int AS n FROM moved AS m GROUP BY m.tenant ORDER BY m.tenant) AS c
      JOIN tenants AS tn USING (tenant)
     WHERE NOT (SELECT q.capped FROM q)
       AND t.queue_name = %(queue)s AND t.tenant = ANY (ARRAY(SELECT m.tenant FROM moved AS m))
       AND t.tenant = c.tenant
)
SELECT m.* FROM moved AS m"""

# A claim of one job charges its one share row first whatever the caps, its update
# taking the lock and checking the cap; only a charged tenant's job moves. Its one
# candidate needs no grouping, lock order or id arrays. (Rendered with both orders, a
# claim of one ran ~15% slower; through the general charge-first steps, ~4%.)
_CHARGE_ONE = """), charged AS (
    UPDATE fairsched.tenant_shares AS t
       SET {charge}
      FROM (SELECT c.id, c.tenant, 1 AS n FROM candidate AS c) AS c JOIN tenants AS tn USING (tenant), q
     WHERE t.queue_name = %(queue)s AND t.tenant = (SELECT c.tenant FROM candidate AS c)
       AND {cap_allows}
    RETURNING c.id
)
UPDATE fairsched.jobs AS j
   SET {set_running},
       share_counted = true
  FROM q
 WHERE j.id = (SELECT c.id FROM charged AS c)
RETURNING {returning}"""

_SET_RUNNING = """status = 'running',
       attempt_count = j.attempt_count + 1,
       lease_owner = %(owner)s,
       lease_token = j.lease_token + 1,
       started_at = now(),
       progress = NULL,
       lease_expires_at = now() + make_interval(
           secs => least(coalesce(%(lease_seconds)s::float8, q.lease_seconds), q.max_runtime_seconds))"""

# Heads not yet written (a queue declared before them) bound nothing.
_HEAD_COLUMNS = """coalesce(h.fifo_rank, -2147483647) AS fifo_rank,
           coalesce(h.fifo_available_at, '-infinity') AS fifo_available_at,
           coalesce(h.fifo_id, 0) AS fifo_id,
           coalesce(h.aging_key, '-Infinity') AS aging_key,
           coalesce(h.aging_id, 0) AS aging_id"""

# A tenant's running jobs: the claims its share row counted minus the releases that
# finishers recorded (read from the claim's snapshot: late, never early, so caps hold).
_TENANT_RUNNING = "(t.running - fairsched.tenant_released(t.queue_name, t.tenant))"

_RETURNING = """j.id, j.queue_name AS queue, j.lease_token AS token, j.lease_owner AS owner,
          j.lease_expires_at AS expires_at, j.tenant, j.payload, j.attempt_count AS attempt,
          j.max_attempts,
          coalesce(j.idempotency_key, 'fairsched-job-' || j.id) AS idempotency_key,
          j.priority, j.aggregate_key, j.aggregate_seq, j.created_at, j.started_at,
          coalesce(%(lease_seconds)s::float8, q.lease_seconds) AS lease_seconds"""


def stack_order(stack: Sequence[Policy]) -> tuple[OrderTerm, ...]:
    """The job order of a stack: the last policy's that gives one, else fifo's."""
    order: tuple[OrderTerm, ...] = FIFO_ORDER
    for policy in stack:
        terms = policy.job_order()
        if terms:
            order = tuple(terms)
    return order


@lru_cache(maxsize=128)
def compose_claim(names: tuple[str, ...] = ("fifo",), *, single: bool = False) -> sql.SQL:
    """The claim statement of a policy stack (cached per stack and shape, rendered: a
    composed statement would be rendered again at every execute, ~20 µs a claim).

    ``single``: the tenant-first statement of a claim of one job, which takes the one
    tenant chosen (no quota to spread) and leaves locking its share row to the charge
    (no lock order to keep). It is for ``limit`` 1 only (its charge and move read the one
    candidate as a scalar; :func:`claim_statement` picks it then), and claims what the
    general statement would; the job-first statement has one shape, whatever ``single``
    says.
    """
    stack = resolve(names)
    terms = stack_order(stack)
    order = sql.SQL(", ").join(_order_term(term) for term in terms)
    filters = [f for f in (p.claim_filter() for p in stack) if f is not None]
    rendered_filters = sql.SQL("").join(sql.SQL("\n       AND ({})").format(f) for f in filters)
    running = sql.SQL(_TENANT_RUNNING)
    parts: dict[str, sql.Composable] = {
        "filters": rendered_filters,
        "order": order,
        "heads": sql.SQL(_HEAD_COLUMNS),
        "head": _head_bound(terms, order),
        "set_running": sql.SQL(_SET_RUNNING),
        "running": running,
        "charge": sql.SQL(_CHARGE),
        "cap_allows": sql.SQL(_CAP_ALLOWS).format(running=running),
        "returning": sql.SQL(_RETURNING),
        "quota": sql.SQL(_QUOTA_ONE if single else _QUOTA),
        "quota_materialized": sql.SQL("" if single else "MATERIALIZED "),
        "capped": sql.SQL("" if single else _CAPPED),
    }
    if not any(p.orders_tenants for p in stack):
        statement = sql.SQL(_JOB_FIRST).format(**parts)
    else:
        tail = sql.SQL(_CHARGE_ONE if single else _CHARGE_EITHER_END).format(**parts)
        statement = sql.SQL(_TENANT_FIRST).format(charge_and_move=tail, **parts)
    return sql.SQL(statement.as_string(None))


def _order_term(term: OrderTerm) -> sql.Composable:
    column = sql.Identifier("j", term.column)
    if not term.descending:
        return column
    if term.column in NEGATED:
        return sql.SQL("(- {})").format(column)
    return sql.SQL("{} DESC").format(column)


def _head_bound(terms: tuple[OrderTerm, ...], order: sql.Composable) -> sql.Composable:
    """``AND (order) >= (head)`` for an order with a claim head, else nothing."""
    columns = HEADS.get(terms)
    if columns is None:
        return sql.SQL("")
    return sql.SQL("\n       AND ({}) >= (SELECT {} FROM q)").format(
        order, sql.SQL(", ").join(sql.Identifier("q", column) for column in columns)
    )
