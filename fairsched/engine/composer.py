"""The claim composer: a queue's policy stack rendered into one claim statement.

Candidates are locked with ``FOR UPDATE SKIP LOCKED`` in a ``MATERIALIZED``
CTE (so the planner cannot update more rows than the limit), then moved to
``running`` with ``attempt_count + 1``, ``lease_token + 1`` and an expiry in
database time. :func:`compose_claim` renders a stack's extension points
(:mod:`fairsched.policy.interface`) into that statement with :mod:`psycopg.sql`,
cached per stack and shape. Two shapes exist:

- **job-first** (no policy orders tenants): one index-ordered scan of the queue's
  pending jobs in the stack's job order, stopping at the first ``limit`` claimable rows;
- **tenant-first**: the tenant order's ``tenants`` and ``quota`` choose tenants and how
  many jobs each gets, then per tenant an index-ordered scan of its pending jobs in
  the stack's job order; the tenant order's tail charges and moves them. A claim of
  one job takes the tenant order's ``*_one`` parts.

Filters join every scan's ``WHERE``. An admission passes over tenants out of budget
(and bounds a chosen tenant's room) and, after the scan, keeps per tenant the
candidates its ``admit`` function admits.

Scans start at the queue's claim head of the stack's job order (``fairsched.claim_heads``:
a key at or below every pending job's; :mod:`fairsched.engine.claimheads`), past the dead
index entries earlier claims left, when the order has one. See ``docs/claim-design.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from psycopg import sql

from fairsched.engine.claimheads import DEFAULT_HEAD, DEFAULT_ORDER
from fairsched.policy import ClaimHead, OrderTerm, Policy
from fairsched.policy.registry import resolve, stack_tenant_order

NOT_NEGATED = frozenset({"available_at"})
"""Order columns that are not numbers: a descending term of one renders ``DESC``; of any
other, as its ascending negation, so that an order is one ascending index key a row
comparison can position."""

_JOB_FIRST = """WITH q AS (
    SELECT qs.lease_seconds, qs.max_runtime_seconds, qs.policy_params AS params{heads}
      FROM fairsched.queues AS qs
      LEFT JOIN fairsched.claim_heads AS h ON h.queue_name = qs.name
     WHERE qs.name = %(queue)s
), {scanned} AS MATERIALIZED (
    SELECT j.id{tenant}
      FROM fairsched.jobs AS j
     WHERE j.queue_name = %(queue)s AND j.status = 'pending' AND j.available_at <= now(){head}{filters}
     ORDER BY {order}
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED{admitted}
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
    SELECT qs.lease_seconds, qs.max_runtime_seconds, qs.policy_params AS params{queue}{heads}
      FROM fairsched.queues AS qs
      LEFT JOIN fairsched.claim_heads AS h ON h.queue_name = qs.name{joins}
     WHERE qs.name = %(queue)s
), tenants AS MATERIALIZED (
    {tenants}
), quota AS {quota_materialized}(
    {quota}
), {scanned} AS MATERIALIZED (
    SELECT c.id, qt.tenant
      FROM quota AS qt
     CROSS JOIN LATERAL (
        SELECT j.id
          FROM fairsched.jobs AS j
         WHERE j.queue_name = %(queue)s AND j.tenant = qt.tenant
           AND j.status = 'pending' AND j.available_at <= now(){head}{filters}
         ORDER BY {order}
         LIMIT qt.n
           FOR UPDATE SKIP LOCKED) AS c{admitted}
{charge_and_move}"""

# A stack with an admission scans its candidates as ``scanned``; the admission's
# ``admit`` function is called once with them counted per tenant (tenants in order:
# its lock order), and ``candidate`` keeps, per tenant, the first of them it admits,
# in the scan's order.
_ADMITTED = """
), admitted AS MATERIALIZED (
    SELECT a.tenant, a.admitted
      FROM (SELECT array_agg(d.tenant ORDER BY d.tenant) AS tenants,
                   array_agg(d.n ORDER BY d.tenant) AS wanted
              FROM (SELECT s.tenant, count(*)::int AS n FROM scanned AS s GROUP BY s.tenant) AS d) AS d
     CROSS JOIN LATERAL {admit}(%(queue)s, d.tenants, d.wanted) AS a(tenant, admitted)
     WHERE d.tenants IS NOT NULL
), candidate AS MATERIALIZED (
    SELECT s.id, s.tenant
      FROM (SELECT s.id, s.tenant, s.n, row_number() OVER (PARTITION BY s.tenant ORDER BY s.n) AS k
              FROM (SELECT s.id, s.tenant, row_number() OVER () AS n FROM scanned AS s) AS s) AS s
      LEFT JOIN admitted AS a USING (tenant)
     WHERE a.tenant IS NULL OR s.k <= a.admitted
     ORDER BY s.n"""

# A tenant out of budget is passed over, and a tenant-first claim gives a tenant no more
# room than its budget, read once per tenant.
_ADMIT_FILTER = "\n       AND coalesce({budget} >= 1, true)"
_ADMIT_JOIN = "\n     CROSS JOIN LATERAL (SELECT {budget}(%(queue)s, t.tenant) AS budget) AS admit"
_ADMIT_ROOM = ", coalesce(floor(admit.budget)::int, %(limit)s)"

_SET_RUNNING = """status = 'running',
       attempt_count = j.attempt_count + 1,
       lease_owner = %(owner)s,
       lease_token = j.lease_token + 1,
       started_at = now(),
       progress = NULL,
       lease_expires_at = now() + make_interval(
           secs => least(coalesce(%(lease_seconds)s::float8, q.lease_seconds), q.max_runtime_seconds))"""

_RETURNING = """j.id, j.queue_name AS queue, j.lease_token AS token, j.lease_owner AS owner,
          j.lease_expires_at AS expires_at, j.tenant, j.payload, j.attempt_count AS attempt,
          j.max_attempts,
          coalesce(j.idempotency_key, 'fairsched-job-' || j.id) AS idempotency_key,
          j.priority, j.aggregate_key, j.aggregate_seq, j.created_at, j.started_at,
          coalesce(%(lease_seconds)s::float8, q.lease_seconds) AS lease_seconds, j.trace_context"""


def stack_order(stack: Sequence[Policy]) -> tuple[tuple[OrderTerm, ...], ClaimHead | None]:
    """The job order of a stack and its claim head: the last policy's that gives an order
    (with the policy's head; the default order's head when its order is the default),
    else the default order."""
    order: tuple[OrderTerm, ...] = DEFAULT_ORDER
    head: ClaimHead | None = DEFAULT_HEAD
    for policy in stack:
        terms = policy.job_order()
        if terms:
            order = tuple(terms)
            head = policy.claim_head() or (DEFAULT_HEAD if order == DEFAULT_ORDER else None)
    return order, head


@lru_cache(maxsize=128)
def stack_filters(names: tuple[str, ...]) -> sql.Composable:
    """The stack's claim filters as ``AND (...)`` terms over the job row ``j``."""
    filters = [f for f in (p.claim_filter() for p in resolve(names)) if f is not None]
    return sql.SQL("").join(sql.SQL("\n       AND ({})").format(f) for f in filters)


@lru_cache(maxsize=128)
def compose_claim(names: tuple[str, ...], *, single: bool = False) -> sql.SQL:
    """The claim statement of a policy stack (cached per stack and shape, rendered: a
    composed statement would be rendered again at every execute, ~20 µs a claim).

    ``single``: the tenant-first statement of a claim of one job, built from the tenant
    order's ``*_one`` parts. It is for ``limit`` 1 only (:func:`claim_statement` picks
    it then) and claims what the general statement would; the job-first statement has
    one shape, whatever ``single`` says.
    """
    stack = resolve(names)
    terms, head = stack_order(stack)
    order = sql.SQL(", ").join(_order_term(term) for term in terms)
    admission = next((a for a in (p.admission() for p in stack) if a is not None), None)
    tenant_order = stack_tenant_order(names)
    rendered_filters = stack_filters(names)
    parts: dict[str, sql.Composable] = {
        "filters": rendered_filters,
        "order": order,
        "heads": _head_columns(head),
        "head": _head_bound(head, order),
        "set_running": sql.SQL(_SET_RUNNING),
        "returning": sql.SQL(_RETURNING),
        "scanned": sql.SQL("scanned" if admission else "candidate"),
        "tenant": sql.SQL(", j.tenant" if admission and not tenant_order else ""),
        "admitted": sql.SQL(""),
        "admit_join": sql.SQL(""),
        "admit_filter": sql.SQL(""),
        "admit_room": sql.SQL(""),
    }
    if admission is not None:
        parts["admitted"] = sql.SQL(_ADMITTED).format(admit=admission.admit)
        if tenant_order is None:
            budget = sql.SQL("{}(%(queue)s, j.tenant)").format(admission.budget)
            parts["filters"] = sql.Composed([rendered_filters, sql.SQL(_ADMIT_FILTER).format(budget=budget)])
        else:
            parts["admit_join"] = sql.SQL(_ADMIT_JOIN).format(budget=admission.budget)
            parts["admit_filter"] = sql.SQL(_ADMIT_FILTER).format(budget=sql.SQL("admit.budget"))
            parts["admit_room"] = sql.SQL(_ADMIT_ROOM)
    if tenant_order is None:
        statement = sql.SQL(_JOB_FIRST).format(**parts)
    else:
        template = {
            "queue": tenant_order.queue_one if single else tenant_order.queue,
            "joins": tenant_order.joins,
            "tenants": tenant_order.tenants,
            "quota": tenant_order.quota_one if single else tenant_order.quota,
            "quota_materialized": "" if single else "MATERIALIZED ",
            "charge_and_move": tenant_order.charge_one if single else tenant_order.charge,
        }
        filled = {key: sql.SQL(value).format(**parts) for key, value in template.items()}
        statement = sql.SQL(_TENANT_FIRST).format(**filled, **parts)
    return sql.SQL(statement.as_string(None))


def _order_term(term: OrderTerm) -> sql.Composable:
    column = sql.Identifier("j", term.column)
    if not term.descending:
        return column
    if term.column in NOT_NEGATED:
        return sql.SQL("{} DESC").format(column)
    return sql.SQL("(- {})").format(column)


def _head_columns(head: ClaimHead | None) -> sql.Composable:
    """The head's columns in the ``q`` CTE (unset: a value below every key)."""
    if head is None:
        return sql.SQL("")
    return sql.SQL("").join(
        sql.SQL(",\n           coalesce({}, {}) AS {}").format(
            sql.Identifier("h", column), sql.SQL(unset), sql.Identifier(column)
        )
        for column, unset in head.columns
    )


def _head_bound(head: ClaimHead | None, order: sql.Composable) -> sql.Composable:
    """``AND (order) >= (head)`` for an order with a claim head, else nothing."""
    if head is None:
        return sql.SQL("")
    return sql.SQL("\n       AND ({}) >= (SELECT {} FROM q)").format(
        order, sql.SQL(", ").join(sql.Identifier("q", column) for column, _ in head.columns)
    )
