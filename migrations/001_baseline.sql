-- The fairsched schema as of release 0.1.0.
--
-- Every object lives in schema `fairsched`. The migration runner creates the schema and
-- its own bookkeeping table, `fairsched.schema_migrations`, before it applies this file.
-- Later changes go in new files (NNN_what_it_does.sql); this one never changes again.
--
-- Sections: queues; jobs; the attempt record; fairness state (weighted shares and their
-- releases, serial aggregates); claim heads and pass floors; planner statistics; roles
-- and privileges.


-- == Queues ===========================================================================

-- One row per queue: its lease and retry settings and its policy stack, written by
-- `fairsched config apply` and `fairsched policy set`, read by claims and workers.
CREATE TABLE fairsched.queues (
    name                    text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$'),
    lease_seconds           double precision NOT NULL DEFAULT 30 CHECK (lease_seconds > 0),
    max_runtime_seconds     double precision NOT NULL DEFAULT 3600 CHECK (max_runtime_seconds > 0),
    max_attempts            integer NOT NULL DEFAULT 8 CHECK (max_attempts > 0),
    unknown_max_attempts    integer NOT NULL DEFAULT 3 CHECK (unknown_max_attempts > 0),
    backoff_base_seconds    double precision NOT NULL DEFAULT 1 CHECK (backoff_base_seconds >= 0),
    backoff_max_seconds     double precision NOT NULL DEFAULT 300 CHECK (backoff_max_seconds >= 0),
    notify                  boolean NOT NULL DEFAULT true,  -- pg_notify workers at enqueue
    updated_at              timestamptz NOT NULL DEFAULT now(),
    -- The policy stack, in order (fifo, weighted, aging, serial or a plug-in's name),
    -- and the parameters of the built-in policies.
    policies                text[] NOT NULL DEFAULT '{fifo}' CHECK (cardinality(policies) BETWEEN 1 AND 8),
    aging_interval_seconds  double precision NOT NULL DEFAULT 60 CHECK (aging_interval_seconds > 0),
    charge                  text NOT NULL DEFAULT 'count' CHECK (charge IN ('count', 'runtime')),
    tenant_cap              integer CHECK (tenant_cap > 0),  -- running jobs per tenant; NULL: none
    serial_gap              text NOT NULL DEFAULT 'strict' CHECK (serial_gap IN ('strict', 'lowest')),
    serial_poison           text NOT NULL DEFAULT 'block' CHECK (serial_poison IN ('block', 'skip')),
    policy_params           jsonb NOT NULL DEFAULT '{}'  -- plug-in policies' parameters
);


-- == Jobs =============================================================================

-- One row per job, from enqueue to its end (succeeded, dead or discarded). Status is
-- text with a CHECK, not an enum, so that a later migration can add a state:
--   waiting    a serial job queued behind its aggregate's head (in no claim index);
--   pending    claimable from available_at on;
--   running    leased: lease_owner and lease_token fence every transition, until
--              lease_expires_at (database time);
--   succeeded  its row records its last attempt and never changes again (see the
--              trigger jobs_succeeded_unchanged);
--   dead       attempts exhausted or a permanent failure; kept until replayed or
--              discarded;
--   discarded  resolved without running.
-- fillfactor 80: room on each page for the row versions the transitions write.
CREATE TABLE fairsched.jobs (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_name        text NOT NULL,
    tenant            text NOT NULL CHECK (length(tenant) BETWEEN 1 AND 128),
    payload           jsonb NOT NULL,
    status            text NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('waiting', 'pending', 'running', 'succeeded', 'dead', 'discarded')),
    priority          integer NOT NULL DEFAULT 0,  -- higher first
    available_at      timestamptz NOT NULL DEFAULT now(),
    attempt_count     integer NOT NULL DEFAULT 0,
    max_attempts      integer NOT NULL CHECK (max_attempts > 0),
    lease_owner       text,
    lease_token       bigint NOT NULL DEFAULT 0,  -- raised by every claim
    lease_expires_at  timestamptz,
    started_at        timestamptz,  -- when the current (or last) attempt was claimed
    progress          jsonb,        -- the handler's last reported progress
    last_error_code   text,
    last_error        text,
    -- Serial order: the jobs of one aggregate run one at a time, in aggregate_seq order.
    aggregate_key     text CHECK (length(aggregate_key) BETWEEN 1 AND 256),
    aggregate_seq     bigint,
    idempotency_key   text CHECK (length(idempotency_key) BETWEEN 1 AND 256),
    created_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    -- Aging order: enqueue time in epoch seconds minus priority × the queue's aging interval.
    aging_key         double precision NOT NULL DEFAULT extract(epoch FROM now()),
    -- Enqueued on a queue whose stack holds serial.
    serial            boolean NOT NULL DEFAULT false,
    -- The current claim counted the job in its tenant's tenant_shares.running (a weighted,
    -- tenant-first claim does), so the job's finish releases it (tenant_releases).
    share_counted     boolean NOT NULL DEFAULT false,
    CHECK ((aggregate_key IS NULL) = (aggregate_seq IS NULL)),
    -- The fifo order's index key is -priority: it must exist for every priority.
    CONSTRAINT jobs_priority_range_check CHECK (priority > -2147483648)
) WITH (
    fillfactor = 80,
    -- Claims and completions churn the rows: vacuum early and often, so the dead index
    -- entries claims leave behind are cleaned before they pile up.
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- The planner's estimate of a tenant's pending jobs is the pending jobs divided by the
-- tenant column's distinct values. ANALYZE may sample a backlog that one tenant fills
-- and count one tenant; the queue-wide index then looks as cheap as the tenant's own for
-- a tenant's scan, and each tenant-first claim walks the flood's backlog. Fixed at 100:
-- any count of two or more keeps the tenant's own index the cheaper one.
ALTER TABLE fairsched.jobs ALTER COLUMN tenant SET (n_distinct = 100);

-- Claim indexes. Each holds the pending jobs only, in one job order whose key ascends
-- (fifo's priority DESC is the ascending -priority), so that a claim head can position
-- the scan with a row comparison (see claim_heads below).
-- fifo, job-first: also carries priority, so the exporter's level scans stay index-only.
CREATE INDEX jobs_claimable_idx
    ON fairsched.jobs (queue_name, (- priority), available_at, id) INCLUDE (priority)
    WHERE status = 'pending';
-- aging, job-first.
CREATE INDEX jobs_aging_idx
    ON fairsched.jobs (queue_name, aging_key, id)
    WHERE status = 'pending';
-- fifo and aging within one tenant: the tenant-first (weighted) claim's scans.
CREATE INDEX jobs_tenant_fifo_idx
    ON fairsched.jobs (queue_name, tenant, (- priority), available_at, id)
    WHERE status = 'pending';
CREATE INDEX jobs_tenant_aging_idx
    ON fairsched.jobs (queue_name, tenant, aging_key, id)
    WHERE status = 'pending';

-- Running jobs by lease expiry: the recovery sweep, and the running jobs per tenant.
CREATE INDEX jobs_expired_lease_idx
    ON fairsched.jobs (lease_expires_at)
    WHERE status = 'running';

-- Dead jobs per queue: `fairsched dead list` and the exporter's dead counts.
CREATE INDEX jobs_dead_idx
    ON fairsched.jobs (queue_name, finished_at)
    WHERE status = 'dead';

-- An idempotency key names one job per queue and tenant.
CREATE UNIQUE INDEX jobs_idempotency_key_idx
    ON fairsched.jobs (queue_name, tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Serial aggregates. The mutex: at most one pending or running job per aggregate.
CREATE UNIQUE INDEX jobs_aggregate_head_idx
    ON fairsched.jobs (queue_name, tenant, aggregate_key)
    WHERE serial AND status IN ('pending', 'running');
-- One job per sequence number.
CREATE UNIQUE INDEX jobs_aggregate_seq_idx
    ON fairsched.jobs (queue_name, tenant, aggregate_key, aggregate_seq)
    WHERE serial;
-- The waiting jobs of an aggregate, in order: the next one to promote.
CREATE INDEX jobs_aggregate_waiting_idx
    ON fairsched.jobs (queue_name, tenant, aggregate_key, aggregate_seq)
    WHERE status = 'waiting';


-- == The attempt record ===============================================================

-- One row per attempt that did not succeed: failed, retrying, dead, expired (recovered
-- by the sweep) or released. A succeeded attempt is recorded by its job's own row.
CREATE TABLE fairsched.attempt_log (
    job_id       bigint NOT NULL,
    attempt      integer NOT NULL,
    lease_token  bigint NOT NULL,
    lease_owner  text NOT NULL,
    claimed_at   timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL DEFAULT now(),
    outcome      text NOT NULL,
    error_code   text,
    error        text,
    PRIMARY KEY (job_id, lease_token),
    CONSTRAINT attempts_outcome_check
        CHECK (outcome IN ('succeeded', 'failed', 'retrying', 'dead', 'expired', 'released'))
);

-- Every attempt of every job: the logged ones and the succeeded jobs' last attempts.
CREATE VIEW fairsched.attempts AS
SELECT a.job_id, a.attempt, a.lease_token, a.lease_owner, a.claimed_at, a.finished_at,
       a.outcome, a.error_code, a.error
  FROM fairsched.attempt_log AS a
UNION ALL
SELECT j.id, j.attempt_count, j.lease_token, j.lease_owner, j.started_at, j.finished_at,
       'succeeded'::text, NULL::text, NULL::text
  FROM fairsched.jobs AS j
 WHERE j.status = 'succeeded';

-- Events outside an attempt: replays, discards, rejected stale completions.
CREATE TABLE fairsched.job_events (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id   bigint NOT NULL,
    at       timestamptz NOT NULL DEFAULT now(),
    kind     text NOT NULL,
    detail   jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX job_events_job_idx ON fairsched.job_events (job_id, at);

-- The audit trail is append-only: no role and no statement rewrites the record a
-- succeeded job's row holds. The trigger's WHEN clause does the check; the function
-- only runs to refuse, and its error undoes the whole statement. An AFTER trigger, so
-- that PostgreSQL does not lock each updated row before the check (a BEFORE ROW
-- trigger with a WHEN clause would).
CREATE FUNCTION fairsched.jobs_succeeded_unchanged() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'job % succeeded: its row records its last attempt and does not change', OLD.id
        USING ERRCODE = 'object_not_in_prerequisite_state';
END
$$;

CREATE TRIGGER jobs_succeeded_unchanged
    AFTER UPDATE ON fairsched.jobs
    FOR EACH ROW
    WHEN (OLD.status = 'succeeded'
          AND (NEW.status, NEW.attempt_count, NEW.lease_token, NEW.lease_owner, NEW.started_at,
               NEW.finished_at)
              IS DISTINCT FROM
              (OLD.status, OLD.attempt_count, OLD.lease_token, OLD.lease_owner, OLD.started_at,
               OLD.finished_at))
    EXECUTE FUNCTION fairsched.jobs_succeeded_unchanged();


-- == Fairness state: weighted shares ==================================================

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
CREATE TABLE fairsched.tenant_shares (
    queue_name        text NOT NULL,
    tenant            text NOT NULL CHECK (length(tenant) BETWEEN 1 AND 128),
    weight            double precision NOT NULL DEFAULT 1 CHECK (weight > 0 AND weight <= 1000000),
    cap               integer CHECK (cap > 0),
    pass              double precision NOT NULL DEFAULT 0,
    running           bigint NOT NULL DEFAULT 0,
    active            boolean NOT NULL DEFAULT false,
    ready_at          timestamptz NOT NULL DEFAULT now(),
    runtime_estimate  double precision NOT NULL DEFAULT 1 CHECK (runtime_estimate > 0),
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

-- The weighted selection: a queue's active tenants, lowest pass first; ties go to the
-- tenant claimed least so far, then by name.
CREATE INDEX tenant_shares_pass_idx
    ON fairsched.tenant_shares (queue_name, pass, claimed_total, tenant)
    WHERE active;
-- Inactive tenants whose delayed work comes due: the sweeper wakes them.
CREATE INDEX tenant_shares_wake_idx
    ON fairsched.tenant_shares (ready_at)
    WHERE NOT active;
-- Queues with capped tenants: a weighted claim on such a queue charges the share rows
-- before it moves the jobs (and checks each cap on the latest row version); without
-- caps it moves the jobs first and charges last.
CREATE INDEX tenant_shares_capped_idx
    ON fairsched.tenant_shares (queue_name)
    WHERE cap IS NOT NULL;

-- Running slots released by jobs that left running, counted apart from the share rows
-- so that finishers never wait for the share rows claimers lock: a finisher adds to the
-- row of its own shard (its backend's pid mod 16).
CREATE TABLE fairsched.tenant_releases (
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

-- A tenant's releases so far: its running jobs are its share row's `running` minus
-- this. STABLE, so it reads the calling statement's snapshot: a claim may count a
-- release late, never early, and a cap is never exceeded.
CREATE FUNCTION fairsched.tenant_released(queue_name text, tenant text) RETURNS bigint
    LANGUAGE sql STABLE
    RETURN (SELECT coalesce(sum(r.released), 0)::bigint FROM fairsched.tenant_releases AS r
             WHERE r.queue_name = tenant_released.queue_name AND r.tenant = tenant_released.tenant);

-- A queue's virtual time: the lowest active pass; when no tenant is active, the highest
-- pass reached, so that tenants returning to an idle queue start level (no credit is
-- banked while idle). STABLE: it reads the calling statement's snapshot. Read by
-- activation and by the sweeper's wake.
CREATE FUNCTION fairsched.tenant_shares_floor(queue text) RETURNS double precision
    LANGUAGE sql STABLE
    RETURN coalesce((SELECT a.pass FROM fairsched.tenant_shares AS a
                      WHERE a.queue_name = tenant_shares_floor.queue AND a.active
                      ORDER BY a.pass LIMIT 1),
                    (SELECT max(a.pass) FROM fairsched.tenant_shares AS a
                      WHERE a.queue_name = tenant_shares_floor.queue), 0);

-- Tenants that got pending jobs (due at `dues`) join the weighted selection. A weighted
-- enqueue calls it inside its insert statement, so jobs and activation commit together.
-- Each statement takes its own snapshot (a VOLATILE function's statements do):
--   1. missing share rows are created inactive, at the queue's virtual time;
--   2. every share row is KEY SHARE locked until the caller's transaction commits, so a
--      concurrent deactivation (FOR UPDATE SKIP LOCKED) skips it; a row a deactivation
--      held is locked once that one committed, and read after it;
--   3. tenants with work due now join at the queue's lowest active pass; work due later
--      is remembered in ready_at for the sweeper.
CREATE FUNCTION fairsched.tenant_shares_activate(queue text, tenants text[], dues timestamptz[])
    RETURNS void
    LANGUAGE plpgsql VOLATILE
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

-- The same, for jobs given by id: it reads the counted ones among them once.
CREATE FUNCTION fairsched.tenant_shares_finish(ids bigint[]) RETURNS void
    LANGUAGE sql SET search_path = pg_catalog, pg_temp
AS $$
    SELECT fairsched.tenant_shares_finish(array_agg(j.id), array_agg(j.queue_name), array_agg(j.tenant))
      FROM fairsched.jobs AS j
     WHERE j.id = ANY (ids) AND j.share_counted
$$;


-- == Fairness state: serial aggregates ================================================

-- One row per serial aggregate: the next sequence number allowed to run (lower ones are
-- refused at enqueue), the dead job that blocks the aggregate (poison mode block), and
-- since when it waits on a missing number (gap mode strict).
CREATE TABLE fairsched.aggregates (
    queue_name      text NOT NULL,
    tenant          text NOT NULL,
    aggregate_key   text NOT NULL,
    next_seq        bigint NOT NULL,
    blocked_job_id  bigint,
    gap_since       timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, tenant, aggregate_key)
);

-- Blocked aggregates (`fairsched aggregate list`) and gap waits, per queue.
CREATE INDEX aggregates_blocked_idx
    ON fairsched.aggregates (queue_name) WHERE blocked_job_id IS NOT NULL;
CREATE INDEX aggregates_gap_idx
    ON fairsched.aggregates (queue_name, gap_since) WHERE gap_since IS NOT NULL;


-- == Claim heads and pass floors ======================================================

-- Where a claim's index scan may start. Every claim moves rows out of the claim indexes'
-- predicate, leaving dead entries at the low end of the index it scans until VACUUM
-- removes them. A head is a key at or below every pending job's key in a job order;
-- claims add `key >= head` to their index condition and start past the dead entries.
-- (docs/claim-design.md gives the whole argument.)
--
-- Invariant: no pending job has a key below its queue's heads, and no active tenant has
-- a pass below its queue's pass floor.
--   Lowered: every transition into pending, and every tenant that becomes active or
--   whose pass goes down, lowers them in its own transaction (the triggers below),
--   after a KEY SHARE lock on the row.
--   Raised: only by a refresh, which locks the row FOR UPDATE (conflicting with those
--   KEY SHARE locks) and then reads the lowest pending key on a snapshot taken after
--   the lock. A transaction that locked first has committed by then and its jobs are
--   seen; one that locks later waits for the refresh and lowers what it raised.

-- One row per queue: the lowest key a pending job may have in each built-in job order
-- (fifo: -priority, available_at, id; aging: aging_key, id). The defaults are below
-- every key: a head not yet refreshed bounds nothing.
CREATE TABLE fairsched.claim_heads (
    queue_name         text PRIMARY KEY,
    fifo_rank          integer NOT NULL DEFAULT -2147483647,
    fifo_available_at  timestamptz NOT NULL DEFAULT '-infinity',
    fifo_id            bigint NOT NULL DEFAULT 0,
    aging_key          double precision NOT NULL DEFAULT '-Infinity',
    aging_id           bigint NOT NULL DEFAULT 0,
    refreshed_at       timestamptz
) WITH (fillfactor = 50);

-- One row per queue: at or below every active tenant's pass, for the weighted selection's
-- index (tenant_shares_pass_idx). A table of its own: tenants are activated while the
-- job heads may be locked.
CREATE TABLE fairsched.pass_floors (
    queue_name    text PRIMARY KEY,
    pass          double precision NOT NULL DEFAULT '-Infinity',
    refreshed_at  timestamptz
) WITH (fillfactor = 50);

-- Jobs that became pending in a statement lower their queues' heads, once per statement.
-- SECURITY DEFINER: producers and workers need no rights on the heads to lower them.
CREATE FUNCTION fairsched.claim_heads_lower() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM changed AS c WHERE c.status = 'pending') THEN
        RETURN NULL;
    END IF;
    -- Lock first: each statement below then reads the heads as a refresh left them.
    PERFORM 1 FROM fairsched.claim_heads AS h
      WHERE h.queue_name IN (SELECT c.queue_name FROM changed AS c WHERE c.status = 'pending')
      ORDER BY h.queue_name
        FOR KEY SHARE;
    UPDATE fairsched.claim_heads AS h
       SET fifo_rank = l.rank, fifo_available_at = l.available_at, fifo_id = l.id
      FROM (SELECT DISTINCT ON (c.queue_name) c.queue_name, - c.priority AS rank, c.available_at, c.id
              FROM changed AS c
             WHERE c.status = 'pending'
             ORDER BY c.queue_name, - c.priority, c.available_at, c.id) AS l
     WHERE h.queue_name = l.queue_name
       AND (l.rank, l.available_at, l.id) < (h.fifo_rank, h.fifo_available_at, h.fifo_id);
    UPDATE fairsched.claim_heads AS h
       SET aging_key = l.aging_key, aging_id = l.id
      FROM (SELECT DISTINCT ON (c.queue_name) c.queue_name, c.aging_key, c.id
              FROM changed AS c
             WHERE c.status = 'pending'
             ORDER BY c.queue_name, c.aging_key, c.id) AS l
     WHERE h.queue_name = l.queue_name
       AND (l.aging_key, l.id) < (h.aging_key, h.aging_id);
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION fairsched.claim_heads_lower() FROM PUBLIC;

CREATE TRIGGER jobs_inserted_lower_heads
    AFTER INSERT ON fairsched.jobs REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION fairsched.claim_heads_lower();
CREATE TRIGGER jobs_updated_lower_heads
    AFTER UPDATE ON fairsched.jobs REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION fairsched.claim_heads_lower();

-- A tenant that became active, or whose pass went down, lowers its queue's pass floor.
-- (Claims only raise passes: a rising pass never goes below a floor.)
CREATE FUNCTION fairsched.pass_floors_lower() RETURNS trigger
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
REVOKE ALL ON FUNCTION fairsched.pass_floors_lower() FROM PUBLIC;

CREATE TRIGGER tenant_shares_inserted_lower_floor
    AFTER INSERT ON fairsched.tenant_shares
    FOR EACH ROW WHEN (NEW.active) EXECUTE FUNCTION fairsched.pass_floors_lower();
CREATE TRIGGER tenant_shares_updated_lower_floor
    AFTER UPDATE OF active, pass ON fairsched.tenant_shares
    FOR EACH ROW WHEN (NEW.active AND (NOT OLD.active OR NEW.pass < OLD.pass))
    EXECUTE FUNCTION fairsched.pass_floors_lower();


-- == Planner statistics ===============================================================

-- ANALYZEs the jobs table when its statistics hide a backlog; returns whether it ran.
-- Claims run on generic plans, and on a table never analyzed (or analyzed before the
-- backlog) the planner may take a queue's pending jobs for about one row and sort them
-- on every claim. Each worker's head keeper calls this when it starts and now and then.
-- It costs one small plan when the planner already expects a backlog; otherwise it
-- counts pending jobs (up to ten times the planner's estimate, at least min_pending)
-- and analyzes when there are that many. It samples at statistics target 10: generic
-- plans read the common values and distinct counts, not histograms; autovacuum's next
-- ANALYZE replaces these statistics. It takes ANALYZE's lock before looking again, so
-- of workers that find the same backlog at once only one analyzes. A VACUUM or ANALYZE
-- holding the table makes it give up after 50 ms and return false.
-- SECURITY DEFINER: only the table's owner may ANALYZE it.
CREATE FUNCTION fairsched.jobs_statistics_refresh(min_pending integer) RETURNS boolean
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
REVOKE ALL ON FUNCTION fairsched.jobs_statistics_refresh(integer) FROM PUBLIC;


-- == Roles and privileges =============================================================
--
-- Three NOLOGIN roles; grant them to the login roles of each part of a deployment
-- (docs/security.md lists what each may do):
--   fairsched_producer  enqueue only;
--   fairsched_worker    claim, heartbeat, complete, fail, release, recover (and LISTEN);
--   fairsched_admin     everything in the schema: queues, policies, weights, dead jobs.
-- Roles are cluster-wide: they are created when missing, if the migrator may create
-- roles; grants are per database. A migrator that may not create roles, on a cluster
-- without them, gets a warning and no grants: a superuser then creates the roles, and
-- the migrator (the objects' owner) runs this block again. It may run any number of times.

DO $$
DECLARE
    may_create boolean := (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user);
    missing text[] := ARRAY[]::text[];
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['fairsched_producer', 'fairsched_worker', 'fairsched_admin'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            IF may_create THEN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            ELSE
                missing := missing || r;
            END IF;
        END IF;
    END LOOP;
    IF cardinality(missing) > 0 THEN
        RAISE WARNING 'fairsched roles % are missing and % may not create roles: no grants made; '
                      'have a superuser create them (CREATE ROLE name NOLOGIN) and run the roles block '
                      'of migrations/001_baseline.sql', missing, current_user;
        RETURN;
    END IF;

    GRANT USAGE ON SCHEMA fairsched TO fairsched_producer, fairsched_worker, fairsched_admin;

    -- Producer: enqueue. It reads queues (settings, policies) and the identity of jobs
    -- (idempotency keys, aggregate order; never payloads or errors), and keeps the
    -- fairness state enqueue maintains: share rows (never their weight or cap) and
    -- serial aggregates. On serial queues enqueue promotes an aggregate's next job from
    -- waiting to pending.
    GRANT SELECT ON fairsched.queues TO fairsched_producer;
    GRANT INSERT ON fairsched.jobs TO fairsched_producer;
    GRANT SELECT (id, queue_name, tenant, status, priority, available_at, aggregate_key,
                  aggregate_seq, idempotency_key, serial, created_at),
          UPDATE (status)
       ON fairsched.jobs TO fairsched_producer;
    GRANT USAGE ON SEQUENCE fairsched.jobs_id_seq TO fairsched_producer;
    GRANT SELECT ON fairsched.tenant_shares TO fairsched_producer;
    GRANT INSERT (queue_name, tenant, active, ready_at, pass),
          UPDATE (active, ready_at, pass, updated_at)
       ON fairsched.tenant_shares TO fairsched_producer;
    GRANT SELECT ON fairsched.tenant_releases TO fairsched_producer;
    GRANT SELECT ON fairsched.aggregates TO fairsched_producer;
    GRANT INSERT (queue_name, tenant, aggregate_key, next_seq), UPDATE (updated_at, gap_since)
       ON fairsched.aggregates TO fairsched_producer;
    GRANT SELECT ON fairsched.claim_heads, fairsched.pass_floors TO fairsched_producer;

    -- Worker: the lease lifecycle, recovery and the claim heads' refresh. No new jobs, no
    -- queue settings, no weights.
    GRANT SELECT ON fairsched.queues TO fairsched_worker;
    GRANT SELECT, UPDATE ON fairsched.jobs TO fairsched_worker;
    GRANT SELECT, INSERT ON fairsched.attempt_log TO fairsched_worker;
    -- INSERT on the view is inert (it takes no inserts; workers write attempt_log).
    GRANT SELECT, INSERT ON fairsched.attempts TO fairsched_worker;
    GRANT SELECT, INSERT ON fairsched.job_events TO fairsched_worker;
    GRANT USAGE ON SEQUENCE fairsched.job_events_id_seq TO fairsched_worker;
    GRANT SELECT ON fairsched.tenant_shares TO fairsched_worker;
    GRANT INSERT (queue_name, tenant, active, ready_at, pass),
          UPDATE (pass, running, active, ready_at, claimed_total, charged_total, runtime_estimate,
                  updated_at)
       ON fairsched.tenant_shares TO fairsched_worker;
    GRANT SELECT, INSERT, UPDATE ON fairsched.tenant_releases TO fairsched_worker;
    GRANT SELECT ON fairsched.aggregates TO fairsched_worker;
    GRANT UPDATE (next_seq, blocked_job_id, gap_since, updated_at)
       ON fairsched.aggregates TO fairsched_worker;
    GRANT SELECT, UPDATE ON fairsched.claim_heads, fairsched.pass_floors TO fairsched_worker;
    GRANT EXECUTE ON FUNCTION fairsched.jobs_statistics_refresh(integer) TO fairsched_worker;
    GRANT SELECT ON fairsched.schema_migrations TO fairsched_worker;

    -- Admin: everything in the schema, and the tables later migrations add.
    GRANT ALL ON ALL TABLES IN SCHEMA fairsched TO fairsched_admin;
    GRANT ALL ON ALL SEQUENCES IN SCHEMA fairsched TO fairsched_admin;
    GRANT EXECUTE ON FUNCTION fairsched.jobs_statistics_refresh(integer) TO fairsched_admin;
    ALTER DEFAULT PRIVILEGES IN SCHEMA fairsched GRANT ALL ON TABLES TO fairsched_admin;
    ALTER DEFAULT PRIVILEGES IN SCHEMA fairsched GRANT ALL ON SEQUENCES TO fairsched_admin;
END
$$;
