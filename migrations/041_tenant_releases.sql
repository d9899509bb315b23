-- Weighted fair share without finishers waiting on claimers: a tenant's running jobs
-- are the claims its share row counts (`running`, raised by each claim under the row's
-- lock) minus the releases of jobs that left `running`, counted here. A finisher adds
-- to the row of its own shard (its backend's pid), so it never waits for the share
-- rows that claimers hold. A claim reads releases from its statement's snapshot: it
-- may count a release late, never early, so a cap is never exceeded.
CREATE TABLE fairsched.tenant_releases (
    queue_name  text NOT NULL,
    tenant      text NOT NULL,
    shard       smallint NOT NULL,
    released    bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_name, tenant, shard)
) WITH (fillfactor = 50);

ALTER TABLE fairsched.tenant_releases SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);

-- The releases of a tenant's running slots so far: its running jobs are its share
-- row's `running` minus this. STABLE: it reads the calling statement's snapshot.
CREATE FUNCTION fairsched.tenant_released(queue_name text, tenant text) RETURNS bigint
    LANGUAGE sql STABLE
    RETURN (SELECT coalesce(sum(r.released), 0)::bigint FROM fairsched.tenant_releases AS r
             WHERE r.queue_name = tenant_released.queue_name AND r.tenant = tenant_released.tenant);

-- `running` now only grows with claims: it needs the range of a counter.
ALTER TABLE fairsched.tenant_shares ALTER COLUMN running TYPE bigint;

-- Whether the job's current claim counted it in its tenant's `running` (a weighted,
-- tenant-first claim does; a job-first claim does not), so that only counted jobs
-- are released. Running jobs of weighted queues were counted by the claims before.
ALTER TABLE fairsched.jobs ADD COLUMN share_counted boolean NOT NULL DEFAULT false;
UPDATE fairsched.jobs AS j
   SET share_counted = true
  FROM fairsched.queues AS q
 WHERE q.name = j.queue_name AND j.status = 'running' AND 'weighted' = ANY(q.policies);

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fairsched_worker') THEN
        GRANT SELECT, INSERT, UPDATE ON fairsched.tenant_releases TO fairsched_worker;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fairsched_producer') THEN
        GRANT SELECT ON fairsched.tenant_releases TO fairsched_producer;
    END IF;
END
$$;
