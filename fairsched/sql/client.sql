-- name: queue_pending_tenants
-- The tenants with pending jobs on a queue, and when each one's earliest job is due.
SELECT tenant, min(available_at) FROM fairsched.jobs
 WHERE queue_name = %(queue)s AND status = 'pending'
 GROUP BY tenant
