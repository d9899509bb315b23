-- name: jobs_listen
-- Subscribe this connection to enqueue wake-ups (the payload is the queue name).
LISTEN fairsched_jobs
