-- name: configsync_queues
-- Every declared queue's stored settings (what `config export` writes), by name.
SELECT name, lease_seconds, max_runtime_seconds, max_attempts, unknown_max_attempts,
       backoff_base_seconds, backoff_max_seconds, notify, policies, aging_interval_seconds,
       charge, tenant_cap, serial_gap, serial_poison, policy_params
  FROM fairsched.queues
 ORDER BY name

-- name: configsync_queue_lock
-- One queue's stored settings, locked until the transaction ends (read-modify-write).
SELECT name, lease_seconds, max_runtime_seconds, max_attempts, unknown_max_attempts,
       backoff_base_seconds, backoff_max_seconds, notify, policies, aging_interval_seconds,
       charge, tenant_cap, serial_gap, serial_poison, policy_params
  FROM fairsched.queues
 WHERE name = %(name)s
   FOR UPDATE

-- name: configsync_tenants
-- Tenants whose weight or cap differs from the default (weight 1, no cap), per queue.
SELECT queue_name, tenant, weight, cap
  FROM fairsched.tenant_shares
 WHERE weight <> 1 OR cap IS NOT NULL
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
-- Whether a queue has jobs waiting, pending or running (a serial policy change needs none).
SELECT EXISTS (SELECT 1 FROM fairsched.jobs WHERE queue_name = %(name)s AND status = 'pending')
    OR EXISTS (SELECT 1 FROM fairsched.jobs WHERE queue_name = %(name)s AND status = 'running')
    OR EXISTS (SELECT 1 FROM fairsched.jobs
                WHERE queue_name = %(name)s AND status = 'waiting')

-- name: configsync_pending_tenants
-- Tenants with pending jobs on a queue and when their first one is due (a queue that
-- becomes weighted brings them into the selection); one pass over the pending backlog.
SELECT tenant, min(available_at) AS due
  FROM fairsched.jobs
 WHERE queue_name = %(name)s AND status = 'pending'
 GROUP BY tenant

-- name: configsync_queue_notify
-- Wake the queue's claimers after a change (LISTEN hint; workers also re-read on their own).
SELECT pg_notify('fairsched_jobs', %(name)s)
