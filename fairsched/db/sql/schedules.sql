-- name: schedules_now
-- The database's clock: the time every schedule decision is made at.
SELECT now()

-- name: schedules_due
-- Names of enabled schedules whose next tick has come, earliest first (a bounded batch).
SELECT name
  FROM fairsched.schedules
 WHERE enabled AND next_tick <= now()
 ORDER BY next_tick
 LIMIT %(limit)s

-- name: schedule_due_lock
-- One due schedule, locked until the transaction ends; nothing when another process holds
-- it (it enqueues this tick) or already moved its tick on (008_roles.sql).
SELECT * FROM fairsched.schedule_due_lock(%(name)s)

-- name: schedule_tick_advance
-- Record the tick just enqueued and the next one, in the enqueuing transaction: the
-- function checks the job is the tick's (008_roles.sql).
SELECT fairsched.schedule_tick_advance(%(name)s, %(tick)s, %(job_id)s, %(next_tick)s)

-- name: schedules_wait
-- Seconds until the earliest next tick of an enabled schedule (NULL: none).
SELECT extract(epoch FROM min(next_tick) - now())::float8
  FROM fairsched.schedules
 WHERE enabled

-- name: schedules_list
-- Every schedule and where it stands, by name.
SELECT name, cron, timezone, queue_name, tenant, payload::text AS payload, priority, jitter_seconds,
       enabled, next_tick, last_tick, last_job_id
  FROM fairsched.schedules
 ORDER BY name

-- name: schedules_lock
-- Every schedule, locked until the transaction ends (config apply rewrites them).
SELECT name, cron, timezone, queue_name, tenant, payload::text AS payload, priority, jitter_seconds,
       enabled, next_tick, last_tick, last_job_id
  FROM fairsched.schedules
 ORDER BY name
   FOR UPDATE

-- name: schedule_get
-- One schedule by name.
SELECT name, cron, timezone, queue_name, tenant, payload::text AS payload, priority, jitter_seconds,
       enabled, next_tick, last_tick, last_job_id
  FROM fairsched.schedules
 WHERE name = %(name)s

-- name: schedule_upsert
-- Write one schedule from a config file; its tick state is what the caller computed.
INSERT INTO fairsched.schedules AS s
       (name, cron, timezone, queue_name, tenant, payload, priority, jitter_seconds, enabled, next_tick)
VALUES (%(name)s, %(cron)s, %(timezone)s, %(queue)s, %(tenant)s, %(payload)s::jsonb, %(priority)s,
        %(jitter)s, %(enabled)s, %(next_tick)s)
ON CONFLICT (name) DO UPDATE
   SET cron = EXCLUDED.cron, timezone = EXCLUDED.timezone, queue_name = EXCLUDED.queue_name,
       tenant = EXCLUDED.tenant, payload = EXCLUDED.payload, priority = EXCLUDED.priority,
       jitter_seconds = EXCLUDED.jitter_seconds, enabled = EXCLUDED.enabled,
       next_tick = EXCLUDED.next_tick, updated_at = now()

-- name: schedules_remove
-- Remove schedules (`config apply --prune`); the jobs they enqueued stay.
DELETE FROM fairsched.schedules WHERE name = ANY(%(names)s::text[])

-- name: schedules_queues_declared
-- Which of the named queues are declared.
SELECT name FROM fairsched.queues WHERE name = ANY(%(names)s::text[])
