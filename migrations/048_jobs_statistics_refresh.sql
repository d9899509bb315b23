-- Planner statistics that do not hide a backlog. A claim runs on its generic plan, and
-- with no statistics on the jobs table (never analyzed) the planner guesses from the
-- table's size; at some sizes it takes the pending jobs of a queue for about one row,
-- and the job-first claim then reads every pending job of its queue through another
-- index and sorts them, on each claim, until autovacuum's next ANALYZE (up to
-- autovacuum_naptime away, server-wide). Measured: fifo claims of 50 on a 40k backlog,
-- 20 ms instead of 1. The check below compares the estimate with the jobs there are,
-- so it also catches statistics older than the backlog.
--
-- Each worker's head keeper calls this now and then. It costs one small plan when the
-- planner already expects a backlog; otherwise it counts pending jobs (up to ten times
-- the planner's estimate, at least `min_pending`) and analyzes the table when there are
-- that many. SECURITY DEFINER: only the table's owner may ANALYZE it. An ANALYZE or
-- VACUUM already running keeps the lock: this one gives up after 50 ms and returns
-- false (the next call looks again).
CREATE FUNCTION fairsched.jobs_statistics_refresh(min_pending integer) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET lock_timeout = '50ms'
AS $$
DECLARE
    plan json;
    estimated float8;
    enough bigint;
BEGIN
    EXECUTE 'EXPLAIN (FORMAT JSON) SELECT FROM fairsched.jobs WHERE status = ''pending''' INTO plan;
    estimated := (plan -> 0 -> 'Plan' ->> 'Plan Rows')::float8;
    IF estimated >= 10000 THEN
        RETURN false;  -- a backlog the claim's plan already reads in index order
    END IF;
    enough := greatest(min_pending, 10 * ceil(estimated)::bigint + 1);
    IF (SELECT count(*) FROM (SELECT FROM fairsched.jobs WHERE status = 'pending' LIMIT enough) AS p)
       < enough THEN
        RETURN false;
    END IF;
    ANALYZE fairsched.jobs;
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END
$$;

REVOKE ALL ON FUNCTION fairsched.jobs_statistics_refresh(integer) FROM PUBLIC;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fairsched_worker') THEN
        GRANT EXECUTE ON FUNCTION fairsched.jobs_statistics_refresh(integer) TO fairsched_worker;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fairsched_admin') THEN
        GRANT EXECUTE ON FUNCTION fairsched.jobs_statistics_refresh(integer) TO fairsched_admin;
    END IF;
END
$$;
