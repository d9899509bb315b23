-- name: soak_unfinished
-- Jobs of a queue that are not finished yet (waiting, pending or running).
SELECT count(*)
  FROM fairsched.jobs
 WHERE queue_name = %(queue)s AND status IN ('waiting', 'pending', 'running')

-- name: soak_now
-- The database's clock: the moment a soak run starts.
SELECT now()
