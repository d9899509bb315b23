-- name: simulate_jobs_age
-- Scratch database only: give simulated jobs their aging key in virtual seconds
-- (arrival - priority x aging interval), as enqueue would have at that virtual time.
UPDATE fairsched.jobs AS j
   SET aging_key = v.key
  FROM unnest(%(ids)s::bigint[], %(keys)s::float8[]) AS v(id, key)
 WHERE j.id = v.id

-- name: simulate_jobs_backdate
-- Scratch database only: running jobs about to complete started their virtual run time
-- ago, so run-time charging sees the simulated durations.
UPDATE fairsched.jobs AS j
   SET started_at = now() - make_interval(secs => v.seconds)
  FROM unnest(%(ids)s::bigint[], %(seconds)s::float8[]) AS v(id, seconds)
 WHERE j.id = v.id AND j.status = 'running'

-- name: simulate_history
-- A queue's jobs created since a time (at most %(limit)s, arrival order): arrival offset,
-- tenant, priority, aggregate, and the latest attempt's claim offset and run time. No index
-- on created_at (one more entry per transition of the hot table): ids grow with creation,
-- so a bisection of the primary key (about 40 descents) finds the first job created at
-- `since`, and a primary key range scan reads the window from there, never older jobs.
WITH RECURSIVE bounds AS (
    SELECT (SELECT min(id) FROM fairsched.jobs) AS lo, (SELECT max(id) FROM fairsched.jobs) + 1 AS hi
    UNION ALL
    SELECT CASE WHEN p.created_at >= %(since)s THEN b.lo ELSE p.id + 1 END,
           CASE WHEN p.created_at >= %(since)s THEN (b.lo + b.hi) / 2 ELSE b.hi END
      FROM bounds b
     CROSS JOIN LATERAL (
            SELECT j.id, j.created_at FROM fairsched.jobs j
             WHERE j.id >= (b.lo + b.hi) / 2
             ORDER BY j.id LIMIT 1) p
     WHERE b.lo < b.hi
), window_jobs AS (
    SELECT j.id, j.created_at, j.tenant, j.priority, j.aggregate_key, j.aggregate_seq
      FROM fairsched.jobs j
     WHERE j.id >= (SELECT min(b.hi) FROM bounds b)
       AND j.queue_name = %(queue)s AND j.created_at >= %(since)s
     ORDER BY j.id
     LIMIT %(limit)s
)
SELECT extract(epoch FROM w.created_at - %(since)s)::float8 AS arrival, w.tenant, w.priority,
       w.aggregate_key, w.aggregate_seq,
       extract(epoch FROM a.claimed_at - %(since)s)::float8 AS claimed,
       extract(epoch FROM a.finished_at - a.claimed_at)::float8 AS seconds
  FROM window_jobs w
  LEFT JOIN LATERAL (
        SELECT claimed_at, finished_at FROM fairsched.attempts
         WHERE job_id = w.id ORDER BY lease_token DESC LIMIT 1) a ON true
 ORDER BY w.created_at, w.id
