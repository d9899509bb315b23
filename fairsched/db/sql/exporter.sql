-- name: exporter_queue_levels
-- Per known queue and priority level: the oldest claimable job's available_at and the
-- claimable count up to %(count_limit)s. Distinct levels are found by a loose index scan
-- (one descent each, at most %(max_levels)s per queue); a queue without jobs yields one
-- row with NULLs, so every declared queue is reported.
WITH RECURSIVE levels AS (
    SELECT q.name AS queue_name, 1 AS depth,
           (SELECT j.priority FROM fairsched.jobs j
             WHERE j.status = 'pending' AND j.queue_name = q.name
             ORDER BY - j.priority LIMIT 1) AS priority
      FROM fairsched.queues q
    UNION ALL
    SELECT l.queue_name, l.depth + 1,
           (SELECT j.priority FROM fairsched.jobs j
             WHERE j.status = 'pending' AND j.queue_name = l.queue_name AND - j.priority > - l.priority
             ORDER BY - j.priority LIMIT 1)
      FROM levels l
     WHERE l.priority IS NOT NULL AND l.depth < %(max_levels)s
)
SELECT l.queue_name, l.priority,
       (SELECT j.available_at FROM fairsched.jobs j
         WHERE j.status = 'pending' AND j.queue_name = l.queue_name AND - j.priority = - l.priority
           AND j.available_at <= now()
         ORDER BY j.available_at LIMIT 1) AS oldest_available_at,
       (SELECT count(*) FROM (
            SELECT 1 FROM fairsched.jobs j
             WHERE j.status = 'pending' AND j.queue_name = l.queue_name AND - j.priority = - l.priority
               AND j.available_at <= now()
             LIMIT %(count_limit)s) c) AS claimable
  FROM levels l
 WHERE l.priority IS NOT NULL OR l.depth = 1

-- name: exporter_tenant_oldest
-- Every tenant's oldest claimable job per known queue, exact for every tenant: a loose
-- index scan of jobs_tenant_fifo_idx visits each (tenant, priority level) of a queue's
-- pending jobs once (one descent to the level's first entry, its oldest available_at),
-- at most %(max_tenant_levels)s per queue; tenants with only delayed work are left out.
WITH RECURSIVE walk AS (
    SELECT q.name AS queue_name, 1 AS depth, f.tenant, f.rank, f.available_at
      FROM fairsched.queues q
     CROSS JOIN LATERAL (
            SELECT j.tenant, - j.priority AS rank, j.available_at FROM fairsched.jobs j
             WHERE j.status = 'pending' AND j.queue_name = q.name
             ORDER BY j.tenant, - j.priority, j.available_at, j.id LIMIT 1) f
    UNION ALL
    SELECT w.queue_name, w.depth + 1, n.tenant, n.rank, n.available_at
      FROM walk w
     CROSS JOIN LATERAL (
            SELECT j.tenant, - j.priority AS rank, j.available_at FROM fairsched.jobs j
             WHERE j.status = 'pending' AND j.queue_name = w.queue_name
               AND (j.tenant, - j.priority) > (w.tenant, w.rank)
             ORDER BY j.tenant, - j.priority, j.available_at, j.id LIMIT 1) n
     WHERE w.depth < %(max_tenant_levels)s
)
SELECT queue_name, tenant, min(available_at) AS oldest_available_at
  FROM walk
 WHERE available_at <= now()
 GROUP BY queue_name, tenant

-- name: exporter_running
-- Running jobs per queue and tenant (bounded by the workers' slots), with the leases
-- that expire within %(near_seconds)s and those already expired but not yet recovered.
SELECT queue_name, tenant, count(*) AS running,
       count(*) FILTER (WHERE lease_expires_at > now()
                          AND lease_expires_at <= now() + make_interval(secs => %(near_seconds)s))
           AS near_expiry,
       count(*) FILTER (WHERE lease_expires_at <= now()) AS expired
  FROM fairsched.jobs
 WHERE status = 'running'
 GROUP BY queue_name, tenant

-- name: exporter_dead
-- Per known queue: unresolved dead jobs (counted up to %(count_limit)s) and the oldest
-- one's finished_at, both from the dead index.
SELECT q.name AS queue_name,
       (SELECT count(*) FROM (
            SELECT 1 FROM fairsched.jobs j
             WHERE j.status = 'dead' AND j.queue_name = q.name
             LIMIT %(count_limit)s) c) AS dead,
       (SELECT min(j.finished_at) FROM fairsched.jobs j
         WHERE j.status = 'dead' AND j.queue_name = q.name) AS oldest_finished_at
  FROM fairsched.queues q

-- name: exporter_now
-- Database time, the clock every age is measured against.
SELECT now()

-- name: exporter_transaction_setup
-- One consistent, read-only snapshot per scrape.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY

-- name: exporter_transaction_limits
-- Bound every statement of the scrape's transaction, and keep JIT off: the recursive level
-- walk is estimated far above its real cost, and compiling it costs more than running it.
SELECT set_config('statement_timeout', %(timeout_ms)s, true), set_config('jit', 'off', true)

-- name: exporter_aggregates
-- Per known queue: serial aggregates blocked by a dead job and aggregates waiting on a
-- sequence gap (each counted up to %(count_limit)s), and the oldest gap wait's start.
SELECT q.name AS queue_name,
       (SELECT count(*) FROM (
            SELECT 1 FROM fairsched.aggregates a
             WHERE a.queue_name = q.name AND a.blocked_job_id IS NOT NULL
             LIMIT %(count_limit)s) c) AS blocked,
       (SELECT count(*) FROM (
            SELECT 1 FROM fairsched.aggregates a
             WHERE a.queue_name = q.name AND a.gap_since IS NOT NULL
             LIMIT %(count_limit)s) c) AS gap_waiting,
       (SELECT min(a.gap_since) FROM fairsched.aggregates a
         WHERE a.queue_name = q.name AND a.gap_since IS NOT NULL) AS oldest_gap_since
  FROM fairsched.queues q

-- name: exporter_active_weights
-- Per known queue: how many tenants are active in the weighted policy and the sum of
-- their weights, over the %(count_limit)s active tenants next in line (lowest pass, walking
-- tenant_shares_pass_idx).
SELECT q.name AS queue_name, s.tenants, s.weight
  FROM fairsched.queues q
 CROSS JOIN LATERAL (
        SELECT count(*) AS tenants, coalesce(sum(a.weight), 0) AS weight
          FROM (SELECT t.weight FROM fairsched.tenant_shares t
                 WHERE t.queue_name = q.name AND t.active
                 ORDER BY t.pass
                 LIMIT %(count_limit)s) a) s

-- name: exporter_tenant_shares
-- Weight, activity and claims so far of the given (queue, tenant) pairs: one primary
-- key lookup each.
SELECT t.queue_name, t.tenant, t.weight, t.active, t.claimed_total
  FROM unnest(%(queues)s::text[], %(tenants)s::text[]) AS k(queue_name, tenant)
  JOIN fairsched.tenant_shares t ON t.queue_name = k.queue_name AND t.tenant = k.tenant

-- name: exporter_throttle_queues
-- The queues whose stack names a policy that reports throttled tenants, with that policy,
-- once its level function exists (its migrations ran): one row per (queue, policy).
SELECT q.name, p.policy
  FROM fairsched.queues AS q
  JOIN unnest(%(policies)s::text[], %(functions)s::text[]) AS p(policy, function)
    ON p.policy = ANY (q.policies)
 WHERE to_regprocedure(p.function) IS NOT NULL

-- name: exporter_tenant_throttled
-- The given (queue, tenant) pairs a policy lets start no job now: its level function
-- (fairsched.policy.Throttle, composed in as level) below one job, one call per pair.
SELECT k.queue_name, k.tenant
  FROM unnest(%(queues)s::text[], %(tenants)s::text[]) AS k(queue_name, tenant)
 WHERE {level}(k.queue_name, k.tenant) < 1
