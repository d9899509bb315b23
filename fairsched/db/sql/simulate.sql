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
-- A queue's jobs created since a time, in arrival order (bounded): arrival offset, tenant,
-- priority, aggregate, and the latest attempt's claim offset and run time.
SELECT extract(epoch FROM j.created_at - %(since)s)::float8 AS arrival, j.tenant, j.priority,
       j.aggregate_key, j.aggregate_seq,
       extract(epoch FROM a.claimed_at - %(since)s)::float8 AS claimed,
       extract(epoch FROM a.finished_at - a.claimed_at)::float8 AS seconds
  FROM fairsched.jobs j
  LEFT JOIN LATERAL (
        SELECT claimed_at, finished_at FROM fairsched.attempts
         WHERE job_id = j.id ORDER BY lease_token DESC LIMIT 1) a ON true
 WHERE j.queue_name = %(queue)s AND j.created_at >= %(since)s
 ORDER BY j.created_at, j.id
 LIMIT %(limit)s
