"""weighted: tenant fair share by stride scheduling on live weights.

Each tenant of a queue has a virtual time ``pass``; a claim takes the tenants
with the lowest pass first and advances each by ``cost / weight`` per job
(cost 1, or the tenant's measured run time with ``charge = "runtime"``). A
tenant that becomes active again starts at the queue's lowest active pass (or,
when no tenant is active, the highest pass reached), so idling banks no credit.
Weights are read at claim time: a change applies to the next claim and to the
whole queued backlog.

Its part of the claim is the tenant half of the tenant-first statement
(:class:`~fairsched.policy.TenantOrder`): the lowest-``pass`` active tenants from
``tenant_shares_pass_idx`` (at or above the queue's pass floor), a quota per tenant by
stride (the ``limit`` smallest virtual finish tags), and the charge of their ``pass``
and ``running`` in the same statement (last, after the jobs move, unless the queue has
caps); a tenant over its cap gets nothing. A claim of one job takes the one tenant
chosen, with no quota to spread and no lock order to keep, and is charged first.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Annotated, Literal

import psycopg
from psycopg import sql
from pydantic import Field

from fairsched import bounds
from fairsched.db.connection import operation
from fairsched.policy import BasePolicy, ClaimHead, JobState, Pending, Setting, TenantOrder
from fairsched_policies.queuecolumns import queue_column

# A tenant's running jobs: the claims its share row counted minus the releases that
# finishers recorded (read from the claim's snapshot: late, never early, so caps hold).
_RUNNING = "(t.running - fairsched.tenant_released(t.queue_name, t.tenant))"

_QUEUE = """,
           qs.charge, qs.tenant_cap,{capped}
           coalesce(f.pass, '-Infinity') AS pass_floor"""

_JOINS = """
      LEFT JOIN fairsched.pass_floors AS f ON f.queue_name = qs.name"""

_TENANTS = """SELECT t.tenant, t.weight, t.pass, t.claimed_total,
           CASE WHEN q.charge = 'runtime' THEN t.runtime_estimate ELSE 1 END AS cost,
           least(%(limit)s, coalesce(lim.cap - lim.running, %(limit)s){admit_room}) AS room
      FROM fairsched.tenant_shares AS t
     CROSS JOIN q
     CROSS JOIN LATERAL (
        SELECT coalesce(t.cap, q.tenant_cap) AS cap,
               CASE WHEN coalesce(t.cap, q.tenant_cap) IS NOT NULL THEN {running} END AS running
     ) AS lim{admit_join}
     WHERE t.queue_name = %(queue)s AND t.active AND t.pass >= (SELECT q.pass_floor FROM q)
       AND (lim.cap IS NULL OR lim.running < lim.cap){admit_filter}
     ORDER BY t.pass, t.claimed_total, t.tenant
     LIMIT %(limit)s"""

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


def _render(template: str) -> str:
    """A template with the charge's own parts filled in (the composer fills the rest)."""
    for name, part in (("{charge}", _CHARGE), ("{cap_allows}", _CAP_ALLOWS), ("{running}", _RUNNING)):
        template = template.replace(name, part)
    return template


# After a short claim: lock (skipping busy rows) the lowest-pass active tenants that have
# nothing claimable (no pending job due that passes the stack's filters); then take them
# out of the selection, remembering when their next job is due (a tenant whose due jobs
# the filters pass over is woken again then, and looked at again).
_DRY_LOCK = """WITH q AS (SELECT qs.policy_params AS params FROM fairsched.queues AS qs \
WHERE qs.name = %(queue)s)
SELECT t.tenant
  FROM fairsched.tenant_shares t
 WHERE (t.queue_name, t.tenant) IN (
        SELECT s.queue_name, s.tenant FROM fairsched.tenant_shares s
         WHERE s.queue_name = %(queue)s AND s.active
         ORDER BY s.pass, s.claimed_total, s.tenant LIMIT %(limit)s)
   AND NOT EXISTS (SELECT 1 FROM fairsched.jobs j
                    WHERE j.queue_name = t.queue_name AND j.tenant = t.tenant
                      AND j.status = 'pending' AND j.available_at <= now(){filters})
   FOR UPDATE OF t SKIP LOCKED"""

_DRY_DEACTIVATE = """WITH q AS (SELECT qs.policy_params AS params FROM fairsched.queues AS qs \
WHERE qs.name = %(queue)s)
UPDATE fairsched.tenant_shares AS t
   SET active = false,
       ready_at = coalesce((SELECT min(j.available_at) FROM fairsched.jobs j
                             WHERE j.queue_name = t.queue_name AND j.tenant = t.tenant
                               AND j.status = 'pending'), 'infinity'),
       updated_at = now()
 WHERE t.queue_name = %(queue)s AND t.tenant = ANY(%(tenants)s::text[])
   AND NOT EXISTS (SELECT 1 FROM fairsched.jobs j
                    WHERE j.queue_name = t.queue_name AND j.tenant = t.tenant
                      AND j.status = 'pending' AND j.available_at <= now(){filters})"""

# The pass floor: at or below every active tenant's pass, where the tenant scan starts
# (tenant_shares_pass_idx). Lowered by a trigger when a tenant becomes active or its pass
# goes down; raised by fairsched.pass_floors_refresh (migrations/weighted), unless a tenant is
# being activated.
FLOOR = ClaimHead(
    columns=(),
    behind="""SELECT f.queue_name
  FROM fairsched.pass_floors AS f
 WHERE coalesce(f.pass < (
           SELECT t.pass FROM fairsched.tenant_shares AS t
            WHERE t.queue_name = f.queue_name AND t.active AND t.pass >= f.pass
            ORDER BY t.pass LIMIT 1), false)
 ORDER BY f.queue_name""",
    refresh="SELECT fairsched.pass_floors_refresh(%(queue)s)",
)

TENANT_ORDER = TenantOrder(
    queue=_render(_QUEUE.replace("{capped}", _CAPPED)),
    queue_one=_render(_QUEUE.replace("{capped}", "")),
    joins=_JOINS,
    tenants=_render(_TENANTS),
    quota=_QUOTA,
    quota_one=_QUOTA_ONE,
    charge=_render(_CHARGE_EITHER_END),
    charge_one=_render(_CHARGE_ONE),
    dry_lock=_DRY_LOCK,
    dry_deactivate=_DRY_DEACTIVATE,
    floor=FLOOR,
    activate=sql.Identifier("fairsched", "tenant_shares_activate"),
    finish=sql.Identifier("fairsched", "tenant_shares_finish"),
    caps=True,
)

# Tenants that got pending jobs (due at dues) join the selection; their share rows stay
# KEY SHARE locked until the transaction commits, so a concurrent deactivation skips them.
_ACTIVATE = "SELECT fairsched.tenant_shares_activate(%(queue)s, %(tenants)s::text[], %(dues)s::timestamptz[])"

# Jobs that left running (not succeeded: a completion settles its own): release the
# running slots their claims counted and correct runtime charges, once per claim
# (fairsched.tenant_shares_settle, migrations/weighted).
_SETTLE = "SELECT fairsched.tenant_shares_settle(%(ids)s::bigint[])"

# Inactive tenants whose delayed work came due rejoin at the lowest active pass
# (fairsched.tenant_shares_wake, migrations/weighted).
_WAKE = "SELECT queue_name, tenant, active FROM fairsched.tenant_shares_wake(%(batch)s)"


class Weighted(BasePolicy):
    """Tenants first, by virtual time; jobs within a tenant by the stack's job order."""

    name = "weighted"

    def migrations(self) -> Traversable:
        return files("fairsched_policies") / "migrations" / "weighted"

    def tenant_order(self) -> TenantOrder:
        return TENANT_ORDER

    def settles(self, *, held: bool, tenant_order_settled: bool) -> bool:
        return not tenant_order_settled

    def settle(
        self,
        conn: psycopg.Connection,
        queue: str,
        jobs: Sequence[JobState],
        *,
        left_running: bool,
        tenant_order_settled: bool,
    ) -> Sequence[Pending]:
        """Free the running slots of jobs that left running, charge their run time."""
        if left_running and not tenant_order_settled and jobs:
            with operation("tenant_shares_finish"):
                conn.execute(_SETTLE, {"ids": [job.id for job in jobs]})
        return ()

    def pending(self, conn: psycopg.Connection, queue: str, jobs: Sequence[Pending]) -> None:
        """Tenants that got pending jobs join the selection (inside the transaction that
        makes them pending)."""
        if jobs:
            with operation("tenant_shares_activate"):
                conn.execute(
                    _ACTIVATE,
                    {"queue": queue, "tenants": [j[0] for j in jobs], "dues": [j[1] for j in jobs]},
                )

    def sweep(self, conn: psycopg.Connection, *, batch: int) -> int:
        """Bring inactive tenants whose delayed jobs came due back into the selection."""
        with operation("tenant_shares_wake"):
            return len(conn.execute(_WAKE, {"batch": batch}).fetchall())

    def settings(self) -> tuple[Setting, Setting]:
        return (CHARGE, TENANT_CAP)


CHARGE = queue_column("charge", Literal["count", "runtime"], default="count", example="runtime")
"""What a claimed job costs its tenant: 1 (``count``) or its measured run time (``runtime``)."""

TENANT_CAP = queue_column(
    "tenant_cap", Annotated[int, Field(gt=0, le=bounds.CAP_MAX)], default=None, example="5"
)
"""The running jobs each tenant may have unless its share sets its own cap (none: no cap)."""
