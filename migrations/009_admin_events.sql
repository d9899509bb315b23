-- The audit trail of changes outside a job: who set a tenant's weight or cap, and to what.
-- (A job's own changes, replays, discards and cancellations, are in job_events.)
--
-- One row per change, written in the change's own statement: by whom ('cli', 'api',
-- 'web:<user>' or what the caller passed), what (the action), where (queue, tenant), and
-- the values after it (detail). Rows are few (people make these changes) and kept.

CREATE TABLE fairsched.admin_events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    by          text NOT NULL CHECK (length(by) BETWEEN 1 AND 128),
    action      text NOT NULL CHECK (length(action) BETWEEN 1 AND 64),
    queue_name  text,
    tenant      text,
    detail      jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX admin_events_queue_idx ON fairsched.admin_events (queue_name, at);

-- Admins write it (their default privileges from 001 cover new tables); workers read it.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fairsched_worker') THEN
        RAISE WARNING 'fairsched roles are missing: no grant on fairsched.admin_events made; '
                      'create them and run the roles block of migrations/009_admin_events.sql';
        RETURN;
    END IF;
    GRANT SELECT ON fairsched.admin_events TO fairsched_worker;
END
$$;
