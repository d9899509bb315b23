-- name: queue_policy_get
-- One queue's policy stack and parameters.
SELECT name, policies, aging_interval_seconds, charge, tenant_cap, serial_gap, serial_poison,
       policy_params, notify
  FROM fairsched.queues
 WHERE name = %(name)s

-- name: tenant_shares_activate
-- Tenants that got pending jobs (due at dues) join the weighted selection; their share
-- rows stay KEY SHARE locked until the transaction commits.
SELECT fairsched.tenant_shares_activate(%(queue)s, %(tenants)s::text[], %(dues)s::timestamptz[])

-- name: tenant_shares_lock_dry
-- Lock (skipping busy rows) the lowest-pass active tenants that have nothing claimable
-- (no pending job due that passes the stack's filters, composed in where it says; they
-- may read the queue's policy_params as q.params).
WITH q AS (SELECT qs.policy_params AS params FROM fairsched.queues AS qs WHERE qs.name = %(queue)s)
SELECT t.tenant
  FROM fairsched.tenant_shares t
 WHERE (t.queue_name, t.tenant) IN (
        SELECT s.queue_name, s.tenant FROM fairsched.tenant_shares s
         WHERE s.queue_name = %(queue)s AND s.active
         ORDER BY s.pass, s.claimed_total, s.tenant LIMIT %(limit)s)
   AND NOT EXISTS (SELECT 1 FROM fairsched.jobs j
                    WHERE j.queue_name = t.queue_name AND j.tenant = t.tenant
                      AND j.status = 'pending' AND j.available_at <= now(){filters})
   FOR UPDATE OF t SKIP LOCKED

-- name: tenant_shares_deactivate
-- Take locked dry tenants out of the selection; remember when their next job is due (a
-- tenant whose due jobs the filters pass over is woken again then, and looked at again).
WITH q AS (SELECT qs.policy_params AS params FROM fairsched.queues AS qs WHERE qs.name = %(queue)s)
UPDATE fairsched.tenant_shares AS t
   SET active = false,
       ready_at = coalesce((SELECT min(j.available_at) FROM fairsched.jobs j
                             WHERE j.queue_name = t.queue_name AND j.tenant = t.tenant
                               AND j.status = 'pending'), 'infinity'),
       updated_at = now()
 WHERE t.queue_name = %(queue)s AND t.tenant = ANY(%(tenants)s::text[])
   AND NOT EXISTS (SELECT 1 FROM fairsched.jobs j
                    WHERE j.queue_name = t.queue_name AND j.tenant = t.tenant
                      AND j.status = 'pending' AND j.available_at <= now(){filters})

-- name: tenant_shares_wake
-- Sweeper: inactive tenants whose delayed work came due rejoin at the lowest active pass
-- (fairsched.tenant_shares_wake, 008_roles.sql).
SELECT queue_name, tenant, active FROM fairsched.tenant_shares_wake(%(batch)s)

-- name: tenant_shares_finish
-- Jobs of weighted queues that left running (not succeeded: a completion settles its
-- own): release the running slots their claims counted and correct runtime charges,
-- once per claim (fairsched.tenant_shares_settle, 008_roles.sql).
SELECT fairsched.tenant_shares_settle(%(ids)s::bigint[])

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

-- name: aggregates_lock
-- Lock (creating them) the aggregates a serial enqueue touches; a new aggregate
-- starts at the lowest sequence number of its first batch. Returns next_seq. Refused
-- for a tenant outside the producer's grants (fairsched.aggregates_lock, 008_roles.sql).
SELECT tenant, aggregate_key, next_seq
  FROM fairsched.aggregates_lock(%(queue)s, %(tenants)s::text[], %(keys)s::text[], %(seqs)s::bigint[])

-- name: aggregates_seq_taken
-- Sequence numbers of a serial enqueue that already exist in their aggregate.
SELECT j.tenant, j.aggregate_key, j.aggregate_seq
  FROM unnest(%(tenants)s::text[], %(keys)s::text[], %(seqs)s::bigint[])
       AS t(tenant, aggregate_key, aggregate_seq)
  JOIN fairsched.jobs j
    ON j.serial AND j.queue_name = %(queue)s AND j.tenant = t.tenant
   AND j.aggregate_key = t.aggregate_key AND j.aggregate_seq = t.aggregate_seq

-- name: aggregates_finish
-- Serial jobs left running for good: advance their aggregate past them, or (poison
-- mode block) let a dead one hold it (fairsched.aggregates_finish, 008_roles.sql).
SELECT queue_name, tenant, aggregate_key FROM fairsched.aggregates_finish(%(ids)s::bigint[])

-- name: aggregates_advance
-- Promote the next job of each given aggregate that has no job pending or running
-- and is not blocked (fairsched.aggregates_advance, 008_roles.sql).
SELECT id, queue_name, tenant, available_at
  FROM fairsched.aggregates_advance(%(queues)s::text[], %(tenants)s::text[], %(keys)s::text[])

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
SELECT id, queue_name, tenant, status, serial, aggregate_key, available_at
  FROM fairsched.jobs
 WHERE id = ANY(%(ids)s::bigint[])
