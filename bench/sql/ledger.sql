-- name: ledger_create
-- The chaos ledger: one row per handler execution (job id + lease token), in database time,
-- in the lab's own schema.
CREATE SCHEMA IF NOT EXISTS fairsched_lab;
CREATE TABLE IF NOT EXISTS fairsched_lab.ledger (
    job_id         bigint NOT NULL,
    lease_token    bigint NOT NULL,
    owner          text NOT NULL,
    tenant         text NOT NULL,
    aggregate_key  text,
    aggregate_seq  bigint,
    claimed_at     timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    started_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at       timestamptz,
    finished       boolean NOT NULL DEFAULT false,
    PRIMARY KEY (job_id, lease_token)
);
CREATE TABLE IF NOT EXISTS fairsched_lab.ledger_deaths (
    owner  text PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS fairsched_lab.ledger_pauses (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner       text NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at    timestamptz
)

-- name: ledger_reset
-- Forget the executions, deaths and pauses of an earlier run.
TRUNCATE fairsched_lab.ledger, fairsched_lab.ledger_deaths, fairsched_lab.ledger_pauses

-- name: ledger_drop
-- Drop the ledger's tables, and the lab's schema when nothing else of the lab is left in it.
DROP TABLE IF EXISTS fairsched_lab.ledger, fairsched_lab.ledger_deaths, fairsched_lab.ledger_pauses;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                    WHERE n.nspname = 'fairsched_lab') THEN
        DROP SCHEMA IF EXISTS fairsched_lab;
    END IF;
END
$$

-- name: ledger_start
-- A handler began executing a leased job.
INSERT INTO fairsched_lab.ledger (job_id, lease_token, owner, tenant, aggregate_key, aggregate_seq,
                              claimed_at, expires_at)
VALUES (%(job_id)s, %(token)s, %(owner)s, %(tenant)s, %(aggregate_key)s, %(aggregate_seq)s,
        %(claimed_at)s, %(expires_at)s)
ON CONFLICT (job_id, lease_token) DO NOTHING

-- name: ledger_end
-- A handler stopped executing a leased job: its work done (finished) or abandoned.
UPDATE fairsched_lab.ledger
   SET ended_at = clock_timestamp(), finished = %(finished)s
 WHERE job_id = %(job_id)s AND lease_token = %(token)s

-- name: ledger_death
-- A worker process was killed: none of its executions ran past this moment.
INSERT INTO fairsched_lab.ledger_deaths (owner) VALUES (%(owner)s)
ON CONFLICT (owner) DO NOTHING

-- name: ledger_pause
-- A worker process was stopped (SIGSTOP): record after stopping it.
INSERT INTO fairsched_lab.ledger_pauses (owner) VALUES (%(owner)s) RETURNING id

-- name: ledger_resume
-- A stopped worker is about to be continued: record before SIGCONT.
UPDATE fairsched_lab.ledger_pauses SET ended_at = clock_timestamp() WHERE id = %(id)s

-- name: ledger_pause_intervals
-- When each worker was stopped (a pause not yet ended lasts until now).
SELECT owner, started_at, coalesce(ended_at, clock_timestamp()) AS ended_at FROM fairsched_lab.ledger_pauses

-- name: ledger_executions
-- Every recorded execution with its end: when its handler stopped, else when its process died.
SELECT l.job_id, l.lease_token, l.owner, l.tenant, l.aggregate_key, l.aggregate_seq,
       l.claimed_at, l.started_at, coalesce(l.ended_at, d.at) AS ended_at, l.finished
  FROM fairsched_lab.ledger l
  LEFT JOIN fairsched_lab.ledger_deaths d ON d.owner = l.owner
 ORDER BY l.job_id, l.started_at

-- name: ledger_job_states
-- Status, current token and succeeded-attempt tokens of the given jobs.
SELECT j.id, j.status, j.lease_token,
       coalesce(array_agg(a.lease_token) FILTER (WHERE a.job_id IS NOT NULL), '{}') AS succeeded_tokens
  FROM fairsched.jobs j
  LEFT JOIN fairsched.attempts a ON a.job_id = j.id AND a.outcome = 'succeeded'
 WHERE j.id = ANY(%(ids)s::bigint[])
 GROUP BY j.id

-- name: ledger_stale_rejections
-- Completions, failures and releases refused since a moment, for the given jobs' queue.
SELECT count(*)
  FROM fairsched.job_events e
  JOIN fairsched.jobs j ON j.id = e.job_id
 WHERE e.kind = 'stale_completion_rejected' AND j.queue_name = %(queue)s AND e.at >= %(since)s
