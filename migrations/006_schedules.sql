-- Periodic jobs: the schedules `config apply` writes, and where each one stands
-- (docs/schedules.md).
--
-- A schedule enqueues one job per tick of its cron expression. Any number of worker
-- processes run the schedule duty; a tick is enqueued exactly once because the
-- transaction that enqueues it locks the schedule's row (FOR UPDATE SKIP LOCKED) and
-- moves next_tick past it before committing, and the job carries an idempotency key
-- made of the schedule's name and the tick. next_tick is computed from the cron
-- expression in the schedule's time zone by the process that writes it (SQL has no cron);
-- the database's clock decides when it is due.


-- == Schedules ==========================================================================

CREATE TABLE fairsched.schedules (
    name            text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$'),
    cron            text NOT NULL CHECK (length(cron) BETWEEN 1 AND 200),
    timezone        text NOT NULL CHECK (length(timezone) BETWEEN 1 AND 64),
    -- A queue with schedules is not removed under them: prune the schedules first.
    queue_name      text NOT NULL REFERENCES fairsched.queues (name),
    tenant          text NOT NULL CHECK (length(tenant) BETWEEN 1 AND 128),
    payload         jsonb NOT NULL DEFAULT '{}',
    priority        integer NOT NULL DEFAULT 0,
    jitter_seconds  double precision NOT NULL DEFAULT 0
        CONSTRAINT schedules_jitter_in_range CHECK (jitter_seconds >= 0 AND jitter_seconds <= 3600),
    enabled         boolean NOT NULL DEFAULT true,
    -- The next tick to enqueue; NULL when the expression has no tick in the next 50 years.
    next_tick       timestamptz,
    -- The last tick enqueued, and its job (which retention may since have deleted).
    last_tick       timestamptz,
    last_job_id     bigint,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schedules_next_after_last CHECK (next_tick > last_tick)
);

-- The schedule duty's question, "which schedules are due", and how long it may sleep.
CREATE INDEX schedules_due_idx ON fairsched.schedules (next_tick) WHERE enabled;


-- == Roles ==============================================================================

-- Workers run the schedule duty: they read schedules and move their ticks on (and enqueue,
-- which their grants on the jobs table already allow). As in 001, grants wait for the
-- roles when they are missing; the admin role has every table of the schema already.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fairsched_worker') THEN
        RAISE WARNING 'fairsched roles are missing: no grant on fairsched.schedules made; '
                      'create them and run the roles block of migrations/006_schedules.sql';
        RETURN;
    END IF;
    GRANT SELECT, UPDATE (next_tick, last_tick, last_job_id, updated_at)
       ON fairsched.schedules TO fairsched_worker;
END
$$;
