-- name: configsync_queues
-- Every declared queue's stored settings (what `config export` writes, with the settings
-- policies own), by name.
SELECT name, lease_seconds, max_runtime_seconds, max_attempts, unknown_max_attempts,
       backoff_base_seconds, backoff_max_seconds, notify, policies, policy_params,
       finished_retention_seconds, dead_retention_seconds, history_retention_seconds
  FROM fairsched.queues
 ORDER BY name

-- name: configsync_queue_lock
-- One queue's stored settings, locked until the transaction ends (read-modify-write).
SELECT name, lease_seconds, max_runtime_seconds, max_attempts, unknown_max_attempts,
       backoff_base_seconds, backoff_max_seconds, notify, policies, policy_params,
       finished_retention_seconds, dead_retention_seconds, history_retention_seconds
  FROM fairsched.queues
 WHERE name = %(name)s
   FOR UPDATE

-- name: configsync_tenants
-- Tenants whose weight or cap differs from the default (weight 1, no cap), per queue.
SELECT queue_name, tenant, weight, cap
  FROM fairsched.tenant_shares
 WHERE weight <> 1 OR cap IS NOT NULL
 ORDER BY queue_name, tenant

-- name: configsync_tenant_caps
-- The tenants with a cap on the named queues (a stack that enforces no caps is refused
-- on them).
SELECT queue_name, tenant, cap
  FROM fairsched.tenant_shares
 WHERE queue_name = ANY(%(names)s::text[]) AND cap IS NOT NULL
 ORDER BY queue_name, tenant

-- name: configsync_tenant_defaults_apply
-- Write inherited tenant weights and caps: update existing share rows, create rows only
-- where the value is not the default (a missing row already means weight 1, no cap).
INSERT INTO fairsched.tenant_shares AS t (queue_name, tenant, weight, cap, active, ready_at)
SELECT i.queue_name, i.tenant, i.weight, i.cap, false, 'infinity'
  FROM unnest(%(queues)s::text[], %(tenants)s::text[], %(weights)s::float8[], %(caps)s::int[])
       AS i(queue_name, tenant, weight, cap)
 WHERE i.weight <> 1 OR i.cap IS NOT NULL
    OR EXISTS (SELECT 1 FROM fairsched.tenant_shares s
                WHERE s.queue_name = i.queue_name AND s.tenant = i.tenant)
ON CONFLICT (queue_name, tenant) DO UPDATE
   SET weight = EXCLUDED.weight, cap = EXCLUDED.cap, updated_at = now()

-- name: configsync_queue_busy
-- Whether a queue has jobs waiting, pending or running (adding or removing a policy that holds jobs back needs none).
SELECT EXISTS (SELECT 1 FROM fairsched.jobs WHERE queue_name = %(name)s AND status = 'pending')
    OR EXISTS (SELECT 1 FROM fairsched.jobs WHERE queue_name = %(name)s AND status = 'running')
    OR EXISTS (SELECT 1 FROM fairsched.jobs
                WHERE queue_name = %(name)s AND status = 'waiting')

-- name: configsync_pending_tenants
-- Tenants with pending jobs on a queue and when their first one is due (a queue whose
-- stack starts ordering tenants brings them into the order); one pass over the pending backlog.
SELECT tenant, min(available_at) AS due
  FROM fairsched.jobs
 WHERE queue_name = %(name)s AND status = 'pending'
 GROUP BY tenant

-- name: configsync_queue_notify
-- Wake the queue's claimers after a change (LISTEN hint; workers also re-read on their own).
SELECT pg_notify('fairsched_jobs', %(name)s)

-- name: configsync_queue_jobs
-- Jobs per queue and status among the queues `config apply --prune` would remove (any
-- job keeps a queue unless forced; unfinished and dead ones always do).
SELECT queue_name, status, count(*)
  FROM fairsched.jobs
 WHERE queue_name = ANY(%(names)s::text[])
 GROUP BY queue_name, status
 ORDER BY queue_name, status

-- name: configsync_queues_remove
-- Remove queues with their fairness state (share rows and releases, aggregates, claim
-- heads, pass floors); their finished jobs stay as history.
WITH shares AS (
    DELETE FROM fairsched.tenant_shares WHERE queue_name = ANY(%(names)s::text[])
), releases AS (
    DELETE FROM fairsched.tenant_releases WHERE queue_name = ANY(%(names)s::text[])
), aggregates AS (
    DELETE FROM fairsched.aggregates WHERE queue_name = ANY(%(names)s::text[])
), heads AS (
    DELETE FROM fairsched.claim_heads WHERE queue_name = ANY(%(names)s::text[])
), floors AS (
    DELETE FROM fairsched.pass_floors WHERE queue_name = ANY(%(names)s::text[])
)
DELETE FROM fairsched.queues WHERE name = ANY(%(names)s::text[])

-- name: configsync_tenants_remove_idle
-- Delete the share rows (and releases) of pruned tenants that are idle: not in the
-- tenant order, no pending or waiting job, nothing running. A tenant that comes
-- back starts level, as a new one does.
WITH gone AS (
    DELETE FROM fairsched.tenant_shares AS s
     USING unnest(%(queues)s::text[], %(tenants)s::text[]) AS p(queue_name, tenant)
     WHERE s.queue_name = p.queue_name AND s.tenant = p.tenant
       AND NOT s.active
       AND s.running <= fairsched.tenant_released(s.queue_name, s.tenant)
       AND NOT EXISTS (SELECT 1 FROM fairsched.jobs AS j
                        WHERE j.queue_name = s.queue_name AND j.tenant = s.tenant
                          AND j.status = 'pending')
       AND NOT EXISTS (SELECT 1 FROM fairsched.jobs AS j
                        WHERE j.queue_name = s.queue_name AND j.tenant = s.tenant
                          AND j.status = 'waiting')
    RETURNING s.queue_name, s.tenant
)
DELETE FROM fairsched.tenant_releases AS r
 USING gone AS g
 WHERE r.queue_name = g.queue_name AND r.tenant = g.tenant

-- name: configsync_tenants_reset
-- Pruned tenants still busy keep their share row (their place in the selection) with
-- the default weight and no cap, which is what a missing row means.
UPDATE fairsched.tenant_shares AS s
   SET weight = 1, cap = NULL, updated_at = now()
  FROM unnest(%(queues)s::text[], %(tenants)s::text[]) AS p(queue_name, tenant)
 WHERE s.queue_name = p.queue_name AND s.tenant = p.tenant
   AND (s.weight <> 1 OR s.cap IS NOT NULL)

-- name: configsync_relation_present
-- Whether a policy's table exists (its migrations ran).
SELECT to_regclass(%(relation)s) IS NOT NULL

-- name: configsync_queue_stacks
-- The stored policy stacks of the named queues (a change is handed to the policies).
SELECT name, policies
  FROM fairsched.queues
 WHERE name = ANY(%(names)s::text[])

-- name: configsync_queue_policies
-- One queue's policy stack, kept from changing until the transaction ends (a live change
-- of a policy's setting).
SELECT policies
  FROM fairsched.queues
 WHERE name = %(name)s
   FOR SHARE

-- name: configsync_level_present
-- Whether a policy's level function exists (its migrations ran): "schema"."name"(text, text).
SELECT to_regprocedure(%(function)s) IS NOT NULL

-- name: configsync_tenant_level
-- How many jobs a tenant may start now under a policy's limit (NULL: no limit): its level
-- function (fairsched.policy.Throttle), composed in as level.
SELECT {level}(%(queue)s, %(tenant)s)
