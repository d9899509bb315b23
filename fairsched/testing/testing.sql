-- name: testing_jobs_match
-- The jobs that match an assertion's filters (a NULL filter matches every job), oldest first.
SELECT id, queue_name, tenant, payload, status, priority, aggregate_key, aggregate_seq,
       available_at, max_attempts, idempotency_key
  FROM fairsched.jobs
 WHERE (%(queue)s::text IS NULL OR queue_name = %(queue)s::text)
   AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
   AND (%(payload)s::jsonb IS NULL OR payload = %(payload)s::jsonb)
   AND (%(contains)s::jsonb IS NULL OR payload @> %(contains)s::jsonb)
   AND (%(priority)s::int IS NULL OR priority = %(priority)s::int)
   AND (%(aggregate_key)s::text IS NULL OR aggregate_key = %(aggregate_key)s::text)
 ORDER BY id

-- name: testing_jobs_recent
-- The newest jobs with a bounded preview of each payload, and how many jobs there are in all.
SELECT id, queue_name, tenant, status, left(payload::text, %(chars)s) AS preview,
       length(payload::text) > %(chars)s AS cut, count(*) OVER () AS total
  FROM fairsched.jobs
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: testing_queue_due
-- How many pending jobs of a queue are due now (run_job wants nothing else claimable).
SELECT count(*)
  FROM fairsched.jobs
 WHERE queue_name = %(queue)s AND status = 'pending' AND available_at <= now()

-- name: testing_job_state
-- A job's status and whether it is due, to say why a claim did not lease it.
SELECT status, available_at, available_at > now() AS later
  FROM fairsched.jobs
 WHERE id = %(id)s
