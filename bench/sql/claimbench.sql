-- name: claimbench_fill
-- A backlog in one statement: half plain pending jobs, half serial jobs of the given
-- aggregates (each aggregate's lowest sequence pending, the rest waiting); tenants
-- round-robin. Priorities 0..2 and aging keys spread over the enqueue order.
INSERT INTO fairsched.jobs (queue_name, tenant, payload, priority, aging_key, serial, status,
                            aggregate_key, aggregate_seq, max_attempts, available_at)
SELECT %(queue)s,
       't' || (g %% %(tenants)s),
       '{}'::jsonb,
       g %% 3,
       extract(epoch FROM now()) - 3600 + g * 0.001 - (g %% 3) * 60,
       g %% 2 = 1,
       CASE WHEN g %% 2 = 1 AND g / 2 >= %(aggregates)s THEN 'waiting' ELSE 'pending' END,
       CASE WHEN g %% 2 = 1 THEN 'k' || ((g / 2) %% %(aggregates)s) END,
       CASE WHEN g %% 2 = 1 THEN (g / 2) / %(aggregates)s END,
       8,
       now() - interval '1 hour'
  FROM generate_series(0, %(jobs)s - 1) AS g

-- name: claimbench_expired
-- Some running jobs with expired leases, for the recovery sweep's plan.
UPDATE fairsched.jobs
   SET status = 'running', lease_owner = 'gone', lease_expires_at = now() - interval '1 minute',
       started_at = now() - interval '2 minutes', attempt_count = 1
 WHERE id IN (SELECT id FROM fairsched.jobs
               WHERE queue_name = %(queue)s AND status = 'pending' AND NOT serial
               ORDER BY id DESC LIMIT %(count)s)

-- name: claimbench_shares
-- One active share row per tenant of the backlog, and one row per aggregate.
WITH t AS (
    INSERT INTO fairsched.tenant_shares (queue_name, tenant, active, pass)
    SELECT %(queue)s, 't' || g, true, 0 FROM generate_series(0, %(tenants)s - 1) AS g
    ON CONFLICT DO NOTHING
)
INSERT INTO fairsched.aggregates (queue_name, tenant, aggregate_key, next_seq)
SELECT %(queue)s, 't' || ((g * 2 + 1) %% %(tenants)s), 'k' || g, 0
  FROM generate_series(0, %(aggregates)s - 1) AS g
ON CONFLICT DO NOTHING

-- name: queue_policies_set
-- Switch a queue's policy stack.
UPDATE fairsched.queues SET policies = %(policies)s::text[], updated_at = now()
 WHERE name = %(queue)s

-- name: claimbench_autovacuums
-- How many times autovacuum has vacuumed the job table (statistics may lag by a moment).
SELECT coalesce(autovacuum_count, 0) FROM pg_stat_user_tables
 WHERE schemaname = 'fairsched' AND relname = 'jobs'
