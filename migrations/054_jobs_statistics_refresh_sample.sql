-- The statistics refresh (048) analyzes on a small sample, and once per backlog.
--
-- It runs when the planner's estimate hides a backlog, usually right after a bulk
-- enqueue while the workers drain it, and what it must fix is the estimate of the
-- pending jobs: claims run on generic plans, which read the status's few common values
-- and the distinct counts, never a parameter's histogram. ANALYZE reads 300 rows per
-- point of default_statistics_target: 30,000 at the server's default of 100, 3,000 at
-- 10. Measured on the jobs table holding a backlog of no-op jobs: 20k jobs 44-57 ms
-- against 9-16 ms; 1M jobs 184-270 ms against 18-20 ms. Autovacuum's own ANALYZE keeps
-- the server's target and replaces these statistics at its next run.
--
-- Every worker's head keeper calls it when it starts, so workers started together all
-- find the same hidden backlog. Each used to analyze in turn when the one before had
-- finished within its 50 ms lock timeout; now each takes ANALYZE's lock first and looks
-- at the estimate again: one analyzes, the others find the backlog known and return.
CREATE OR REPLACE FUNCTION fairsched.jobs_statistics_refresh(min_pending integer) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET lock_timeout = '50ms'
    SET default_statistics_target = 10
AS $$
DECLARE
    estimate CONSTANT text := 'EXPLAIN (FORMAT JSON) SELECT FROM fairsched.jobs WHERE status = ''pending''';
    plan json;
    estimated float8;
    enough bigint;
BEGIN
    EXECUTE estimate INTO plan;
    estimated := (plan -> 0 -> 'Plan' ->> 'Plan Rows')::float8;
    IF estimated >= 10000 THEN
        RETURN false;  -- a backlog the claim's plan already reads in index order
    END IF;
    enough := greatest(min_pending, 10 * ceil(estimated)::bigint + 1);
    IF (SELECT count(*) FROM (SELECT FROM fairsched.jobs WHERE status = 'pending' LIMIT enough) AS p)
       < enough THEN
        RETURN false;
    END IF;
    -- ANALYZE's own lock, taken before ANALYZE: a refresh that analyzed meanwhile has
    -- committed its statistics, and the estimate below reads them.
    LOCK TABLE fairsched.jobs IN SHARE UPDATE EXCLUSIVE MODE;
    EXECUTE estimate INTO plan;
    IF 10 * (plan -> 0 -> 'Plan' ->> 'Plan Rows')::float8 >= enough THEN
        RETURN false;
    END IF;
    ANALYZE fairsched.jobs;
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END
$$;
