"""A stack's enqueue and completion statements: the engine's insert and its fenced
completion, with what the stack's policies add to them.

- **Enqueue** inserts a batch in one statement. The jobs' own columns are the
  engine's; each policy's :meth:`~fairsched.policy.Policy.enqueue_columns` add the
  columns it owns; a stack that holds jobs back inserts the jobs of an aggregate
  ``waiting``; a tenant order's ``activate`` function learns of the batch's tenants in
  the same statement (unless the caller settles them after, ``%(activate)s`` false);
  NOTIFY wakes the workers when the queue sends it.
- **Completion** marks leases succeeded, fenced by owner, token and expiry, and records
  every lease that no longer held; a tenant order's ``finish`` function settles what it
  counted at claim, in the same statement.

Both run as functions of the stack, installed by :mod:`fairsched.engine.stackfunctions`.
"""

from __future__ import annotations

import re
from functools import lru_cache

from psycopg import sql

from fairsched.policy.registry import resolve, stack_tenant_order

_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

ENGINE_COLUMNS = frozenset(
    {
        "id",
        "queue_name",
        "tenant",
        "payload",
        "priority",
        "aggregate_key",
        "aggregate_seq",
        "available_at",
        "max_attempts",
        "idempotency_key",
        "status",
        "trace_context",
    }
)
"""The job columns enqueue fills itself."""

_ENQUEUE = """WITH q AS (
    SELECT qs.* FROM fairsched.queues AS qs WHERE qs.name = %(queue)s
), input AS MATERIALIZED (
    SELECT t.*, nextval('fairsched.jobs_id_seq') AS new_id
      FROM unnest(%(tenants)s::text[], %(payloads)s::jsonb[], %(priorities)s::int[],
                  %(aggregate_keys)s::text[], %(aggregate_seqs)s::bigint[], %(run_ats)s::timestamptz[],
                  %(max_attempts)s::int[], %(idempotency_keys)s::text[])
           WITH ORDINALITY AS t(tenant, payload, priority, aggregate_key, aggregate_seq,
                                run_at, max_attempts, idempotency_key, ord)
     WHERE EXISTS (SELECT 1 FROM q)
), inserted AS (
    INSERT INTO fairsched.jobs (id, queue_name, tenant, payload, priority, aggregate_key,
                                aggregate_seq, available_at, max_attempts, idempotency_key,
                                status, trace_context{columns})
    OVERRIDING SYSTEM VALUE
    SELECT i.new_id, q.name, i.tenant, i.payload, i.priority, i.aggregate_key,
           i.aggregate_seq, coalesce(i.run_at, now()), coalesce(i.max_attempts, q.max_attempts),
           i.idempotency_key, {status}, %(trace_context)s::jsonb{values}
      FROM input AS i CROSS JOIN q
     ORDER BY i.ord
    ON CONFLICT (queue_name, tenant, idempotency_key) WHERE idempotency_key IS NOT NULL
    DO NOTHING
    RETURNING id, status
), activated AS (
    {activated}
), notified AS (
    SELECT pg_notify('fairsched_jobs', q.name)
      FROM q
     WHERE q.notify AND EXISTS (SELECT 1 FROM inserted)
)
SELECT ins.id, (SELECT count(*) FROM activated), (SELECT count(*) FROM notified), ins.status
  FROM input AS i
  LEFT JOIN inserted AS ins ON ins.id = i.new_id
 ORDER BY i.ord"""

_HELD = "CASE WHEN i.aggregate_key IS NOT NULL THEN 'waiting' ELSE 'pending' END"

_ACTIVATED = """SELECT {activate}(q.name, array_agg(i.tenant), array_agg(coalesce(i.run_at, '-infinity')))
      FROM q CROSS JOIN input AS i
     WHERE %(activate)s
     GROUP BY q.name"""

_NOT_ACTIVATED = "SELECT WHERE false"

_COMPLETE = """WITH done AS (
    UPDATE fairsched.jobs AS j
       SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL
     WHERE j.id = ANY (ARRAY(SELECT unnest(%(ids)s::bigint[])))
       AND (j.status = 'running') IS TRUE
       AND j.lease_owner = %(owner)s
       AND j.lease_token = (%(tokens)s::bigint[])[array_position(%(ids)s::bigint[], j.id)]
       AND j.lease_expires_at > now()
    RETURNING j.id, j.queue_name, j.tenant, j.share_counted
), stale AS (
    INSERT INTO fairsched.job_events (job_id, kind, detail)
    SELECT i.id, 'stale_completion_rejected',
           jsonb_build_object('op', 'complete', 'token', i.token, 'owner', %(owner)s::text)
      FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS i(id, token)
     WHERE (SELECT count(*) FROM done) < cardinality(%(ids)s::bigint[])
       AND i.id <> ALL (ARRAY(SELECT d.id FROM done AS d))
), finished AS (
    SELECT {finish}(array_agg(d.id), array_agg(d.queue_name), array_agg(d.tenant))
      FROM done AS d
     WHERE d.share_counted
    HAVING count(*) > 0
)
SELECT d.id FROM done AS d LEFT JOIN finished ON true"""


@lru_cache(maxsize=128)
def compose_enqueue(names: tuple[str, ...]) -> str:
    """The enqueue statement of a policy stack (rendered once per stack)."""
    stack = resolve(names)
    columns: list[sql.Composable] = []
    values: list[sql.Composable] = []
    for policy in stack:
        for column in policy.enqueue_columns():
            if not _IDENTIFIER.match(column.column) or column.column in ENGINE_COLUMNS:
                raise ValueError(f"policy {policy.name!r} fills job column {column.column!r}: not its own")
            if ";" in column.value:
                raise ValueError(f"policy {policy.name!r}: the value of {column.column!r} is one expression")
            columns.append(sql.SQL(", {}").format(sql.Identifier(column.column)))
            values.append(sql.SQL(",\n           {}").format(sql.SQL(column.value)))
    taken = [c.as_string(None) for c in columns]
    if len(set(taken)) != len(taken):
        raise ValueError(f"policy stack {list(names)} fills a job column twice")
    order = stack_tenant_order(names)
    activated = (
        sql.SQL(_ACTIVATED).format(activate=order.activate)
        if order is not None and order.activate is not None
        else sql.SQL(_NOT_ACTIVATED)
    )
    statement = sql.SQL(_ENQUEUE).format(
        columns=sql.Composed(columns),
        values=sql.Composed(values),
        status=sql.SQL(_HELD if any(p.holds for p in stack) else "'pending'"),
        activated=activated,
    )
    return statement.as_string(None)


def activates_at_enqueue(names: tuple[str, ...]) -> bool:
    """Whether the stack's tenant order learns of a batch's tenants in the insert itself."""
    order = stack_tenant_order(names)
    return order is not None and order.activate is not None


@lru_cache(maxsize=128)
def compose_complete(names: tuple[str, ...]) -> str | None:
    """The completion statement of a stack whose tenant order settles at completion
    (``finish``); ``None`` for any other stack (the engine's ``leases_complete``)."""
    order = stack_tenant_order(names)
    if order is None or order.finish is None:
        return None
    return sql.SQL(_COMPLETE).format(finish=order.finish).as_string(None)
