-- name: jobs_listen
-- Subscribe this connection to enqueue wake-ups (the payload is the queue name).
LISTEN fairsched_jobs

-- name: worker_seen
-- Register this worker process, or renew its row: its queues and slots, and the jobs it
-- claimed of each since it started (010_workers.sql).
SELECT fairsched.worker_seen(%(owner)s, %(queues)s::jsonb, %(claimed)s::jsonb)

-- name: worker_gone
-- This worker process stops: its row goes.
SELECT fairsched.worker_gone(%(owner)s)

-- name: workers_by_queue
-- Per queue: the worker processes that reported within %(within)s seconds, their slots,
-- and their claims per second (the registry holds a row per live worker: a few rows).
SELECT q.name AS queue_name, count(*) AS workers, sum(q.slots::int) AS slots,
       coalesce(sum((w.rates ->> q.name)::float8), 0) AS claims_per_second
  FROM fairsched.workers AS w
 CROSS JOIN LATERAL jsonb_each_text(w.queues) AS q(name, slots)
 WHERE w.seen_at >= now() - make_interval(secs => %(within)s)
 GROUP BY q.name
