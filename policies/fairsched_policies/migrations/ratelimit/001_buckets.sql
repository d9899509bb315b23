-- ratelimit: a token bucket per (queue, tenant), in database time.
--
-- A limit is `jobs` per `period_seconds` (1, 60, 3600 or 86400): a bucket holds at most
-- `jobs` tokens and refills at jobs / period_seconds per second; a claim takes one token
-- per job it leases. Time is the database clock when the bucket is charged, under its
-- lock (clock_timestamp(), not the transaction's start), so charges follow each other in
-- time as they do in lock order. The row of tenant '' is the queue's default for tenants without a
-- limit of their own; a tenant's row with `jobs` NULL follows that default and only
-- keeps the tenant's tokens. `tokens` NULL means a full bucket (never charged).

CREATE TABLE fairsched.ratelimits (
    queue_name     text NOT NULL REFERENCES fairsched.queues (name) ON DELETE CASCADE ON UPDATE CASCADE,
    tenant         text NOT NULL,
    jobs           integer CONSTRAINT ratelimits_jobs_range CHECK (jobs BETWEEN 1 AND 1000000),
    period_seconds double precision
                   CONSTRAINT ratelimits_period_unit CHECK (period_seconds IN (1, 60, 3600, 86400)),
    tokens         double precision,
    refilled_at    timestamptz,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, tenant),
    CONSTRAINT ratelimits_limit_whole CHECK ((jobs IS NULL) = (period_seconds IS NULL)),
    CONSTRAINT ratelimits_default_has_limit CHECK (tenant <> '' OR jobs IS NOT NULL)
);

-- How many jobs a tenant may start now: NULL when neither the tenant nor its queue has
-- a limit. Reads without locking (what operators and metrics see), on the clock.
CREATE FUNCTION fairsched.ratelimit_level(p_queue text, p_tenant text) RETURNS double precision
LANGUAGE sql VOLATILE
AS $$
    SELECT least(lim.jobs, coalesce(t.tokens + lim.jobs / lim.period
                                     * extract(epoch FROM clock_timestamp() - t.refilled_at), lim.jobs))
      FROM (SELECT) AS one
      LEFT JOIN fairsched.ratelimits AS t ON t.queue_name = p_queue AND t.tenant = p_tenant
      LEFT JOIN fairsched.ratelimits AS d ON d.queue_name = p_queue AND d.tenant = ''
     CROSS JOIN LATERAL (
        SELECT CASE WHEN t.jobs IS NOT NULL THEN t.jobs ELSE d.jobs END::double precision AS jobs,
               CASE WHEN t.jobs IS NOT NULL THEN t.period_seconds ELSE d.period_seconds END AS period
     ) AS lim
$$;

-- The claim's budget of a tenant: its level, with its bucket locked for the claim's
-- admission (ratelimit_admit). A bucket another claim holds is skipped, not waited for:
-- 0, so the claim takes other tenants' jobs instead of losing room to a tenant it could
-- not charge. A tenant under the queue's default without a row yet gets a full bucket
-- (its row is created at admission).
CREATE FUNCTION fairsched.ratelimit_budget(p_queue text, p_tenant text) RETURNS double precision
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM FROM fairsched.ratelimits AS t
      WHERE t.queue_name = p_queue AND t.tenant = p_tenant
        FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND AND EXISTS (SELECT FROM fairsched.ratelimits AS t
                              WHERE t.queue_name = p_queue AND t.tenant = p_tenant) THEN
        RETURN 0;
    END IF;
    RETURN fairsched.ratelimit_level(p_queue, p_tenant);
END
$$;

-- A claim's admission: `wanted[i]` candidates of `tenants[i]` (tenants in ascending
-- order). Locks the limited tenants' buckets in that order (creating the rows of
-- tenants under the queue's default), takes a token per admitted job and returns how
-- many jobs of each limited tenant the claim may lease. A bucket another claim is
-- charging is skipped, not waited for: its tenant gets nothing from this claim (its
-- jobs stay for the next), so concurrent claims never queue behind each other here.
-- Unlimited tenants are not returned: they are admitted whole.
CREATE FUNCTION fairsched.ratelimit_admit(p_queue text, p_tenants text[], p_wanted integer[])
RETURNS TABLE (tenant text, admitted integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    has_default boolean := EXISTS (SELECT FROM fairsched.ratelimits AS d
                                    WHERE d.queue_name = p_queue AND d.tenant = '');
    locked text[];
    charged_at timestamptz;
BEGIN
    IF has_default THEN
        INSERT INTO fairsched.ratelimits (queue_name, tenant)
        SELECT p_queue, w.tenant FROM unnest(p_tenants) AS w(tenant) ORDER BY w.tenant
        ON CONFLICT (queue_name, tenant) DO NOTHING;
    END IF;
    SELECT coalesce(array_agg(l.tenant), '{}') INTO locked
      FROM (SELECT l.tenant FROM fairsched.ratelimits AS l
             WHERE l.queue_name = p_queue AND l.tenant = ANY (p_tenants)
             ORDER BY l.tenant
               FOR NO KEY UPDATE SKIP LOCKED) AS l;
    charged_at := clock_timestamp();
    RETURN QUERY
    UPDATE fairsched.ratelimits AS b
       SET tokens = c.level - c.take, refilled_at = charged_at, updated_at = charged_at
      FROM (SELECT l.tenant, lv.level, least(w.n, floor(lv.level))::integer AS take
              FROM fairsched.ratelimits AS l
              JOIN unnest(p_tenants, p_wanted) AS w(tenant, n) ON w.tenant = l.tenant
              LEFT JOIN fairsched.ratelimits AS d ON d.queue_name = p_queue AND d.tenant = ''
             CROSS JOIN LATERAL (
                SELECT CASE WHEN l.jobs IS NOT NULL THEN l.jobs ELSE d.jobs END::double precision AS jobs,
                       CASE WHEN l.jobs IS NOT NULL THEN l.period_seconds ELSE d.period_seconds END AS period
             ) AS lim
             CROSS JOIN LATERAL (
                SELECT least(lim.jobs, coalesce(l.tokens + lim.jobs / lim.period
                                                * extract(epoch FROM charged_at - l.refilled_at), lim.jobs))
                       AS level
             ) AS lv
             WHERE l.queue_name = p_queue AND l.tenant = ANY (locked) AND lim.jobs IS NOT NULL) AS c
     WHERE b.queue_name = p_queue AND b.tenant = c.tenant
    RETURNING b.tenant, c.take;
    RETURN QUERY
    SELECT l.tenant, 0
      FROM fairsched.ratelimits AS l
     WHERE l.queue_name = p_queue AND l.tenant = ANY (p_tenants) AND l.tenant <> ALL (locked)
       AND (l.jobs IS NOT NULL OR has_default);
END
$$;

REVOKE ALL ON FUNCTION fairsched.ratelimit_admit(text, text[], integer[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.ratelimit_budget(text, text) FROM PUBLIC;

DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'fairsched_worker') THEN
        GRANT SELECT ON fairsched.ratelimits TO fairsched_worker;
        GRANT EXECUTE ON FUNCTION fairsched.ratelimit_admit(text, text[], integer[]) TO fairsched_worker;
        GRANT EXECUTE ON FUNCTION fairsched.ratelimit_budget(text, text) TO fairsched_worker;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'fairsched_admin') THEN
        GRANT ALL ON fairsched.ratelimits TO fairsched_admin;
        GRANT EXECUTE ON FUNCTION fairsched.ratelimit_admit(text, text[], integer[]) TO fairsched_admin;
        GRANT EXECUTE ON FUNCTION fairsched.ratelimit_budget(text, text) TO fairsched_admin;
    END IF;
END
$$;
