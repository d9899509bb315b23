-- name: bench_window
-- Jobs succeeded, and the window from the first claim to the last completion.
SELECT count(*) FILTER (WHERE j.status = 'succeeded'),
       extract(epoch FROM max(j.finished_at) - min(a.claimed_at))
  FROM fairsched.jobs j
  LEFT JOIN fairsched.attempts a ON a.job_id = j.id AND a.attempt = 1
 WHERE j.queue_name = %(queue)s

-- name: bench_unfinished
-- How many jobs of a queue are not finished yet, counting at most %(cap)s of each
-- state: each branch reads its state's partial index, so polling stays cheap while
-- the workers run (a count of finished rows would scan the table every poll).
SELECT count(*) FROM (
    (SELECT 1 FROM fairsched.jobs WHERE queue_name = %(queue)s AND status = 'pending' LIMIT %(cap)s)
    UNION ALL
    (SELECT 1 FROM fairsched.jobs WHERE queue_name = %(queue)s AND status = 'running' LIMIT %(cap)s)
    UNION ALL
    (SELECT 1 FROM fairsched.jobs WHERE queue_name = %(queue)s AND status = 'waiting' LIMIT %(cap)s)
) AS unfinished

-- name: bench_running
-- Whether a job of a queue is running (one probe of the running jobs' index).
SELECT EXISTS (SELECT 1 FROM fairsched.jobs WHERE queue_name = %(queue)s AND status = 'running')

-- name: bench_backends
-- The other backends connected to this database (the bench reads their CPU time).
SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()

-- name: bench_waits
-- Enqueue-to-first-claim wait of every job claimed, per tenant, with its claim time.
SELECT j.tenant, extract(epoch FROM a.claimed_at - j.created_at) AS wait,
       extract(epoch FROM a.claimed_at) AS claimed
  FROM fairsched.jobs j
  JOIN fairsched.attempts a ON a.job_id = j.id AND a.attempt = 1
 WHERE j.queue_name = %(queue)s

-- name: bench_first_claims
-- The tenants of the first claims of a queue, in claim order.
SELECT j.tenant
  FROM fairsched.attempts a
  JOIN fairsched.jobs j ON j.id = a.job_id
 WHERE j.queue_name = %(queue)s AND a.attempt = 1
 ORDER BY a.claimed_at, a.job_id
 LIMIT %(limit)s

-- name: bench_claimed_except
-- How many jobs of a queue, other than one tenant's, have left pending.
SELECT count(*) FROM fairsched.jobs
 WHERE queue_name = %(queue)s AND tenant <> %(tenant)s AND status <> 'pending'

-- name: bench_clock
-- The server's clock, in epoch seconds (the jobs' timestamps are on it).
SELECT extract(epoch FROM clock_timestamp())
