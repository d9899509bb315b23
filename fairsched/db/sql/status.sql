-- name: status_queues
-- Every declared queue with its policy stack.
SELECT name, policies
  FROM fairsched.queues
 ORDER BY name

-- name: status_share_totals
-- Per queue: claims so far over all tenants and the summed weight of the active ones
-- (the denominators of observed and entitled shares); one pass over the share rows, so
-- O(tenants) and exact.
SELECT queue_name, sum(claimed_total) AS claimed, coalesce(sum(weight) FILTER (WHERE active), 0) AS weight
  FROM fairsched.tenant_shares
 GROUP BY queue_name

-- name: status_tenant
-- One tenant of one queue, in O(its priority levels): claimable and delayed jobs counted per
-- level (loose index scan of jobs_tenant_fifo_idx, at most %(max_levels)s levels), waiting,
-- running and dead jobs from their partial indexes, each count stopping at %(count_limit)s;
-- its oldest claimable job's available_at (one descent per level) and database time.
WITH RECURSIVE levels AS (
    SELECT 1 AS depth,
           (SELECT - j.priority FROM fairsched.jobs j
             WHERE j.status = 'pending' AND j.queue_name = %(queue)s AND j.tenant = %(tenant)s
             ORDER BY - j.priority LIMIT 1) AS rank
    UNION ALL
    SELECT l.depth + 1,
           (SELECT - j.priority FROM fairsched.jobs j
             WHERE j.status = 'pending' AND j.queue_name = %(queue)s AND j.tenant = %(tenant)s
               AND - j.priority > l.rank
             ORDER BY - j.priority LIMIT 1)
      FROM levels l
     WHERE l.rank IS NOT NULL AND l.depth < %(max_levels)s
)
SELECT (SELECT count(*) FROM (
            SELECT 1 FROM levels l
             CROSS JOIN LATERAL (
                    SELECT 1 FROM fairsched.jobs j
                     WHERE j.status = 'pending' AND j.queue_name = %(queue)s AND j.tenant = %(tenant)s
                       AND - j.priority = l.rank AND j.available_at <= now()
                     LIMIT %(count_limit)s) c
             WHERE l.rank IS NOT NULL
             LIMIT %(count_limit)s) c) AS claimable,
       (SELECT count(*) FROM (
            SELECT 1 FROM levels l
             CROSS JOIN LATERAL (
                    SELECT 1 FROM fairsched.jobs j
                     WHERE j.status = 'pending' AND j.queue_name = %(queue)s AND j.tenant = %(tenant)s
                       AND - j.priority = l.rank AND j.available_at > now()
                     LIMIT %(count_limit)s) c
             WHERE l.rank IS NOT NULL
             LIMIT %(count_limit)s) c) AS delayed,
       (SELECT count(*) FROM (
            SELECT 1 FROM fairsched.jobs j
             WHERE j.queue_name = %(queue)s AND j.tenant = %(tenant)s AND j.status = 'waiting'
             LIMIT %(count_limit)s) c) AS waiting,
       (SELECT count(*) FROM (
            SELECT 1 FROM fairsched.jobs j
             WHERE j.queue_name = %(queue)s AND j.tenant = %(tenant)s AND j.status = 'running'
             LIMIT %(count_limit)s) c) AS running,
       (SELECT count(*) FROM (
            SELECT 1 FROM fairsched.jobs j
             WHERE j.queue_name = %(queue)s AND j.tenant = %(tenant)s AND j.status = 'dead'
             LIMIT %(count_limit)s) c) AS dead,
       (SELECT min(f.available_at) FROM levels l
         CROSS JOIN LATERAL (
                SELECT j.available_at FROM fairsched.jobs j
                 WHERE j.status = 'pending' AND j.queue_name = %(queue)s AND j.tenant = %(tenant)s
                   AND - j.priority = l.rank
                 ORDER BY j.available_at LIMIT 1) f
         WHERE l.rank IS NOT NULL AND f.available_at <= now()) AS oldest_available_at,
       now() AS now

-- name: status_tenant_share
-- One tenant's share state on a queue, by primary key (no row when it has none): weight,
-- cap, activity, claims and charged total so far, run time estimate.
SELECT t.weight, t.cap, t.active, t.claimed_total, t.charged_total, t.runtime_estimate
  FROM fairsched.tenant_shares t
 WHERE t.queue_name = %(queue)s AND t.tenant = %(tenant)s

-- name: status_blocked
-- The %(shown)s longest-blocked serial aggregates among at most %(read_limit)s per known
-- queue (aggregates_blocked_idx, then each dead job by primary key): exact while a queue
-- has fewer blocked aggregates than that, and never a walk over all of them.
SELECT b.queue_name, b.tenant, b.aggregate_key, b.blocked_job_id, j.finished_at AS since
  FROM fairsched.queues q
 CROSS JOIN LATERAL (
        SELECT a.queue_name, a.tenant, a.aggregate_key, a.blocked_job_id FROM fairsched.aggregates a
         WHERE a.queue_name = q.name AND a.blocked_job_id IS NOT NULL
         LIMIT %(read_limit)s) b
  JOIN fairsched.jobs j ON j.id = b.blocked_job_id
 ORDER BY j.finished_at, b.queue_name, b.tenant, b.aggregate_key
 LIMIT %(shown)s
