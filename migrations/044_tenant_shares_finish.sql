-- Settling the shares of jobs that left running, as a function: completions call it
-- from their own statement (one round trip, no transaction around it), and failures,
-- releases and the recovery sweep from their transactions. It releases the running
-- slots the jobs' claims counted, in this backend's shard of `tenant_releases` (never
-- the share rows that claimers lock), and with charge = runtime corrects the charge by
-- measured run time (estimate: moving average) on the share row. Only jobs whose claim
-- counted them (`share_counted`, a weighted claim) touch the shares: their claim is
-- what charged the estimate.
CREATE FUNCTION fairsched.tenant_shares_finish(ids bigint[]) RETURNS void
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    WITH ended AS (
        SELECT j.queue_name, j.tenant, count(*) AS n,
               sum(greatest(extract(epoch FROM now() - j.started_at), 0.001)) AS seconds
          FROM fairsched.jobs AS j
         WHERE j.id = ANY (ids) AND j.share_counted
         GROUP BY j.queue_name, j.tenant
    ), released AS (
        INSERT INTO fairsched.tenant_releases AS r (queue_name, tenant, shard, released)
        SELECT e.queue_name, e.tenant, mod(pg_backend_pid(), 16), e.n
          FROM ended AS e
         ORDER BY e.queue_name, e.tenant
        ON CONFLICT (queue_name, tenant, shard) DO UPDATE SET released = r.released + excluded.released
    ), locked AS MATERIALIZED (
        SELECT t.queue_name, t.tenant
          FROM fairsched.tenant_shares AS t
          JOIN ended AS e USING (queue_name, tenant)
          JOIN fairsched.queues AS q ON q.name = t.queue_name AND q.charge = 'runtime'
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
