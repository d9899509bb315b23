-- pause: the tenants paused per queue, and each tenant's finished jobs per queue.
--
-- A tenant listed in `paused` is not claimed on that queue while the queue's
-- policy_params do not say "pause_enabled": false. The claim probes `paused` by its
-- primary key for each candidate; `reason` is the policy's tenant setting `pause`, and
-- `level` tells the reports a paused tenant is held back (throttled). `finished` counts
-- the jobs that left `running` for good (succeeded, dead, discarded), by final status;
-- the policy's on_finish hook keeps it in the finishing transaction.

CREATE SCHEMA fairsched_pause;

CREATE TABLE fairsched_pause.paused (
    queue_name text NOT NULL REFERENCES fairsched.queues (name) ON DELETE CASCADE ON UPDATE CASCADE,
    tenant     text NOT NULL,
    reason     text NOT NULL DEFAULT 'paused',
    paused_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, tenant)
);

-- How many jobs the tenant may start now: 0 while it is paused (and pausing is on for
-- its queue), else NULL (no limit). One primary key lookup of each table.
CREATE FUNCTION fairsched_pause.level(p_queue text, p_tenant text) RETURNS double precision
LANGUAGE sql STABLE
AS $$
    SELECT 0::double precision
      FROM fairsched_pause.paused AS p
      JOIN fairsched.queues AS q ON q.name = p.queue_name
     WHERE p.queue_name = p_queue AND p.tenant = p_tenant
       AND coalesce(q.policy_params -> 'pause_enabled', 'true'::jsonb) <> 'false'::jsonb
$$;

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
