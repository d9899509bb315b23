-- name: aging_rekey_pending
-- The next batch of a queue's pending jobs in aging order past the cursor (the claim's
-- aging index, jobs_aging_idx): ids and the key each was read at.
SELECT j.id, j.aging_key AS after_key
  FROM fairsched.jobs AS j
 WHERE j.queue_name = %(queue)s AND j.status = 'pending'
   AND (j.aging_key, j.id) > (%(after_key)s::float8, %(after_id)s::bigint)
 ORDER BY j.aging_key, j.id
 LIMIT %(batch)s

-- name: aging_rekey_waiting
-- The next batch of a queue's waiting (serial) jobs in aggregate order past the cursor
-- (jobs_aggregate_waiting_idx; those columns never change while a job waits).
SELECT j.id, j.tenant AS after_tenant, j.aggregate_key AS after_aggregate,
       j.aggregate_seq AS after_seq
  FROM fairsched.jobs AS j
 WHERE j.queue_name = %(queue)s AND j.status = 'waiting'
   AND (j.tenant, j.aggregate_key, j.aggregate_seq)
       > (%(after_tenant)s::text, %(after_aggregate)s::text, %(after_seq)s::bigint)
 ORDER BY j.tenant, j.aggregate_key, j.aggregate_seq
 LIMIT %(batch)s

-- name: aging_rekey_running
-- The next batch of a queue's running jobs past the cursor, by id (running jobs are few:
-- at most the slots of the workers; jobs_expired_lease_idx holds them all).
SELECT j.id
  FROM fairsched.jobs AS j
 WHERE j.status = 'running' AND j.queue_name = %(queue)s AND j.id > %(after_id)s::bigint
 ORDER BY j.id
 LIMIT %(batch)s

-- name: aging_rekey_dead
-- The next batch of a queue's dead jobs (a replay puts one back to pending with its key)
-- past the cursor, in jobs_dead_idx order.
SELECT j.id, j.finished_at AS after_finished
  FROM fairsched.jobs AS j
 WHERE j.queue_name = %(queue)s AND j.status = 'dead'
   AND (j.finished_at, j.id) > (%(after_finished)s::timestamptz, %(after_id)s::bigint)
 ORDER BY j.finished_at, j.id
 LIMIT %(batch)s

-- name: aging_rekey_update
-- Re-key a batch as enqueue keys a job (jobs_enqueue: enqueue epoch - priority × the
-- queue's interval; created_at is the enqueue transaction's now()), by the interval
-- stored now. Rows that left the status meanwhile, or already carry the key, are left.
UPDATE fairsched.jobs AS j
   SET aging_key = extract(epoch FROM j.created_at) - j.priority * q.aging_interval_seconds
  FROM fairsched.queues AS q
 WHERE q.name = %(queue)s
   AND j.id = ANY(%(ids)s::bigint[])
   AND j.queue_name = q.name
   AND j.status = %(status)s
   AND j.aging_key <> extract(epoch FROM j.created_at) - j.priority * q.aging_interval_seconds

-- name: aging_head_behind
-- The queues whose aging head sits below their lowest pending key (what a refresh would
-- raise). Read-only, from the heads on.
SELECT h.queue_name
  FROM fairsched.claim_heads AS h
 WHERE coalesce((h.aging_key, h.aging_id) < (
           SELECT j.aging_key, j.id FROM fairsched.jobs AS j
            WHERE j.queue_name = h.queue_name AND j.status = 'pending'
              AND (j.aging_key, j.id) >= (h.aging_key, h.aging_id)
            ORDER BY j.aging_key, j.id LIMIT 1), false)
 ORDER BY h.queue_name

-- name: aging_head_refresh
-- Raise a queue's aging head to its lowest pending job, unless a transaction making jobs
-- pending holds it: true when it did (fairsched.aging_head_refresh, this policy's 001).
SELECT fairsched.aging_head_refresh(%(queue)s)
