-- weighted: its state, adopted from the engine's migrations that created it (001_baseline,
-- 004_bounds, 008_roles, 011_operator_functions), as it stands after them. From here on it
-- is the policy's: a change to any of it is a new file of this folder (002_...), never an
-- engine migration.
--
-- On a database the engine's migrations built, nothing here changes anything but the
-- comments that name the owner: tables and functions are declared as they are, and
-- granted again what they hold. Columns, indexes and triggers on tables in use are created
-- only when missing: ADD COLUMN IF NOT EXISTS, CREATE INDEX IF NOT EXISTS and CREATE OR
-- REPLACE TRIGGER lock their table before they look, waiting behind every transaction
-- that uses it and holding up all that come after.


-- == Queue settings ===================================================================

-- charge: what a claimed job costs its tenant, 1 (`count`) or its measured run time
-- (`runtime`). tenant_cap: the running jobs each tenant may have (NULL: no cap), unless
-- its share row sets its own.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'fairsched.queues'::regclass
                                             AND attname = 'charge' AND NOT attisdropped) THEN
        ALTER TABLE fairsched.queues ADD COLUMN charge text NOT NULL DEFAULT 'count'
            CONSTRAINT queues_charge_check CHECK (charge IN ('count', 'runtime'));
    END IF;
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'fairsched.queues'::regclass
                                             AND attname = 'tenant_cap' AND NOT attisdropped) THEN
        ALTER TABLE fairsched.queues ADD COLUMN tenant_cap integer
            CONSTRAINT queues_tenant_cap_range CHECK (tenant_cap BETWEEN 1 AND 1000000);
    END IF;
END
$$;


-- == Shares ===========================================================================

-- Weighted fair share (stride scheduling): one row per (queue, tenant).
--   weight, cap        set by the admin (cap NULL: the queue's tenant_cap);
--   pass               the tenant's virtual time, raised by each claim by cost / weight;
--   running            the jobs the tenant's claims counted, ever; its running jobs are
--                      this minus its releases (tenant_released below);
--   active, ready_at   active: it may have pending jobs, and only active rows are in the
--                      selection index; inactive: when its next delayed job comes due;
--   runtime_estimate   seconds per job (moving average), when the queue charges by run time;
--   claimed_total, charged_total   jobs claimed and cost charged, for the observed share.
-- Rows are updated by every claim: half-empty pages and eager vacuuming keep the updates
-- on their page.
CREATE TABLE IF NOT EXISTS fairsched.tenant_shares (
    queue_name        text NOT NULL,
    tenant            text NOT NULL CONSTRAINT tenant_shares_tenant_check CHECK (length(tenant) BETWEEN 1 AND 128),
    weight            double precision NOT NULL DEFAULT 1
                      CONSTRAINT tenant_shares_weight_range CHECK (weight >= 0.001 AND weight <= 1000000),
    cap               integer CONSTRAINT tenant_shares_cap_range CHECK (cap BETWEEN 1 AND 1000000),
    pass              double precision NOT NULL DEFAULT 0,
    running           bigint NOT NULL DEFAULT 0,
    active            boolean NOT NULL DEFAULT false,
    ready_at          timestamptz NOT NULL DEFAULT now(),
    runtime_estimate  double precision NOT NULL DEFAULT 1
                      CONSTRAINT tenant_shares_runtime_estimate_check CHECK (runtime_estimate > 0),
    claimed_total     bigint NOT NULL DEFAULT 0,
    charged_total     double precision NOT NULL DEFAULT 0,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, tenant)
) WITH (
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);

DO $$
BEGIN
    -- The weighted selection: a queue's active tenants, lowest pass first; ties go to the
    -- tenant claimed least so far, then by name.
    IF to_regclass('fairsched.tenant_shares_pass_idx') IS NULL THEN
        CREATE INDEX tenant_shares_pass_idx
            ON fairsched.tenant_shares (queue_name, pass, claimed_total, tenant)
            WHERE active;
    END IF;
    -- Inactive tenants whose delayed work comes due: the sweeper wakes them.
    IF to_regclass('fairsched.tenant_shares_wake_idx') IS NULL THEN
        CREATE INDEX tenant_shares_wake_idx
            ON fairsched.tenant_shares (ready_at)
            WHERE NOT active;
    END IF;
    -- Queues with capped tenants: a weighted claim on such a queue charges the share rows
    -- before it moves the jobs (and checks each cap on the latest row version); without
    -- caps it moves the jobs first and charges last.
    IF to_regclass('fairsched.tenant_shares_capped_idx') IS NULL THEN
        CREATE INDEX tenant_shares_capped_idx
            ON fairsched.tenant_shares (queue_name)
            WHERE cap IS NOT NULL;
    END IF;
END
$$;

-- Running slots released by jobs that left running, counted apart from the share rows
-- so that finishers never wait for the share rows claimers lock: a finisher adds to the
-- row of its own shard (its backend's pid mod 16).
CREATE TABLE IF NOT EXISTS fairsched.tenant_releases (
    queue_name  text NOT NULL,
    tenant      text NOT NULL,
    shard       smallint NOT NULL,
    released    bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_name, tenant, shard)
) WITH (
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);

-- One row per queue: at or below every active tenant's pass, for the weighted selection's
-- index (tenant_shares_pass_idx). Lowered by every tenant that becomes active or whose
-- pass goes down (pass_floors_lower, below), raised only by a refresh
-- (pass_floors_refresh); docs/claim-design.md gives the argument. A table of its own:
-- tenants are activated while the job heads may be locked.
CREATE TABLE IF NOT EXISTS fairsched.pass_floors (
    queue_name    text PRIMARY KEY,
    pass          double precision NOT NULL DEFAULT '-Infinity',
    refreshed_at  timestamptz
) WITH (fillfactor = 50);


-- == Functions ========================================================================
--
-- Those the roles call run as the schema owner (SECURITY DEFINER, search_path pinned), so
-- that no role needs a write on the tables; tenant_shares_finish runs only inside them and
-- the engine's completion. Callers: the policy (fairsched_policies/weighted.py) at enqueue,
-- in the claim and after transitions; `fairsched tenant weight` and `cap`, config apply and
-- the dashboard (tenant_share_set).

-- A tenant's releases so far: its running jobs are its share row's `running` minus
-- this. STABLE, so it reads the calling statement's snapshot: a claim may count a
-- release late, never early, and a cap is never exceeded.
CREATE OR REPLACE FUNCTION fairsched.tenant_released(queue_name text, tenant text) RETURNS bigint
    LANGUAGE sql STABLE
    RETURN (SELECT coalesce(sum(r.released), 0)::bigint FROM fairsched.tenant_releases AS r
             WHERE r.queue_name = tenant_released.queue_name AND r.tenant = tenant_released.tenant);

-- A queue's virtual time: the lowest active pass; when no tenant is active, the highest
-- pass reached, so that tenants returning to an idle queue start level (no credit is
-- banked while idle). STABLE: it reads the calling statement's snapshot. Read by
-- activation and by the sweeper's wake.
CREATE OR REPLACE FUNCTION fairsched.tenant_shares_floor(queue text) RETURNS double precision
    LANGUAGE sql STABLE
    RETURN coalesce((SELECT a.pass FROM fairsched.tenant_shares AS a
                      WHERE a.queue_name = tenant_shares_floor.queue AND a.active
                      ORDER BY a.pass LIMIT 1),
                    (SELECT max(a.pass) FROM fairsched.tenant_shares AS a
                      WHERE a.queue_name = tenant_shares_floor.queue), 0);

-- Tenants that got pending jobs (due at `dues`) join the weighted selection. A weighted
-- enqueue calls it inside its insert statement, so jobs and activation commit together;
-- it only ever raises a pass, and a tenant activated with nothing pending leaves again at
-- the next dry sweep.
-- Each statement takes its own snapshot (a VOLATILE function's statements do):
--   1. missing share rows are created inactive, at the queue's virtual time;
--   2. every share row is KEY SHARE locked until the caller's transaction commits, so a
--      concurrent deactivation (FOR UPDATE SKIP LOCKED) skips it; a row a deactivation
--      held is locked once that one committed, and read after it;
--   3. tenants with work due now join at the queue's lowest active pass; work due later
--      is remembered in ready_at for the sweeper.
CREATE OR REPLACE FUNCTION fairsched.tenant_shares_activate(queue text, tenants text[], dues timestamptz[])
    RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    floor_pass double precision;
BEGIN
    floor_pass := fairsched.tenant_shares_floor(queue);
    INSERT INTO fairsched.tenant_shares AS s (queue_name, tenant, active, ready_at, pass)
    SELECT queue, i.tenant, false, 'infinity', floor_pass
      FROM (SELECT DISTINCT t.tenant FROM unnest(tenants) AS t(tenant)) AS i
     ORDER BY i.tenant
    ON CONFLICT (queue_name, tenant) DO NOTHING;

    PERFORM
       FROM fairsched.tenant_shares AS s
      WHERE s.queue_name = queue AND s.tenant = ANY (tenants)
      ORDER BY s.tenant
        FOR KEY SHARE;

    floor_pass := fairsched.tenant_shares_floor(queue);  -- read after the locks

    UPDATE fairsched.tenant_shares AS t
       SET active = i.due <= now(),
           ready_at = CASE WHEN i.due <= now() THEN t.ready_at ELSE least(t.ready_at, i.due) END,
           pass = CASE WHEN i.due <= now() THEN greatest(t.pass, floor_pass) ELSE t.pass END,
           updated_at = now()
      FROM (SELECT u.tenant, min(u.due) AS due
              FROM unnest(tenants, dues) AS u(tenant, due)
             GROUP BY u.tenant) AS i
     WHERE t.queue_name = queue AND t.tenant = i.tenant AND NOT t.active;
END
$$;

-- Settles the shares of jobs that left running. It releases the running slots their
-- claims counted, in this backend's shard of tenant_releases (never the share rows
-- claimers lock), and on queues that charge by run time corrects the charge by the
-- measured run time (share row locked in tenant order, as claims lock them). A
-- completion passes the counted jobs' queues and tenants from the rows its UPDATE
-- returns, in the same statement; failures, releases and the recovery sweep call the
-- one-argument form below with job ids.
CREATE OR REPLACE FUNCTION fairsched.tenant_shares_finish(ids bigint[], queues text[], tenants text[])
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

-- The same, for jobs given by id: it reads the counted ones among them once.
CREATE OR REPLACE FUNCTION fairsched.tenant_shares_finish(ids bigint[]) RETURNS void
    LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$
    SELECT fairsched.tenant_shares_finish(array_agg(j.id), array_agg(j.queue_name), array_agg(j.tenant))
      FROM fairsched.jobs AS j
     WHERE j.id = ANY (ids) AND j.share_counted
$$;

-- The trigger of a tenant that became active, or whose pass went down (below): it lowers
-- its queue's pass floor. (Claims only raise passes: a rising pass never goes below a
-- floor.)
CREATE OR REPLACE FUNCTION fairsched.pass_floors_lower() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM fairsched.pass_floors AS f WHERE f.queue_name = NEW.queue_name FOR KEY SHARE;
    UPDATE fairsched.pass_floors AS f
       SET pass = NEW.pass
     WHERE f.queue_name = NEW.queue_name AND f.pass > NEW.pass;
    RETURN NULL;
END
$$;

-- Release the running slots of counted jobs (share_counted) that have left running and
-- are not succeeded (a completion settles its own in its statement), then mark them
-- settled: a second call with the same ids releases nothing (Weighted.settle).
CREATE OR REPLACE FUNCTION fairsched.tenant_shares_settle(p_ids bigint[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    settled bigint[];
BEGIN
    SELECT array_agg(j.id ORDER BY j.id) INTO settled
      FROM fairsched.jobs AS j
     WHERE j.id = ANY (p_ids) AND j.share_counted
       AND j.status NOT IN ('running', 'succeeded');
    IF settled IS NULL THEN
        RETURN;
    END IF;
    PERFORM fairsched.tenant_shares_finish(settled);
    UPDATE fairsched.jobs AS j SET share_counted = false
     WHERE j.id = ANY (settled) AND j.share_counted AND j.status NOT IN ('running', 'succeeded');
END
$$;

-- Sweeper: inactive tenants whose delayed work came due rejoin at the lowest active
-- pass (Weighted.sweep).
CREATE OR REPLACE FUNCTION fairsched.tenant_shares_wake(p_batch integer)
    RETURNS TABLE (queue_name text, tenant text, active boolean)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF p_batch IS NULL OR p_batch NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'wake batch must be between 1 and 10000, got %', p_batch
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    WITH due AS MATERIALIZED (
        SELECT t.queue_name, t.tenant
          FROM fairsched.tenant_shares t
         WHERE NOT t.active AND t.ready_at <= now()
         ORDER BY t.ready_at
         LIMIT p_batch
           FOR UPDATE SKIP LOCKED
    )
    UPDATE fairsched.tenant_shares AS t
       SET active = EXISTS (SELECT 1 FROM fairsched.jobs j
                             WHERE j.queue_name = t.queue_name AND j.tenant = t.tenant
                               AND j.status = 'pending'),
           ready_at = 'infinity',
           pass = greatest(t.pass, fairsched.tenant_shares_floor(t.queue_name)),
           updated_at = now()
      FROM due d
     WHERE t.queue_name = d.queue_name AND t.tenant = d.tenant
    RETURNING t.queue_name, t.tenant, t.active;
END
$$;

-- Raise a queue's pass floor to its lowest active pass, skipping (false) while a tenant
-- is being activated (queries.sql, pass_floors_lock and pass_floors_refresh).
CREATE OR REPLACE FUNCTION fairsched.pass_floors_refresh(p_queue text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM fairsched.pass_floors AS f WHERE f.queue_name = p_queue FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE fairsched.pass_floors AS f
       SET pass = coalesce((SELECT t.pass FROM fairsched.tenant_shares AS t
                             WHERE t.queue_name = f.queue_name AND t.active AND t.pass >= f.pass
                             ORDER BY t.pass LIMIT 1), f.pass),
           refreshed_at = now()
     WHERE f.queue_name = p_queue;
    RETURN true;
END
$$;

-- Set a tenant's weight and/or cap on a queue (NULL keeps the current value; cap 0 clears
-- it), and record who did it, with the values after, in the admin audit trail.
CREATE OR REPLACE FUNCTION fairsched.tenant_share_set(p_queue text, p_tenant text, p_weight double precision, p_cap integer, p_by text)
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

-- A tenant that became active, or whose pass went down, lowers its queue's pass floor.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = 'fairsched.tenant_shares'::regclass
                                           AND tgname = 'tenant_shares_inserted_lower_floor') THEN
        CREATE TRIGGER tenant_shares_inserted_lower_floor
            AFTER INSERT ON fairsched.tenant_shares
            FOR EACH ROW WHEN (NEW.active) EXECUTE FUNCTION fairsched.pass_floors_lower();
    END IF;
    IF NOT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = 'fairsched.tenant_shares'::regclass
                                           AND tgname = 'tenant_shares_updated_lower_floor') THEN
        CREATE TRIGGER tenant_shares_updated_lower_floor
            AFTER UPDATE OF active, pass ON fairsched.tenant_shares
            FOR EACH ROW WHEN (NEW.active AND (NOT OLD.active OR NEW.pass < OLD.pass))
            EXECUTE FUNCTION fairsched.pass_floors_lower();
    END IF;
END
$$;

-- tenant_released and tenant_shares_floor read only: anyone may call them.
REVOKE ALL ON FUNCTION
        fairsched.tenant_shares_activate(text, text[], timestamptz[]),
        fairsched.tenant_shares_finish(bigint[], text[], text[]),
        fairsched.tenant_shares_finish(bigint[]),
        fairsched.pass_floors_lower(),
        fairsched.tenant_shares_settle(bigint[]),
        fairsched.tenant_shares_wake(integer),
        fairsched.pass_floors_refresh(text),
        fairsched.tenant_share_set(text, text, double precision, integer, text)
   FROM PUBLIC;


-- == Privileges =======================================================================
--
-- Granted to each role that exists (001_baseline.sql creates them, or tells how).
-- Producers activate tenants at enqueue; workers settle shares after a transition, wake
-- tenants and refresh pass floors; the web role sets weights and caps, and settles what
-- its changes leave; the reader reads. tenant_shares_finish runs only inside the owner's
-- functions.

DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'fairsched_producer') THEN
        GRANT SELECT ON fairsched.tenant_shares, fairsched.tenant_releases, fairsched.pass_floors
          TO fairsched_producer;
        GRANT EXECUTE ON FUNCTION fairsched.tenant_shares_activate(text, text[], timestamptz[])
          TO fairsched_producer;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'fairsched_worker') THEN
        GRANT SELECT ON fairsched.tenant_shares, fairsched.tenant_releases, fairsched.pass_floors
          TO fairsched_worker;
        GRANT EXECUTE ON FUNCTION
            fairsched.tenant_shares_activate(text, text[], timestamptz[]),
            fairsched.tenant_shares_settle(bigint[]),
            fairsched.tenant_shares_wake(integer),
            fairsched.pass_floors_refresh(text)
          TO fairsched_worker;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'fairsched_web') THEN
        GRANT EXECUTE ON FUNCTION
            fairsched.tenant_shares_activate(text, text[], timestamptz[]),
            fairsched.tenant_shares_settle(bigint[]),
            fairsched.tenant_share_set(text, text, double precision, integer, text)
          TO fairsched_web;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'fairsched_reader') THEN
        GRANT SELECT ON fairsched.tenant_shares, fairsched.tenant_releases, fairsched.pass_floors
          TO fairsched_reader;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'fairsched_admin') THEN
        GRANT ALL ON fairsched.tenant_shares, fairsched.tenant_releases, fairsched.pass_floors
          TO fairsched_admin;
        GRANT EXECUTE ON FUNCTION
            fairsched.tenant_shares_activate(text, text[], timestamptz[]),
            fairsched.tenant_shares_settle(bigint[]),
            fairsched.tenant_shares_wake(integer),
            fairsched.pass_floors_refresh(text),
            fairsched.tenant_share_set(text, text, double precision, integer, text)
          TO fairsched_admin;
    END IF;
END
$$;


-- == The owner, named =================================================================

COMMENT ON COLUMN fairsched.queues.charge IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)';
COMMENT ON COLUMN fairsched.queues.tenant_cap IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)';
COMMENT ON TABLE fairsched.tenant_shares IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)';
COMMENT ON TABLE fairsched.tenant_releases IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)';
COMMENT ON TABLE fairsched.pass_floors IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)';
COMMENT ON FUNCTION fairsched.tenant_released(text, text)
    IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)';
COMMENT ON FUNCTION fairsched.tenant_shares_floor(text)
    IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)';
COMMENT ON FUNCTION fairsched.tenant_shares_activate(text, text[], timestamptz[])
    IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)';
COMMENT ON FUNCTION fairsched.tenant_shares_finish(bigint[], text[], text[])
    IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)';
COMMENT ON FUNCTION fairsched.tenant_shares_finish(bigint[])
    IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)';
COMMENT ON FUNCTION fairsched.pass_floors_lower()
    IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)';
COMMENT ON FUNCTION fairsched.tenant_shares_settle(bigint[])
    IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)';
COMMENT ON FUNCTION fairsched.tenant_shares_wake(integer)
    IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)';
COMMENT ON FUNCTION fairsched.pass_floors_refresh(text)
    IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)';
COMMENT ON FUNCTION fairsched.tenant_share_set(text, text, double precision, integer, text)
    IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)';
