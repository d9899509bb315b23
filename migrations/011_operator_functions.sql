-- The operators' changes as functions: replay and discard of dead jobs, unblock and skip
-- of blocked aggregates, cancellation, and a tenant's weight and cap. Each is the statement
-- the engine ran before (fairsched/db/sql), now run as the schema owner, so that a role
-- may be given exactly these changes and no write on any table: fairsched_web, the role
-- of `fairsched web` with actions on. fairsched_reader reads everything and changes
-- nothing: the role of a read-only dashboard (docs/web.md, docs/security.md).


-- == The changes ========================================================================

-- Put a dead job back to pending with a fresh attempt budget, keeping its id and history.
CREATE FUNCTION fairsched.dead_replay(p_id bigint, p_by text)
    RETURNS SETOF bigint
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
WITH moved AS (
    UPDATE fairsched.jobs
       SET status = 'pending', attempt_count = 0, available_at = now(), finished_at = NULL
     WHERE id = $1 AND status = 'dead'
    RETURNING id
), event AS (
    INSERT INTO fairsched.job_events (job_id, kind, detail)
    SELECT id, 'replayed', jsonb_build_object('by', $2::text) FROM moved
)
SELECT id FROM moved
$$;

-- Resolve a dead job without running it again; it stays in the table as discarded.
CREATE FUNCTION fairsched.dead_discard(p_id bigint, p_by text)
    RETURNS SETOF bigint
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
WITH moved AS (
    UPDATE fairsched.jobs
       SET status = 'discarded'
     WHERE id = $1 AND status = 'dead'
    RETURNING id
), event AS (
    INSERT INTO fairsched.job_events (job_id, kind, detail)
    SELECT id, 'discarded', jsonb_build_object('by', $2::text) FROM moved
)
SELECT id FROM moved
$$;

-- Run an aggregate's dead head again (same id, fresh attempts); the aggregate resumes.
CREATE FUNCTION fairsched.aggregate_unblock(p_queue text, p_tenant text, p_key text, p_by text)
    RETURNS TABLE (id bigint, available_at timestamptz)
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
WITH old AS (
    SELECT a.blocked_job_id AS job_id
      FROM fairsched.aggregates a
     WHERE a.queue_name = $1 AND a.tenant = $2 AND a.aggregate_key = $3
       AND a.blocked_job_id IS NOT NULL
       FOR UPDATE
), agg AS (
    UPDATE fairsched.aggregates AS a
       SET blocked_job_id = NULL, updated_at = now()
      FROM old
     WHERE a.queue_name = $1 AND a.tenant = $2 AND a.aggregate_key = $3
    RETURNING old.job_id AS blocked_job_id
), moved AS (
    UPDATE fairsched.jobs AS j
       SET status = 'pending', attempt_count = 0, available_at = now(), finished_at = NULL
      FROM agg
     WHERE j.id = agg.blocked_job_id AND j.status = 'dead'
    RETURNING j.id, j.available_at
), event AS (
    INSERT INTO fairsched.job_events (job_id, kind, detail)
    SELECT id, 'replayed', jsonb_build_object('by', $4::text, 'via', 'aggregate_unblock')
      FROM moved
)
SELECT id, available_at FROM moved
$$;

-- Discard an aggregate's dead head and let the aggregate move past it.
CREATE FUNCTION fairsched.aggregate_skip(p_queue text, p_tenant text, p_key text, p_by text)
    RETURNS SETOF bigint
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
WITH old AS (
    SELECT a.blocked_job_id AS job_id
      FROM fairsched.aggregates a
     WHERE a.queue_name = $1 AND a.tenant = $2 AND a.aggregate_key = $3
       AND a.blocked_job_id IS NOT NULL
       FOR UPDATE
), agg AS (
    UPDATE fairsched.aggregates AS a
       SET blocked_job_id = NULL, updated_at = now(),
           next_seq = greatest(a.next_seq, coalesce(
               (SELECT j.aggregate_seq + 1 FROM fairsched.jobs j WHERE j.id = old.job_id),
               a.next_seq))
      FROM old
     WHERE a.queue_name = $1 AND a.tenant = $2 AND a.aggregate_key = $3
    RETURNING old.job_id AS blocked_job_id
), moved AS (
    UPDATE fairsched.jobs AS j
       SET status = 'discarded'
      FROM agg
     WHERE j.id = agg.blocked_job_id AND j.status = 'dead'
    RETURNING j.id
), event AS (
    INSERT INTO fairsched.job_events (job_id, kind, detail)
    SELECT id, 'discarded', jsonb_build_object('by', $4::text, 'via', 'aggregate_skip')
      FROM moved
)
SELECT id FROM moved
$$;

-- Cancel jobs by id (locked in id order): pending and waiting ones at once, running
-- ones by a request their worker sees at its next heartbeat (a second request of the
-- same job changes nothing). Returns each job found with what became of it (cancelled,
-- requested, or finished: it had already finished), its status before, and its queue.
CREATE FUNCTION fairsched.jobs_cancel(p_ids bigint[], p_by text)
    RETURNS TABLE (id bigint, outcome text, status text, queue_name text)
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
WITH target AS MATERIALIZED (
    SELECT j.id, j.queue_name, j.status, j.cancel_requested_at
      FROM fairsched.jobs AS j
     WHERE j.id = ANY (ARRAY(SELECT unnest($1::bigint[])))
     ORDER BY j.id
       FOR UPDATE
), cancelled AS (
    UPDATE fairsched.jobs AS j
       SET status = 'cancelled', finished_at = now(), cancel_requested_at = now()
      FROM target AS t
     WHERE j.id = t.id AND t.status IN ('pending', 'waiting')
    RETURNING j.id
), requested AS (
    UPDATE fairsched.jobs AS j
       SET cancel_requested_at = now()
      FROM target AS t
     WHERE j.id = t.id AND t.status = 'running' AND t.cancel_requested_at IS NULL
    RETURNING j.id
), events AS (
    INSERT INTO fairsched.job_events (job_id, kind, detail)
    SELECT id, 'cancelled', jsonb_build_object('by', $2::text) FROM cancelled
    UNION ALL
    SELECT id, 'cancel_requested', jsonb_build_object('by', $2::text) FROM requested
)
SELECT t.id, CASE WHEN t.status IN ('pending', 'waiting') THEN 'cancelled'
                  WHEN t.status = 'running' THEN 'requested'
                  ELSE 'finished' END,
       t.status, t.queue_name
  FROM target AS t
$$;

-- Set a tenant's weight and/or cap on a queue (NULL keeps the current value; cap 0 clears it),
-- and record who did it, with the values after, in the admin audit trail.
CREATE FUNCTION fairsched.tenant_share_set(p_queue text, p_tenant text, p_weight double precision, p_cap integer, p_by text)
    RETURNS TABLE (weight double precision, cap integer)
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
WITH changed AS (
    INSERT INTO fairsched.tenant_shares AS t (queue_name, tenant, weight, cap, active, ready_at)
    VALUES ($1, $2, coalesce($3::float8, 1), nullif($4::int, 0), false,
            'infinity')
    ON CONFLICT (queue_name, tenant) DO UPDATE
       SET weight = coalesce($3::float8, t.weight),
           cap = CASE WHEN $4::int IS NULL THEN t.cap ELSE nullif($4::int, 0) END,
           updated_at = now()
    RETURNING weight, cap
), audit AS (
    INSERT INTO fairsched.admin_events (by, action, queue_name, tenant, detail)
    SELECT $5, 'tenant_share', $1, $2,
           jsonb_build_object('weight', c.weight, 'cap', c.cap)
      FROM changed AS c
)
SELECT weight, cap FROM changed
$$;

REVOKE ALL ON FUNCTION
        fairsched.dead_replay(bigint, text),
        fairsched.dead_discard(bigint, text),
        fairsched.aggregate_unblock(text, text, text, text),
        fairsched.aggregate_skip(text, text, text, text),
        fairsched.jobs_cancel(bigint[], text),
        fairsched.tenant_share_set(text, text, double precision, integer, text)
   FROM PUBLIC;


-- == Roles ==============================================================================

-- Created here when the migrator may create roles (as 001 does for the others); grants
-- wait for them otherwise.
DO $$
DECLARE
    may_create boolean := (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user);
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['fairsched_reader', 'fairsched_web'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) AND may_create THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
    IF (SELECT count(*) FROM pg_roles
         WHERE rolname IN ('fairsched_reader', 'fairsched_web', 'fairsched_worker', 'fairsched_admin')) < 4 THEN
        RAISE WARNING 'fairsched roles are missing: no grants of 011 made; create them '
                      '(CREATE ROLE fairsched_reader NOLOGIN; CREATE ROLE fairsched_web NOLOGIN) and run '
                      'the roles block of migrations/011_operator_functions.sql';
        RETURN;
    END IF;
    GRANT USAGE ON SCHEMA fairsched TO fairsched_reader;
    GRANT SELECT ON ALL TABLES IN SCHEMA fairsched TO fairsched_reader;
    ALTER DEFAULT PRIVILEGES IN SCHEMA fairsched GRANT SELECT ON TABLES TO fairsched_reader;
    GRANT fairsched_reader TO fairsched_web;
    GRANT EXECUTE ON FUNCTION
        fairsched.dead_replay(bigint, text),
        fairsched.dead_discard(bigint, text),
        fairsched.aggregate_unblock(text, text, text, text),
        fairsched.aggregate_skip(text, text, text, text),
        fairsched.jobs_cancel(bigint[], text),
        fairsched.tenant_share_set(text, text, double precision, integer, text)
      TO fairsched_web, fairsched_admin;
    -- What these changes settle after them (a replayed or cancelled head's aggregate, the
    -- tenants that get pending work): functions that read the jobs' rows, as for workers.
    GRANT EXECUTE ON FUNCTION
        fairsched.tenant_shares_settle(bigint[]),
        fairsched.aggregates_finish(bigint[]),
        fairsched.aggregates_advance(text[], text[], text[]),
        fairsched.tenant_shares_activate(text, text[], timestamptz[])
      TO fairsched_web;
END
$$;
