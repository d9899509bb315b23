-- pause: the tenants paused per queue, and each tenant's finished jobs per queue.
--
-- A tenant listed in `paused` is not claimed on that queue while the queue's
-- policy_params do not say "pause_enabled": false. The claim probes `paused` by its
-- primary key for each candidate. `finished` counts the jobs that left `running` for
-- good (succeeded, dead, discarded), by final status; the policy's on_finish hook keeps
-- it in the finishing transaction.

CREATE SCHEMA fairsched_pause;

CREATE TABLE fairsched_pause.paused (
    queue_name text NOT NULL REFERENCES fairsched.queues (name) ON DELETE CASCADE ON UPDATE CASCADE,
    tenant     text NOT NULL,
    paused_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, tenant)
);

CREATE TABLE fairsched_pause.finished (
    queue_name       text NOT NULL REFERENCES fairsched.queues (name) ON DELETE CASCADE ON UPDATE CASCADE,
    tenant           text NOT NULL,
    status           text NOT NULL,
    jobs             bigint NOT NULL,
    last_finished_at timestamptz NOT NULL,
    PRIMARY KEY (queue_name, tenant, status)
);

DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'fairsched_worker') THEN
        GRANT USAGE ON SCHEMA fairsched_pause TO fairsched_worker;
        GRANT SELECT ON fairsched_pause.paused TO fairsched_worker;
        GRANT SELECT, INSERT, UPDATE ON fairsched_pause.finished TO fairsched_worker;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'fairsched_admin') THEN
        GRANT USAGE ON SCHEMA fairsched_pause TO fairsched_admin;
        GRANT ALL ON ALL TABLES IN SCHEMA fairsched_pause TO fairsched_admin;
    END IF;
END
$$;
