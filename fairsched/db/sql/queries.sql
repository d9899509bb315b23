-- name: queue_upsert
-- Declare a queue or update its lease, retry, notify, policy and retention settings, and
-- the weights and caps of the tenants it lists (other tenants keep theirs).
WITH queue AS (
    INSERT INTO fairsched.queues AS q (name, lease_seconds, max_runtime_seconds, max_attempts,
                                       unknown_max_attempts, backoff_base_seconds,
                                       backoff_max_seconds, notify, policies,
                                       aging_interval_seconds, charge, tenant_cap, serial_gap,
                                       serial_poison, policy_params, finished_retention_seconds,
                                       dead_retention_seconds, history_retention_seconds)
    VALUES (%(name)s, %(lease_seconds)s, %(max_runtime_seconds)s, %(max_attempts)s,
            %(unknown_max_attempts)s, %(backoff_base_seconds)s, %(backoff_max_seconds)s,
            %(notify)s, %(policies)s::text[], %(aging_interval_seconds)s, %(charge)s,
            %(tenant_cap)s, %(serial_gap)s, %(serial_poison)s, %(policy_params)s::jsonb,
            %(finished_retention_seconds)s, %(dead_retention_seconds)s,
            %(history_retention_seconds)s)
    ON CONFLICT (name) DO UPDATE
       SET lease_seconds = EXCLUDED.lease_seconds,
           max_runtime_seconds = EXCLUDED.max_runtime_seconds,
           max_attempts = EXCLUDED.max_attempts,
           unknown_max_attempts = EXCLUDED.unknown_max_attempts,
           backoff_base_seconds = EXCLUDED.backoff_base_seconds,
           backoff_max_seconds = EXCLUDED.backoff_max_seconds,
           notify = EXCLUDED.notify,
           policies = EXCLUDED.policies,
           aging_interval_seconds = EXCLUDED.aging_interval_seconds,
           charge = EXCLUDED.charge,
           tenant_cap = EXCLUDED.tenant_cap,
           serial_gap = EXCLUDED.serial_gap,
           serial_poison = EXCLUDED.serial_poison,
           policy_params = EXCLUDED.policy_params,
           finished_retention_seconds = EXCLUDED.finished_retention_seconds,
           dead_retention_seconds = EXCLUDED.dead_retention_seconds,
           history_retention_seconds = EXCLUDED.history_retention_seconds,
           updated_at = now()
    RETURNING name
), heads AS (
    INSERT INTO fairsched.claim_heads (queue_name) SELECT name FROM queue ON CONFLICT DO NOTHING
), floors AS (
    INSERT INTO fairsched.pass_floors (queue_name) SELECT name FROM queue ON CONFLICT DO NOTHING
)
INSERT INTO fairsched.tenant_shares AS t (queue_name, tenant, weight, cap, active, ready_at)
SELECT queue.name, e.key, (e.value ->> 'weight')::float8, (e.value ->> 'cap')::int, false,
       'infinity'
  FROM queue, jsonb_each(%(tenants)s::jsonb) AS e
ON CONFLICT (queue_name, tenant) DO UPDATE
   SET weight = EXCLUDED.weight, cap = EXCLUDED.cap, updated_at = now()

-- name: queue_get
-- One queue's settings, or nothing when it is not declared.
SELECT name, lease_seconds, max_runtime_seconds, max_attempts, unknown_max_attempts,
       backoff_base_seconds, backoff_max_seconds, notify
  FROM fairsched.queues
 WHERE name = %(name)s

-- name: jobs_enqueue
-- Insert jobs for one queue (arrays, one element per job); returns one id per input,
-- in input order. An input whose idempotency key exists returns the existing id.
-- On a serial queue, jobs of an aggregate start as 'waiting' (promoted after). Every job
-- of the batch stores the batch's trace context (NULL outside a trace).
WITH q AS (
    SELECT name, max_attempts, notify, aging_interval_seconds
      FROM fairsched.queues WHERE name = %(queue)s
), input AS MATERIALIZED (
    SELECT t.*, nextval('fairsched.jobs_id_seq') AS new_id
      FROM unnest(%(tenants)s::text[], %(payloads)s::jsonb[], %(priorities)s::int[],
                  %(aggregate_keys)s::text[], %(aggregate_seqs)s::bigint[],
                  %(run_ats)s::timestamptz[], %(max_attempts)s::int[],
                  %(idempotency_keys)s::text[])
           WITH ORDINALITY AS t(tenant, payload, priority, aggregate_key, aggregate_seq,
                                run_at, max_attempts, idempotency_key, ord)
     WHERE EXISTS (SELECT 1 FROM q)
), inserted AS (
    INSERT INTO fairsched.jobs (id, queue_name, tenant, payload, priority, aggregate_key,
                                aggregate_seq, available_at, max_attempts, idempotency_key,
                                status, serial, aging_key, trace_context)
    OVERRIDING SYSTEM VALUE
    SELECT i.new_id, q.name, i.tenant, i.payload, i.priority, i.aggregate_key,
           i.aggregate_seq, coalesce(i.run_at, now()), coalesce(i.max_attempts, q.max_attempts),
           i.idempotency_key,
           CASE WHEN %(serial)s::bool AND i.aggregate_key IS NOT NULL THEN 'waiting' ELSE 'pending' END,
           %(serial)s::bool AND i.aggregate_key IS NOT NULL,
           extract(epoch FROM now()) - i.priority * q.aging_interval_seconds,
           %(trace_context)s::jsonb
      FROM input i CROSS JOIN q
     ORDER BY i.ord
    ON CONFLICT (queue_name, tenant, idempotency_key) WHERE idempotency_key IS NOT NULL
    DO NOTHING
    RETURNING id, tenant, available_at, status, aggregate_key
), activated AS (
    -- Weighted queues: the jobs' tenants join the selection, committed with the jobs.
    SELECT fairsched.tenant_shares_activate(q.name, array_agg(i.tenant),
                                            array_agg(coalesce(i.run_at, '-infinity')))
      FROM q CROSS JOIN input i
     WHERE %(activate)s::bool
     GROUP BY q.name
), notified AS (
    SELECT pg_notify('fairsched_jobs', q.name)
      FROM q
     WHERE q.notify AND EXISTS (SELECT 1 FROM inserted)
)
SELECT coalesce(ins.id, existing.id) AS id,
       (SELECT count(*) FROM activated) AS activated,
       (SELECT count(*) FROM notified) AS notified,
       ins.status AS inserted_status
  FROM input i
  LEFT JOIN inserted ins ON ins.id = i.new_id
  LEFT JOIN fairsched.jobs existing
         ON ins.id IS NULL
        AND existing.queue_name = %(queue)s
        AND existing.tenant = i.tenant
        AND existing.idempotency_key = i.idempotency_key
 ORDER BY i.ord

-- name: jobs_find_by_idempotency_key
-- The ids of existing jobs for (tenant, idempotency key) pairs of one queue.
SELECT t.ord, j.id
  FROM unnest(%(tenants)s::text[], %(idempotency_keys)s::text[]) WITH ORDINALITY
       AS t(tenant, idempotency_key, ord)
  JOIN fairsched.jobs j
    ON j.queue_name = %(queue)s AND j.tenant = t.tenant
   AND j.idempotency_key = t.idempotency_key

-- name: claim_plan_generic
-- The tenant-first claim runs on its generic plan (planning it costs more than running it),
-- without JIT: see claim_session_generic.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('jit', 'off', true)

-- name: claim_session_generic
-- A claim session: every claim runs on its generic plan, without JIT. A generic plan
-- cannot see the limit, and on a backlog of a few 100k jobs its cost estimate passes
-- jit_above_cost (100000 by default): every claim then compiled its expressions first
-- (~70 ms, against ~1.5 ms for the claim of 50 itself).
SELECT set_config('plan_cache_mode', 'force_generic_plan', false), set_config('jit', 'off', false)

-- name: lease_renew
-- Heartbeat: extend a held lease when progress advanced, never past max_runtime.
-- No progress (SQL NULL) never renews and keeps the last reported value.
-- Every fenced transition looks its rows up by id, whatever the last ANALYZE saw: where
-- it saw few running jobs, a bare `j.status = 'running'` would have the planner scan
-- jobs_expired_lease_idx (every running job's entry, and each dead one) or the whole
-- table. `(j.status = 'running') IS TRUE` keeps the partial index out, and the batch
-- transitions probe `j.id = ANY (ARRAY(SELECT ...))`, an array the planner takes to be
-- small whatever its size (joined to its input, the update would be planned on the
-- input's and the table's estimates).
UPDATE fairsched.jobs AS j
   SET lease_expires_at = CASE
           WHEN %(progress)s::jsonb IS NOT NULL AND j.progress IS DISTINCT FROM %(progress)s::jsonb
           THEN least(now() + make_interval(secs => %(lease_seconds)s::float8),
                      j.started_at + make_interval(secs => q.max_runtime_seconds))
           ELSE j.lease_expires_at
       END,
       progress = coalesce(%(progress)s::jsonb, j.progress)
  FROM fairsched.queues AS q
 WHERE q.name = j.queue_name
   AND j.id = %(id)s
   AND (j.status = 'running') IS TRUE
   AND j.lease_owner = %(owner)s
   AND j.lease_token = %(token)s
   AND j.lease_expires_at > now()
RETURNING j.lease_expires_at

-- name: leases_complete
-- Mark held leases succeeded (arrays of id and token; a succeeded job's row is its
-- attempt's record), settle the shares
-- of the jobs weighted claims counted from the rows updated
-- (fairsched.tenant_shares_finish), and audit every
-- lease that no longer held. Returns the ids that completed. Rows
-- are looked up by id (see lease_renew); each row's token is found by its id's position.
-- The id and token arrays travel in binary (their placeholders end in b): psycopg dumps a
-- list of 50 ints in binary in under half the time it takes as text.
WITH done AS (
    UPDATE fairsched.jobs AS j
       SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL
     WHERE j.id = ANY (ARRAY(SELECT unnest(%(ids)b::bigint[])))
       AND (j.status = 'running') IS TRUE
       AND j.lease_owner = %(owner)s
       AND j.lease_token = (%(tokens)b::bigint[])[array_position(%(ids)b::bigint[], j.id)]
       AND j.lease_expires_at > now()
    RETURNING j.id, j.queue_name, j.tenant, j.share_counted
), stale AS (
    INSERT INTO fairsched.job_events (job_id, kind, detail)
    SELECT i.id, 'stale_completion_rejected',
           jsonb_build_object('op', 'complete', 'token', i.token, 'owner', %(owner)s)
      FROM unnest(%(ids)b::bigint[], %(tokens)b::bigint[]) AS i(id, token)
     WHERE (SELECT count(*) FROM done) < cardinality(%(ids)b::bigint[])
       AND i.id <> ALL (ARRAY(SELECT d.id FROM done AS d))
), shares AS (
    SELECT fairsched.tenant_shares_finish(array_agg(d.id), array_agg(d.queue_name), array_agg(d.tenant))
      FROM done AS d
     WHERE d.share_counted
    HAVING count(*) > 0
)
SELECT d.id FROM done AS d LEFT JOIN shares ON true

-- name: leases_fail
-- Record failed attempts of one owner in one statement (arrays of id, token, kind,
-- code, error), as lease_fail does for one; returns the ids that held, with where
-- each job went: cancelled when a cancel was requested (005_cancel.sql), else dead
-- (permanent or exhausted) or pending after backoff. Rows are looked up by id (see lease_renew); each row's token, kind,
-- code and error are found by its id's position.
WITH target AS (
    SELECT j.id, (%(codes)s::text[])[p.n] AS code, (%(errors)s::text[])[p.n] AS error,
           ((%(kinds)s::text[])[p.n] = 'permanent'
            OR j.attempt_count >= CASE WHEN (%(kinds)s::text[])[p.n] = 'unknown'
                                       THEN least(j.max_attempts, q.unknown_max_attempts)
                                       ELSE j.max_attempts END) AS exhausted,
           j.cancel_requested_at IS NOT NULL AS cancelling,
           random() * least(q.backoff_max_seconds,
                            q.backoff_base_seconds * power(2, least(j.attempt_count - 1, 60)))
               AS delay
      FROM fairsched.jobs AS j
      JOIN fairsched.queues AS q ON q.name = j.queue_name
     CROSS JOIN LATERAL (SELECT array_position(%(ids)s::bigint[], j.id) AS n) AS p
     WHERE j.id = ANY (ARRAY(SELECT unnest(%(ids)s::bigint[])))
       AND (j.status = 'running') IS TRUE
       AND j.lease_owner = %(owner)s
       AND j.lease_token = (%(tokens)s::bigint[])[p.n]
       AND j.lease_expires_at > now()
     ORDER BY j.id
       FOR UPDATE OF j
), moved AS (
    UPDATE fairsched.jobs AS j
       SET status = CASE WHEN t.cancelling THEN 'cancelled' WHEN t.exhausted THEN 'dead'
                         ELSE 'pending' END,
           available_at = CASE WHEN t.exhausted OR t.cancelling THEN j.available_at
                               ELSE now() + make_interval(secs => t.delay) END,
           finished_at = CASE WHEN t.exhausted OR t.cancelling THEN now() END,
           lease_expires_at = NULL,
           last_error_code = t.code,
           last_error = t.error
      FROM target t
     WHERE j.id = t.id
    RETURNING j.id, j.status, j.attempt_count, j.lease_token, j.lease_owner, j.started_at,
              j.available_at, t.code, t.error
), audit AS (
    INSERT INTO fairsched.attempt_log (job_id, attempt, lease_token, lease_owner, claimed_at,
                                    outcome, error_code, error)
    SELECT id, attempt_count, lease_token, lease_owner, started_at,
           CASE WHEN status IN ('dead', 'cancelled') THEN status ELSE 'retrying' END, code, error
      FROM moved
), stale AS (
    INSERT INTO fairsched.job_events (job_id, kind, detail)
    SELECT i.id, 'stale_completion_rejected',
           jsonb_build_object('op', 'fail', 'token', i.token, 'owner', %(owner)s::text)
      FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS i(id, token)
     WHERE (SELECT count(*) FROM moved) < cardinality(%(ids)s::bigint[])
       AND i.id <> ALL (ARRAY(SELECT m.id FROM moved AS m))
)
SELECT id, status, available_at FROM moved

-- name: lease_release
-- Give a held lease back unfinished (shutdown): pending now, the attempt not counted;
-- cancelled instead when a cancel was requested.
WITH moved AS (
    UPDATE fairsched.jobs AS j
       SET status = CASE WHEN j.cancel_requested_at IS NULL THEN 'pending' ELSE 'cancelled' END,
           finished_at = CASE WHEN j.cancel_requested_at IS NOT NULL THEN now() END,
           available_at = now(), lease_expires_at = NULL,
           attempt_count = j.attempt_count - 1
     WHERE j.id = %(id)s
       AND (j.status = 'running') IS TRUE
       AND j.lease_owner = %(owner)s
       AND j.lease_token = %(token)s
       AND j.lease_expires_at > now()
    RETURNING j.id, j.attempt_count, j.lease_token, j.lease_owner, j.started_at
), audit AS (
    INSERT INTO fairsched.attempt_log (job_id, attempt, lease_token, lease_owner, claimed_at, outcome)
    SELECT id, attempt_count + 1, lease_token, lease_owner, started_at, 'released' FROM moved
), stale AS (
    INSERT INTO fairsched.job_events (job_id, kind, detail)
    SELECT %(id)s, 'stale_completion_rejected',
           jsonb_build_object('op', 'release', 'token', %(token)s::bigint, 'owner', %(owner)s)
     WHERE NOT EXISTS (SELECT 1 FROM moved)
)
SELECT id FROM moved

-- name: recovery_sweep
-- Move a bounded batch of expired leases (of every queue, or of queue %(queue)s) back to
-- pending (with backoff), to dead when attempts are exhausted, or to cancelled when a
-- cancel was requested. Safe to run from many processes at once.
WITH expired AS MATERIALIZED (
    SELECT id, lease_owner, lease_token
      FROM fairsched.jobs
     WHERE status = 'running' AND lease_expires_at <= now()
       AND (%(queue)s::text IS NULL OR queue_name = %(queue)s)
     ORDER BY lease_expires_at
     LIMIT %(batch)s
       FOR UPDATE SKIP LOCKED
), moved AS (
    UPDATE fairsched.jobs AS j
       SET status = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                         WHEN j.attempt_count >= j.max_attempts THEN 'dead' ELSE 'pending' END,
           available_at = CASE WHEN j.attempt_count >= j.max_attempts
                                 OR j.cancel_requested_at IS NOT NULL THEN j.available_at
               ELSE now() + make_interval(secs => random() * least(q.backoff_max_seconds,
                        q.backoff_base_seconds * power(2, least(j.attempt_count - 1, 60))))
               END,
           finished_at = CASE WHEN j.attempt_count >= j.max_attempts
                                OR j.cancel_requested_at IS NOT NULL THEN now() END,
           last_error_code = CASE
               WHEN now() >= j.started_at + make_interval(secs => q.max_runtime_seconds)
               THEN 'max_runtime_exceeded' ELSE 'lease_expired' END,
           last_error = NULL,
           lease_expires_at = NULL
      FROM expired e, fairsched.queues q
     WHERE j.id = e.id AND q.name = j.queue_name
    RETURNING j.id, j.queue_name, j.status, j.attempt_count, e.lease_token, e.lease_owner,
              j.started_at, j.last_error_code
), audit AS (
    INSERT INTO fairsched.attempt_log (job_id, attempt, lease_token, lease_owner, claimed_at,
                                    outcome, error_code)
    SELECT id, attempt_count, lease_token, lease_owner, started_at, 'expired', last_error_code
      FROM moved
)
SELECT id, queue_name, status FROM moved

-- name: claim_heads_behind
-- Per queue, whether its claim heads and its pass floor sit below its lowest live key
-- (what a refresh would raise). Read-only, from the heads on: an idle queue costs no write.
SELECT queue_name, heads_behind, floor_behind FROM (
    SELECT h.queue_name,
           coalesce((h.fifo_rank, h.fifo_available_at, h.fifo_id) < (
               SELECT - j.priority, j.available_at, j.id FROM fairsched.jobs AS j
                WHERE j.queue_name = h.queue_name AND j.status = 'pending'
                  AND (- j.priority, j.available_at, j.id) >= (h.fifo_rank, h.fifo_available_at, h.fifo_id)
                ORDER BY - j.priority, j.available_at, j.id LIMIT 1), false)
        OR coalesce((h.aging_key, h.aging_id) < (
               SELECT j.aging_key, j.id FROM fairsched.jobs AS j
                WHERE j.queue_name = h.queue_name AND j.status = 'pending'
                  AND (j.aging_key, j.id) >= (h.aging_key, h.aging_id)
                ORDER BY j.aging_key, j.id LIMIT 1), false) AS heads_behind,
           coalesce(f.pass < (
               SELECT t.pass FROM fairsched.tenant_shares AS t
                WHERE t.queue_name = f.queue_name AND t.active AND t.pass >= f.pass
                ORDER BY t.pass LIMIT 1), false) AS floor_behind
      FROM fairsched.claim_heads AS h
      JOIN fairsched.pass_floors AS f USING (queue_name)
) AS b
 WHERE heads_behind OR floor_behind
 ORDER BY queue_name

-- name: jobs_statistics_refresh
-- ANALYZE the jobs table when its statistics hide a backlog of at least min_pending
-- (fairsched.jobs_statistics_refresh); true when it ran.
SELECT fairsched.jobs_statistics_refresh(%(min_pending)s)

-- name: claim_heads_lock
-- Lock a queue's claim heads for a refresh, skipping them while a transaction that makes
-- jobs pending holds them (it lowers them itself; the next refresh raises them).
SELECT queue_name FROM fairsched.claim_heads WHERE queue_name = %(queue)s FOR UPDATE SKIP LOCKED

-- name: claim_heads_refresh
-- Raise a locked queue's heads to its lowest pending job in each built-in job order (on
-- a snapshot taken after the lock). The scans start at the current heads: no pending
-- job is below them. A queue with no pending job keeps its heads.
WITH fifo AS (
    SELECT - j.priority AS rank, j.available_at, j.id
      FROM fairsched.claim_heads AS h
      JOIN fairsched.jobs AS j ON j.queue_name = h.queue_name
     WHERE h.queue_name = %(queue)s AND j.status = 'pending'
       AND (- j.priority, j.available_at, j.id) >= (h.fifo_rank, h.fifo_available_at, h.fifo_id)
     ORDER BY - j.priority, j.available_at, j.id
     LIMIT 1
), aging AS (
    SELECT j.aging_key, j.id
      FROM fairsched.claim_heads AS h
      JOIN fairsched.jobs AS j ON j.queue_name = h.queue_name
     WHERE h.queue_name = %(queue)s AND j.status = 'pending'
       AND (j.aging_key, j.id) >= (h.aging_key, h.aging_id)
     ORDER BY j.aging_key, j.id
     LIMIT 1
)
UPDATE fairsched.claim_heads AS h
   SET fifo_rank = coalesce((SELECT rank FROM fifo), h.fifo_rank),
       fifo_available_at = coalesce((SELECT available_at FROM fifo), h.fifo_available_at),
       fifo_id = coalesce((SELECT id FROM fifo), h.fifo_id),
       aging_key = coalesce((SELECT aging_key FROM aging), h.aging_key),
       aging_id = coalesce((SELECT id FROM aging), h.aging_id),
       refreshed_at = now()
 WHERE h.queue_name = %(queue)s

-- name: pass_floors_lock
-- Lock a queue's pass floor for a refresh, skipping it while a tenant is being activated.
SELECT queue_name FROM fairsched.pass_floors WHERE queue_name = %(queue)s FOR UPDATE SKIP LOCKED

-- name: pass_floors_refresh
-- Raise a locked queue's pass floor to its lowest active pass (on a snapshot taken after
-- the lock), scanning from the current floor; a queue with no active tenant keeps it.
UPDATE fairsched.pass_floors AS f
   SET pass = coalesce((SELECT t.pass FROM fairsched.tenant_shares AS t
                         WHERE t.queue_name = f.queue_name AND t.active AND t.pass >= f.pass
                         ORDER BY t.pass LIMIT 1), f.pass),
       refreshed_at = now()
 WHERE f.queue_name = %(queue)s

-- name: dead_list
-- Dead jobs, newest first, optionally filtered by queue, tenant, error code and death time.
SELECT id, queue_name, tenant, attempt_count, last_error_code, last_error, created_at,
       finished_at
  FROM fairsched.jobs
 WHERE status = 'dead'
   AND (%(queue)s::text IS NULL OR queue_name = %(queue)s)
   AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
   AND (%(code)s::text IS NULL OR last_error_code = %(code)s)
   AND (%(since)s::timestamptz IS NULL OR finished_at >= %(since)s)
 ORDER BY finished_at DESC, id DESC
 LIMIT %(limit)s

-- name: job_get
-- One job with its current state (the payload included).
SELECT id, queue_name, tenant, status, priority, payload, attempt_count, max_attempts,
       lease_owner, lease_token, lease_expires_at, available_at, aggregate_key,
       aggregate_seq, idempotency_key, last_error_code, last_error, created_at,
       finished_at
  FROM fairsched.jobs
 WHERE id = %(id)s

-- name: job_history
-- Every recorded attempt and event of a job, oldest first.
SELECT at, kind, detail FROM (
    SELECT finished_at AS at, 'attempt' AS kind,
           jsonb_build_object('attempt', attempt, 'token', lease_token, 'owner', lease_owner,
                              'claimed_at', claimed_at, 'outcome', outcome,
                              'error_code', error_code, 'error', error) AS detail
      FROM fairsched.attempts WHERE job_id = %(id)s
    UNION ALL
    SELECT at, kind, detail FROM fairsched.job_events WHERE job_id = %(id)s
) h
ORDER BY at

-- name: dead_replay
-- Put a dead job back to pending with a fresh attempt budget, keeping its id and history.
WITH moved AS (
    UPDATE fairsched.jobs
       SET status = 'pending', attempt_count = 0, available_at = now(), finished_at = NULL
     WHERE id = %(id)s AND status = 'dead'
    RETURNING id
), event AS (
    INSERT INTO fairsched.job_events (job_id, kind, detail)
    SELECT id, 'replayed', jsonb_build_object('by', %(by)s::text) FROM moved
)
SELECT id FROM moved

-- name: dead_discard
-- Resolve a dead job without running it again; it stays in the table as discarded.
WITH moved AS (
    UPDATE fairsched.jobs
       SET status = 'discarded'
     WHERE id = %(id)s AND status = 'dead'
    RETURNING id
), event AS (
    INSERT INTO fairsched.job_events (job_id, kind, detail)
    SELECT id, 'discarded', jsonb_build_object('by', %(by)s::text) FROM moved
)
SELECT id FROM moved

-- name: stale_completions_count
-- How many completions were rejected because their lease no longer held.
SELECT count(*) FROM fairsched.job_events WHERE kind = 'stale_completion_rejected'

-- name: workers_listening
-- Worker listeners connected to this database (a worker listens once its claimers run).
SELECT count(*)
  FROM pg_stat_activity
 WHERE datname = current_database() AND application_name = %(application_name)s

-- name: jobs_cancel
-- Cancel jobs by id (locked in id order): pending and waiting ones at once, running
-- ones by a request their worker sees at its next heartbeat (a second request of the
-- same job changes nothing). Returns each job found with what became of it (cancelled,
-- requested, or finished: it had already finished), its status before, and its queue.
WITH target AS MATERIALIZED (
    SELECT j.id, j.queue_name, j.status, j.cancel_requested_at
      FROM fairsched.jobs AS j
     WHERE j.id = ANY (ARRAY(SELECT unnest(%(ids)s::bigint[])))
     ORDER BY j.id
       FOR UPDATE
), cancelled AS (
    UPDATE fairsched.jobs AS j
       SET status = 'cancelled', finished_at = now(), cancel_requested_at = now()
      FROM target AS t
     WHERE j.id = t.id AND t.status IN ('pending', 'waiting')
    RETURNING j.id
), requested AS (
    UPDATE fairsched.jobs AS j
       SET cancel_requested_at = now()
      FROM target AS t
     WHERE j.id = t.id AND t.status = 'running' AND t.cancel_requested_at IS NULL
    RETURNING j.id
), events AS (
    INSERT INTO fairsched.job_events (job_id, kind, detail)
    SELECT id, 'cancelled', jsonb_build_object('by', %(by)s::text) FROM cancelled
    UNION ALL
    SELECT id, 'cancel_requested', jsonb_build_object('by', %(by)s::text) FROM requested
)
SELECT t.id, CASE WHEN t.status IN ('pending', 'waiting') THEN 'cancelled'
                  WHEN t.status = 'running' THEN 'requested'
                  ELSE 'finished' END,
       t.status, t.queue_name
  FROM target AS t

-- name: jobs_cancel_pick
-- Up to %(batch)s jobs of a tenant on a queue that a cancel still changes: pending,
-- waiting, and running without a request yet (each through its own partial index).
(SELECT j.id FROM fairsched.jobs AS j
  WHERE j.status = 'pending' AND j.queue_name = %(queue)s AND j.tenant = %(tenant)s
  LIMIT %(batch)s)
UNION ALL
(SELECT j.id FROM fairsched.jobs AS j
  WHERE j.status = 'waiting' AND j.queue_name = %(queue)s AND j.tenant = %(tenant)s
  LIMIT %(batch)s)
UNION ALL
(SELECT j.id FROM fairsched.jobs AS j
  WHERE j.status = 'running' AND j.queue_name = %(queue)s AND j.tenant = %(tenant)s
    AND j.cancel_requested_at IS NULL
  LIMIT %(batch)s)
LIMIT %(batch)s

-- name: jobs_cancel_requested
-- Which of these running jobs, held by this owner, have a cancel request.
SELECT j.id FROM fairsched.jobs AS j
 WHERE j.id = ANY (ARRAY(SELECT unnest(%(ids)s::bigint[])))
   AND j.status = 'running' AND j.lease_owner = %(owner)s
   AND j.cancel_requested_at IS NOT NULL
