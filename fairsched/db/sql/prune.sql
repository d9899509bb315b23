-- name: prune_queues
-- Every declared queue's name, in order (the prune visits them one by one).
SELECT name FROM fairsched.queues ORDER BY name

-- name: jobs_prune
-- Remove one batch of one kind (finished, dead, history) past a queue's retention;
-- NULL when another prune holds the lock (see fairsched.jobs_prune in 002_retention.sql).
SELECT fairsched.jobs_prune(%(queue)s, %(kind)s, %(batch)s, false)

-- name: jobs_prune_count
-- How many rows of one kind are past a queue's retention now (the dry run).
SELECT fairsched.jobs_prune(%(queue)s, %(kind)s, 1, true)
