-- Least-privilege roles (NOLOGIN: grant them to the login roles of each part).
--   fairsched_producer: enqueue only (insert jobs, read queues, keep fairness state at enqueue);
--   fairsched_worker:   claim, renew, complete, fail, release, recover (and LISTEN);
--   fairsched_admin:    everything in the schema (queues, policies, weights, dead jobs).
-- Roles are cluster-wide: created when missing, if the migrator may create roles;
-- grants are per database. A migrator that may not create roles, on a cluster
-- without them, gets a warning and no grants (a superuser then creates the roles and
-- replays the grants below). Tables added by later migrations grant their own.

DO $$
DECLARE
    may_create boolean := (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user);
    missing text[] := ARRAY[]::text[];
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['fairsched_producer', 'fairsched_worker', 'fairsched_admin'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            IF may_create THEN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            ELSE
                missing := missing || r;
            END IF;
        END IF;
    END LOOP;
    IF cardinality(missing) > 0 THEN
        RAISE WARNING 'fairsched roles % are missing and % may not create roles: no grants made; '
                      'have a superuser create them (CREATE ROLE name NOLOGIN) and grant them by hand '
                      'as in migrations/040_roles.sql', missing, current_user;
        RETURN;
    END IF;

    GRANT USAGE ON SCHEMA fairsched TO fairsched_producer, fairsched_worker, fairsched_admin;

    -- Producer: enqueue. It reads queues (settings, policies) and the identity of jobs
    -- (idempotency keys, aggregate order; never payloads or errors), and keeps the
    -- fairness state enqueue maintains: share rows (never their weight or cap) and
    -- serial aggregates.
    GRANT SELECT ON fairsched.queues TO fairsched_producer;
    GRANT INSERT ON fairsched.jobs TO fairsched_producer;
    GRANT SELECT (id, queue_name, tenant, status, priority, available_at, aggregate_key,
                  aggregate_seq, idempotency_key, serial, created_at)
       ON fairsched.jobs TO fairsched_producer;
    GRANT USAGE ON SEQUENCE fairsched.jobs_id_seq TO fairsched_producer;
    GRANT SELECT ON fairsched.tenant_shares TO fairsched_producer;
    GRANT INSERT (queue_name, tenant, active, ready_at, pass),
          UPDATE (active, ready_at, pass, updated_at)
       ON fairsched.tenant_shares TO fairsched_producer;
    GRANT SELECT ON fairsched.aggregates TO fairsched_producer;
    GRANT INSERT (queue_name, tenant, aggregate_key, next_seq), UPDATE (updated_at, gap_since)
       ON fairsched.aggregates TO fairsched_producer;
    -- Serial queues: enqueue promotes an aggregate's next job from waiting to pending.
    GRANT UPDATE (status) ON fairsched.jobs TO fairsched_producer;

    -- Worker: the lease lifecycle and recovery. No new jobs, no queue settings, no weights.
    GRANT SELECT ON fairsched.queues TO fairsched_worker;
    GRANT SELECT, UPDATE ON fairsched.jobs TO fairsched_worker;
    GRANT SELECT, INSERT ON fairsched.attempts TO fairsched_worker;
    GRANT SELECT, INSERT ON fairsched.job_events TO fairsched_worker;
    GRANT USAGE ON SEQUENCE fairsched.job_events_id_seq TO fairsched_worker;
    GRANT SELECT ON fairsched.tenant_shares TO fairsched_worker;
    GRANT INSERT (queue_name, tenant, active, ready_at, pass),
          UPDATE (pass, running, active, ready_at, claimed_total, charged_total, runtime_estimate,
                  updated_at)
       ON fairsched.tenant_shares TO fairsched_worker;
    GRANT SELECT ON fairsched.aggregates TO fairsched_worker;
    GRANT UPDATE (next_seq, blocked_job_id, gap_since, updated_at)
       ON fairsched.aggregates TO fairsched_worker;
    GRANT SELECT ON fairsched.schema_migrations TO fairsched_worker;

    -- Admin: everything in the schema, and tables added later by the same migrator.
    GRANT ALL ON ALL TABLES IN SCHEMA fairsched TO fairsched_admin;
    GRANT ALL ON ALL SEQUENCES IN SCHEMA fairsched TO fairsched_admin;
    ALTER DEFAULT PRIVILEGES IN SCHEMA fairsched GRANT ALL ON TABLES TO fairsched_admin;
    ALTER DEFAULT PRIVILEGES IN SCHEMA fairsched GRANT ALL ON SEQUENCES TO fairsched_admin;
END
$$;
