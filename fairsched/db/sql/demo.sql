-- name: demo_progress
-- How many jobs of a demo run (queue, id range) have finished, as succeeded or dead.
SELECT count(*) FILTER (WHERE status IN ('succeeded', 'dead', 'discarded')) AS finished,
       count(*) AS total
  FROM fairsched.jobs
 WHERE queue_name = %(queue)s AND id BETWEEN %(first)s AND %(last)s

-- name: demo_tenant_report
-- Per tenant of a demo run: jobs, outcomes, retried attempts, waits from enqueue to
-- first claim, and the jobs first claimed before any tenant ran out of waiting jobs.
WITH run AS (
    SELECT id, tenant, status, created_at
      FROM fairsched.jobs
     WHERE queue_name = %(queue)s AND id BETWEEN %(first)s AND %(last)s
), claims AS (
    SELECT r.tenant, a.job_id, a.claimed_at, a.outcome
      FROM fairsched.attempts a
      JOIN run r ON r.id = a.job_id
     WHERE a.outcome <> 'released'
), first_claims AS (
    SELECT r.id, r.tenant, r.status, r.created_at, min(c.claimed_at) AS first_claim
      FROM run r
      LEFT JOIN claims c ON c.job_id = r.id
     GROUP BY r.id, r.tenant, r.status, r.created_at
), contended AS (
    SELECT min(last_first_claim) AS until
      FROM (SELECT max(first_claim) AS last_first_claim FROM first_claims GROUP BY tenant) per_tenant
), retries AS (
    SELECT tenant, count(*) AS retries FROM claims WHERE outcome = 'retrying' GROUP BY tenant
)
SELECT f.tenant,
       count(*) AS jobs,
       count(*) FILTER (WHERE f.status = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE f.status = 'dead') AS dead,
       coalesce(max(r.retries), 0) AS retries,
       count(*) FILTER (WHERE f.first_claim <= (SELECT until FROM contended)) AS contended_claims,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM f.first_claim - f.created_at))
           AS p50_wait,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM f.first_claim - f.created_at))
           AS p99_wait
  FROM first_claims f
  LEFT JOIN retries r ON r.tenant = f.tenant
 GROUP BY f.tenant
 ORDER BY count(*) DESC, f.tenant

-- name: demo_aggregate_attempts
-- The finished attempts of one aggregate of a demo run, in claim order.
SELECT j.aggregate_seq, a.claimed_at, a.finished_at, a.outcome
  FROM fairsched.jobs j
  JOIN fairsched.attempts a ON a.job_id = j.id
 WHERE j.queue_name = %(queue)s AND j.id BETWEEN %(first)s AND %(last)s
   AND j.tenant = %(tenant)s AND j.aggregate_key = %(aggregate_key)s
   AND a.outcome <> 'released'
 ORDER BY a.claimed_at, j.aggregate_seq

-- name: demo_run_summary
-- A demo run's processing span (first claim to last finish), and its rejected stale completions.
SELECT extract(epoch FROM max(a.finished_at) - min(a.claimed_at)) AS span_seconds,
       (SELECT count(*)
          FROM fairsched.job_events e
         WHERE e.kind = 'stale_completion_rejected'
           AND e.job_id BETWEEN %(first)s AND %(last)s) AS stale_rejected,
       array(SELECT d.id
               FROM fairsched.jobs d
              WHERE d.queue_name = %(queue)s AND d.id BETWEEN %(first)s AND %(last)s
                AND d.status = 'dead'
              ORDER BY d.id) AS dead_ids
  FROM fairsched.attempts a
  JOIN fairsched.jobs j ON j.id = a.job_id
 WHERE j.queue_name = %(queue)s AND j.id BETWEEN %(first)s AND %(last)s

-- name: demo_database_get
-- The demo's own database beside the current one: its name (the current one's plus a
-- suffix), whether it exists, and the role that would create it.
SELECT current_database() || %(suffix)s AS name,
       EXISTS (SELECT FROM pg_database WHERE datname = current_database() || %(suffix)s) AS present,
       current_user AS role
