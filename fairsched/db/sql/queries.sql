-- name: queue_upsert
-- Declare a queue or update its lease, retry, notify, policy and retention settings, and
-- the weights and caps of the tenants it lists (other tenants keep theirs). The settings
-- policies own are written by their policies (a new queue starts with their defaults).
WITH queue AS (
    INSERT INTO fairsched.queues AS q (name, lease_seconds, max_runtime_seconds, max_attempts,
                                       unknown_max_attempts, backoff_base_seconds,
                                       backoff_max_seconds, notify, policies, policy_params,
                                       finished_retention_seconds, dead_retention_seconds,
                                       history_retention_seconds)
    VALUES (%(name)s, %(lease_seconds)s, %(max_runtime_seconds)s, %(max_attempts)s,
            %(unknown_max_attempts)s, %(backoff_base_seconds)s, %(backoff_max_seconds)s,
            %(notify)s, %(policies)s::text[], %(policy_params)s::jsonb,
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
-- Heartbeat: extend a held lease when progress advanced, never past max_runtime; no
-- progress (SQL NULL) never renews (fairsched.lease_renew, 008_roles.sql: fenced by
-- id, owner, token and expiry).
SELECT lease_expires_at
  FROM fairsched.lease_renew(%(id)s, %(owner)s, %(token)s, %(progress)s::jsonb, %(lease_seconds)s::float8)

-- name: leases_complete
-- Mark held leases succeeded (arrays of id and token), audit every lease that no longer
-- held; returns the ids that completed (fairsched.leases_complete,
-- 014_stack_enqueue_complete.sql). The arrays travel in binary. A stack whose tenant
-- order settles at completion has a function of its own (engine/stackstatements.py).
SELECT id FROM fairsched.leases_complete(%(owner)s, %(ids)b::bigint[], %(tokens)b::bigint[])

-- name: leases_fail
-- Record failed attempts of one owner (arrays of id, token, kind, code, error); returns
-- the ids that held, with where each job went: cancelled, dead, or pending after backoff
-- (fairsched.leases_fail, 008_roles.sql).
SELECT id, status, available_at
  FROM fairsched.leases_fail(%(owner)s, %(ids)s::bigint[], %(tokens)s::bigint[], %(kinds)s::text[],
                             %(codes)s::text[], %(errors)s::text[])

-- name: lease_release
-- Give a held lease back unfinished (shutdown): pending now, the attempt not counted;
-- cancelled instead when a cancel was requested (fairsched.lease_release, 008_roles.sql).
SELECT id FROM fairsched.lease_release(%(id)s, %(owner)s, %(token)s)

-- name: recovery_sweep
-- Move a bounded batch of expired leases (of every queue, or of queue %(queue)s) back to
-- pending (with backoff), to dead when attempts are exhausted, or to cancelled when a
-- cancel was requested (fairsched.recovery_sweep, 008_roles.sql). Safe to run from many
-- processes at once.
SELECT id, queue_name, status FROM fairsched.recovery_sweep(%(queue)s::text, %(batch)s)

-- name: claim_heads_behind
-- The queues whose default claim head sits below their lowest pending key (what a refresh
-- would raise). Read-only, from the heads on: an idle queue costs no write.
SELECT h.queue_name
  FROM fairsched.claim_heads AS h
 WHERE coalesce((h.order_rank, h.order_available_at, h.order_id) < (
           SELECT - j.priority, j.available_at, j.id FROM fairsched.jobs AS j
            WHERE j.queue_name = h.queue_name AND j.status = 'pending'
              AND (- j.priority, j.available_at, j.id) >= (h.order_rank, h.order_available_at, h.order_id)
            ORDER BY - j.priority, j.available_at, j.id LIMIT 1), false)
 ORDER BY h.queue_name

-- name: jobs_statistics_refresh
-- ANALYZE the jobs table when its statistics hide a backlog of at least min_pending
-- (fairsched.jobs_statistics_refresh); true when it ran.
SELECT fairsched.jobs_statistics_refresh(%(min_pending)s)

-- name: claim_heads_refresh
-- Raise a queue's default claim head to its lowest pending job, unless a transaction
-- making jobs pending holds it: true when it did (fairsched.claim_heads_refresh,
-- 013_default_claim_head.sql).
SELECT fairsched.claim_heads_refresh(%(queue)s)

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
-- One job with its current state (the payload included); its lease token for who may
-- read tokens (fairsched.lease_tokens, 012_worker_columns.sql), NULL for a worker.
SELECT j.id, j.queue_name, j.tenant, j.status, j.priority, j.payload, j.attempt_count,
       j.max_attempts, j.lease_owner, t.lease_token, j.lease_expires_at, j.available_at,
       j.aggregate_key, j.aggregate_seq, j.idempotency_key, j.last_error_code, j.last_error,
       j.created_at, j.finished_at
  FROM fairsched.jobs AS j
  JOIN fairsched.lease_tokens AS t ON t.job_id = j.id
 WHERE j.id = %(id)s

-- name: job_history
-- Every recorded attempt and event of a job, oldest first; tokens for who may read them
-- (fairsched.job_history, 012_worker_columns.sql).
SELECT at, kind, detail FROM fairsched.job_history WHERE job_id = %(id)s ORDER BY at

-- name: dead_replay
-- Put a dead job back to pending with a fresh attempt budget, keeping its id and history.
-- (fairsched.dead_replay, 011_operator_functions.sql)
SELECT * FROM fairsched.dead_replay(%(id)s::bigint, %(by)s::text)

-- name: dead_discard
-- Resolve a dead job without running it again; it stays in the table as discarded.
-- (fairsched.dead_discard, 011_operator_functions.sql)
SELECT * FROM fairsched.dead_discard(%(id)s::bigint, %(by)s::text)

-- name: queue_stacks_list
-- Every policy stack a stored queue has, once.
SELECT DISTINCT policies FROM fairsched.queues ORDER BY policies

-- name: stack_function_exists
-- Whether a stack function (fairsched/engine/stackfunctions.py) is installed.
SELECT to_regproc('fairsched.' || %(name)s) IS NOT NULL

-- name: stack_function_install
-- Install a stack function unless it exists (fairsched.stack_function_install, 008_roles.sql).
SELECT fairsched.stack_function_install(%(name)s, %(kind)s, %(stack)s::text[], %(bodies)s::text[])

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
-- (fairsched.jobs_cancel, 011_operator_functions.sql)
SELECT * FROM fairsched.jobs_cancel(%(ids)s::bigint[], %(by)s::text)

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
