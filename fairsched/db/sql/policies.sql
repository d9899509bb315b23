-- name: queue_policy_get
-- One queue's policy stack and parameters.
SELECT name, policies, policy_params, notify
  FROM fairsched.queues
 WHERE name = %(name)s

-- name: tenant_share_set
-- Set a tenant's weight and/or cap on a queue (NULL keeps the current value; cap 0 clears it),
-- and record who did it, with the values after, in the admin audit trail.
-- (fairsched.tenant_share_set, 011_operator_functions.sql)
SELECT * FROM fairsched.tenant_share_set(%(queue)s::text, %(tenant)s::text, %(weight)s::double precision, %(cap)s::integer, %(by)s::text)

-- name: tenant_shares_list
-- Every tenant's share state on a queue: weight, cap, running (claims counted minus
-- releases), claims and charge so far.
SELECT t.tenant, t.weight, t.cap,
       t.running - fairsched.tenant_released(t.queue_name, t.tenant) AS running,
       t.active, t.pass, t.claimed_total, t.charged_total, t.runtime_estimate
  FROM fairsched.tenant_shares AS t
 WHERE t.queue_name = %(queue)s
 ORDER BY t.tenant

-- name: aggregate_unblock
-- Run an aggregate's dead head again (same id, fresh attempts); the aggregate resumes.
-- (fairsched.aggregate_unblock, 011_operator_functions.sql)
SELECT * FROM fairsched.aggregate_unblock(%(queue)s::text, %(tenant)s::text, %(key)s::text, %(by)s::text)

-- name: aggregate_skip
-- Discard an aggregate's dead head and let the aggregate move past it.
-- (fairsched.aggregate_skip, 011_operator_functions.sql)
SELECT * FROM fairsched.aggregate_skip(%(queue)s::text, %(tenant)s::text, %(key)s::text, %(by)s::text)

-- name: aggregates_blocked
-- Aggregates held by a dead job, with the job and since when.
SELECT a.queue_name, a.tenant, a.aggregate_key, a.blocked_job_id, j.finished_at AS since
  FROM fairsched.aggregates a
  JOIN fairsched.jobs j ON j.id = a.blocked_job_id
 WHERE (%(queue)s::text IS NULL OR a.queue_name = %(queue)s)
 ORDER BY j.finished_at

-- name: jobs_settle_state
-- Where jobs that just left running (or became pending) stand now.
SELECT id, queue_name, tenant, status, aggregate_key, available_at
  FROM fairsched.jobs
 WHERE id = ANY(%(ids)s::bigint[])
