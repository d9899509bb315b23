-- name: plain_install
-- The seed's job table and claim index, for the plain SKIP LOCKED reference loop.
CREATE SCHEMA IF NOT EXISTS bench_plain;
DROP TABLE IF EXISTS bench_plain.jobs;
CREATE TABLE bench_plain.jobs (
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
CREATE INDEX jobs_claimable_idx ON bench_plain.jobs (queue_name, priority DESC, available_at, id)
    WHERE status = 'pending';

-- name: plain_fill
-- A backlog of no-op jobs for the plain loop.
INSERT INTO bench_plain.jobs (queue_name, payload)
SELECT 'plain', '{}'::jsonb FROM generate_series(1, %(jobs)s)

-- name: plain_claim
-- The seed's claim, a batch at a time.
WITH candidate AS MATERIALIZED (
    SELECT id FROM bench_plain.jobs
     WHERE queue_name = 'plain' AND status = 'pending' AND available_at <= now()
     ORDER BY priority DESC, available_at, id
     LIMIT %(batch)s
       FOR UPDATE SKIP LOCKED
)
UPDATE bench_plain.jobs AS j
   SET status = 'running', attempt_count = j.attempt_count + 1, lease_owner = %(owner)s,
       lease_token = j.lease_token + 1, lease_expires_at = now() + interval '60 seconds'
  FROM candidate c
 WHERE j.id = c.id
RETURNING j.id, j.lease_token

-- name: plain_complete
-- The seed's fenced completion, a batch at a time.
UPDATE bench_plain.jobs AS j
   SET status = 'succeeded', finished_at = now(), lease_owner = NULL, lease_expires_at = NULL
  FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS t(id, token)
 WHERE j.id = t.id AND j.status = 'running' AND j.lease_owner = %(owner)s
   AND j.lease_token = t.token AND j.lease_expires_at > now()

-- name: commit_probe_install
-- The commit probe's one row (fairsched.commitprobe), in a schema of its own.
CREATE SCHEMA IF NOT EXISTS bench_probe;
CREATE TABLE IF NOT EXISTS bench_probe.commits (id integer PRIMARY KEY, n bigint NOT NULL);
INSERT INTO bench_probe.commits VALUES (1, 0) ON CONFLICT (id) DO NOTHING;

-- name: commit_probe
-- One durable write: its commit waits for the WAL flush like every other commit.
UPDATE bench_probe.commits SET n = n + 1 WHERE id = 1
