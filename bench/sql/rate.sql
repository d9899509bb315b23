-- name: rate_started
-- Jobs of a queue claimed in a window of the database's clock (epoch seconds), per tenant.
SELECT tenant, count(*)
  FROM fairsched.jobs
 WHERE queue_name = %(queue)s
   AND started_at >= to_timestamp(%(start)s) AND started_at < to_timestamp(%(end)s)
 GROUP BY tenant

-- name: rate_pending
-- Pending jobs of a queue per tenant (read between phases, while no worker runs).
SELECT tenant, count(*) FROM fairsched.jobs
 WHERE queue_name = %(queue)s AND status = 'pending'
 GROUP BY tenant

-- name: rate_dry
-- The tenants, of those given, without a pending job in a queue (one probe each of the
-- tenant-first claim's index).
SELECT t.tenant
  FROM unnest(%(tenants)s::text[]) AS t(tenant)
 WHERE NOT EXISTS (SELECT 1 FROM fairsched.jobs AS j
                    WHERE j.queue_name = %(queue)s AND j.tenant = t.tenant AND j.status = 'pending')
 ORDER BY t.tenant
