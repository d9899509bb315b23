-- name: web_workers
-- Per queue: the worker processes holding leases and the slots busy now, read over the
-- running jobs only (jobs_expired_lease_idx): O(slots in use), never O(jobs).
SELECT queue_name, count(DISTINCT lease_owner) AS workers, count(*) AS busy
  FROM fairsched.jobs
 WHERE status = 'running'
 GROUP BY queue_name

-- name: web_aggregate_blocked
-- The dead job blocking one aggregate, if it is blocked (primary key lookup).
SELECT blocked_job_id
  FROM fairsched.aggregates
 WHERE queue_name = %(queue)s AND tenant = %(tenant)s AND aggregate_key = %(key)s
   AND blocked_job_id IS NOT NULL
