-- name: plain_install
-- The seed's job table and claim index, for the plain SKIP LOCKED reference loop, in the lab's schema.
CREATE SCHEMA IF NOT EXISTS fairsched_lab;
DROP TABLE IF EXISTS fairsched_lab.plain_jobs;
CREATE TABLE fairsched_lab.plain_jobs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_name text NOT NULL,
    payload jsonb NOT NULL,
    status text NOT NULL DEFAULT 'pending',
    priority integer NOT NULL DEFAULT 0,
    available_at timestamptz NOT NULL DEFAULT now(),
    attempt_count integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL DEFAULT 8,
    lease_owner text,
    lease_token bigint NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    last_error_code text,
    created_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX plain_jobs_claimable_idx ON fairsched_lab.plain_jobs (queue_name, priority DESC, available_at, id)
    WHERE status = 'pending';

-- name: plain_fill
-- A backlog of no-op jobs for the plain loop.
INSERT INTO fairsched_lab.plain_jobs (queue_name, payload)
SELECT 'plain', '{}'::jsonb FROM generate_series(1, %(jobs)s)

-- name: plain_claim
-- The seed's claim, a batch at a time.
WITH candidate AS MATERIALIZED (
    SELECT id FROM fairsched_lab.plain_jobs
     WHERE queue_name = 'plain' AND status = 'pending' AND available_at <= now()
     ORDER BY priority DESC, available_at, id
     LIMIT %(batch)s
       FOR UPDATE SKIP LOCKED
)
UPDATE fairsched_lab.plain_jobs AS j
   SET status = 'running', attempt_count = j.attempt_count + 1, lease_owner = %(owner)s,
       lease_token = j.lease_token + 1, lease_expires_at = now() + interval '60 seconds'
  FROM candidate c
 WHERE j.id = c.id
RETURNING j.id, j.lease_token

-- name: plain_complete
-- The seed's fenced completion, a batch at a time.
UPDATE fairsched_lab.plain_jobs AS j
   SET status = 'succeeded', finished_at = now(), lease_owner = NULL, lease_expires_at = NULL
  FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS t(id, token)
 WHERE j.id = t.id AND j.status = 'running' AND j.lease_owner = %(owner)s
   AND j.lease_token = t.token AND j.lease_expires_at > now()

-- name: plain_succeeded
-- How many jobs the plain loop completed.
SELECT count(*) FROM fairsched_lab.plain_jobs WHERE status = 'succeeded'

-- name: commit_probe_install
-- The commit probe's one row (bench.commitprobe), in the lab's schema.
CREATE SCHEMA IF NOT EXISTS fairsched_lab;
CREATE TABLE IF NOT EXISTS fairsched_lab.probe_commits (id integer PRIMARY KEY, n bigint NOT NULL);
INSERT INTO fairsched_lab.probe_commits VALUES (1, 0) ON CONFLICT (id) DO NOTHING;

-- name: commit_probe
-- One durable write: its commit waits for the WAL flush like every other commit.
UPDATE fairsched_lab.probe_commits SET n = n + 1 WHERE id = 1
