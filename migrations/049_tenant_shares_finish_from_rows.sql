-- Completions release running slots from the rows their own statement updated. The
-- one-argument `tenant_shares_finish(ids)` looked each job up again by id for its queue
-- and tenant (~200 of ~850 shared buffers of a completion of 50, composed stack); the
-- completion's UPDATE already returns them. The settling transactions (failures,
-- releases, the recovery sweep) keep calling it with ids, and it now reads the counted
-- jobs once and passes them on, so the release and the runtime correction live in one
-- function.
CREATE FUNCTION fairsched.tenant_shares_finish(ids bigint[], queues text[], tenants text[])
    RETURNS void
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- ids, queues and tenants: the counted jobs (`share_counted`) that left running, by
    -- position.
    INSERT INTO fairsched.tenant_releases AS r (queue_name, tenant, shard, released)
    SELECT f.queue_name, f.tenant, mod(pg_backend_pid(), 16), count(*)
      FROM unnest(queues, tenants) AS f(queue_name, tenant)
     GROUP BY f.queue_name, f.tenant
     ORDER BY f.queue_name, f.tenant
    ON CONFLICT (queue_name, tenant, shard) DO UPDATE SET released = r.released + excluded.released;

    IF NOT EXISTS (SELECT 1 FROM fairsched.queues AS q WHERE q.charge = 'runtime') THEN
        RETURN;
    END IF;
    WITH ended AS (
        SELECT j.queue_name, j.tenant, count(*) AS n,
               sum(greatest(extract(epoch FROM now() - j.started_at), 0.001)) AS seconds
          FROM fairsched.jobs AS j
          JOIN fairsched.queues AS q ON q.name = j.queue_name AND q.charge = 'runtime'
         WHERE j.id = ANY (ids) AND j.share_counted
         GROUP BY j.queue_name, j.tenant
    ), locked AS MATERIALIZED (
        SELECT t.queue_name, t.tenant
          FROM fairsched.tenant_shares AS t
          JOIN ended AS e USING (queue_name, tenant)
         ORDER BY t.tenant
           FOR NO KEY UPDATE OF t
    )
    UPDATE fairsched.tenant_shares AS t
       SET pass = t.pass + (e.seconds - e.n * t.runtime_estimate) / t.weight,
           charged_total = t.charged_total + e.seconds - e.n * t.runtime_estimate,
           runtime_estimate = 0.8 * t.runtime_estimate + 0.2 * e.seconds / e.n,
           updated_at = now()
      FROM ended AS e JOIN locked USING (queue_name, tenant)
     WHERE t.queue_name = e.queue_name AND t.tenant = e.tenant;
END
$$;

CREATE OR REPLACE FUNCTION fairsched.tenant_shares_finish(ids bigint[]) RETURNS void
    LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$
    SELECT fairsched.tenant_shares_finish(array_agg(j.id), array_agg(j.queue_name), array_agg(j.tenant))
      FROM fairsched.jobs AS j
     WHERE j.id = ANY (ids) AND j.share_counted
$$;
