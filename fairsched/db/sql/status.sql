-- name: status_queues
-- Every declared queue with its policy stack and default tenant cap.
SELECT name, policies, tenant_cap
  FROM fairsched.queues
 ORDER BY name

-- name: status_share_totals
-- Per queue: claims so far over all tenants and the summed weight of the active ones
-- (the denominators of observed and entitled shares).
SELECT queue_name, sum(claimed_total) AS claimed, coalesce(sum(weight) FILTER (WHERE active), 0) AS weight
  FROM fairsched.tenant_shares
 GROUP BY queue_name

-- name: status_tenant
-- One tenant of one queue: claimable, waiting, running and dead jobs (each counted up to
-- %(count_limit)s), its oldest claimable job's available_at, and database time.
SELECT (SELECT count(*) FROM (
            SELECT 1 FROM fairsched.jobs j
             WHERE j.queue_name = %(queue)s AND j.tenant = %(tenant)s AND j.status = 'pending'
               AND j.available_at <= now()
             LIMIT %(count_limit)s) c) AS claimable,
       (SELECT count(*) FROM (
            SELECT 1 FROM fairsched.jobs j
             WHERE j.queue_name = %(queue)s AND j.tenant = %(tenant)s AND j.status = 'pending'
               AND j.available_at > now()
             LIMIT %(count_limit)s) c) AS delayed,
       (SELECT count(*) FROM (
            SELECT 1 FROM fairsched.jobs j
             WHERE j.queue_name = %(queue)s AND j.tenant = %(tenant)s AND j.status = 'waiting'
             LIMIT %(count_limit)s) c) AS waiting,
       (SELECT count(*) FROM fairsched.jobs j
         WHERE j.queue_name = %(queue)s AND j.tenant = %(tenant)s AND j.status = 'running') AS running,
       (SELECT count(*) FROM (
            SELECT 1 FROM fairsched.jobs j
             WHERE j.queue_name = %(queue)s AND j.tenant = %(tenant)s AND j.status = 'dead'
             LIMIT %(count_limit)s) c) AS dead,
       (SELECT min(j.available_at) FROM fairsched.jobs j
         WHERE j.queue_name = %(queue)s AND j.tenant = %(tenant)s AND j.status = 'pending'
           AND j.available_at <= now()) AS oldest_available_at,
       now() AS now
