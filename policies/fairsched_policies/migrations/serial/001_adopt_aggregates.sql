-- serial: its state, adopted from the engine's migrations that created it (001_baseline,
-- 008_roles, 011_operator_functions), as it stands after them. From here on it is the
-- policy's: a change to any of it is a new file of this folder (002_...), never an engine
-- migration.
--
-- On a database the engine's migrations built, nothing here changes anything but the
-- comments that name the owner: tables and functions are declared as they are, and
-- granted again what they hold. Columns and indexes on tables in use are created only
-- when missing: ADD COLUMN IF NOT EXISTS and CREATE INDEX IF NOT EXISTS lock their table
-- before they look, waiting behind every transaction that uses it and holding up all that
-- come after.


-- == Queue settings and the jobs' serial flag =========================================

-- serial_gap: `strict` waits for a missing sequence number, `lowest` runs the lowest
-- present. serial_poison: `block` keeps a dead job at its aggregate's head, `skip` passes
-- it. jobs.serial: the job was enqueued on a queue whose stack holds serial (its
-- aggregate's jobs run one at a time, in aggregate_seq order).
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'fairsched.queues'::regclass
                                             AND attname = 'serial_gap' AND NOT attisdropped) THEN
        ALTER TABLE fairsched.queues ADD COLUMN serial_gap text NOT NULL DEFAULT 'strict'
            CONSTRAINT queues_serial_gap_check CHECK (serial_gap IN ('strict', 'lowest'));
    END IF;
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'fairsched.queues'::regclass
                                             AND attname = 'serial_poison' AND NOT attisdropped) THEN
        ALTER TABLE fairsched.queues ADD COLUMN serial_poison text NOT NULL DEFAULT 'block'
            CONSTRAINT queues_serial_poison_check CHECK (serial_poison IN ('block', 'skip'));
    END IF;
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'fairsched.jobs'::regclass
                                             AND attname = 'serial' AND NOT attisdropped) THEN
        ALTER TABLE fairsched.jobs ADD COLUMN serial boolean NOT NULL DEFAULT false;
        IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'fairsched_producer') THEN
            GRANT SELECT (serial) ON fairsched.jobs TO fairsched_producer;
        END IF;
    END IF;

    -- The mutex: at most one pending or running job per aggregate.
    IF to_regclass('fairsched.jobs_aggregate_head_idx') IS NULL THEN
        CREATE UNIQUE INDEX jobs_aggregate_head_idx
            ON fairsched.jobs (queue_name, tenant, aggregate_key)
            WHERE serial AND status IN ('pending', 'running');
    END IF;
    -- One job per sequence number.
    IF to_regclass('fairsched.jobs_aggregate_seq_idx') IS NULL THEN
        CREATE UNIQUE INDEX jobs_aggregate_seq_idx
            ON fairsched.jobs (queue_name, tenant, aggregate_key, aggregate_seq)
            WHERE serial;
    END IF;
    -- The waiting jobs of an aggregate, in order: the next one to promote.
    IF to_regclass('fairsched.jobs_aggregate_waiting_idx') IS NULL THEN
        CREATE INDEX jobs_aggregate_waiting_idx
            ON fairsched.jobs (queue_name, tenant, aggregate_key, aggregate_seq)
            WHERE status = 'waiting';
    END IF;
END
$$;


-- == Aggregates =======================================================================

-- One row per serial aggregate: the next sequence number allowed to run (lower ones are
-- refused at enqueue), the dead job that blocks the aggregate (poison mode block), and
-- since when it waits on a missing number (gap mode strict).
CREATE TABLE IF NOT EXISTS fairsched.aggregates (
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
DO $$
BEGIN
    IF to_regclass('fairsched.aggregates_blocked_idx') IS NULL THEN
        CREATE INDEX aggregates_blocked_idx
            ON fairsched.aggregates (queue_name) WHERE blocked_job_id IS NOT NULL;
    END IF;
    IF to_regclass('fairsched.aggregates_gap_idx') IS NULL THEN
        CREATE INDEX aggregates_gap_idx
            ON fairsched.aggregates (queue_name, gap_since) WHERE gap_since IS NOT NULL;
    END IF;
END
$$;


-- == Functions ========================================================================
--
-- Each runs as the schema owner (SECURITY DEFINER, search_path pinned), so that no role
-- needs a write on the table: called by the policy (fairsched_policies/serial.py) at
-- enqueue and after transitions, and by the operators' `fairsched aggregate unblock` and
-- `skip`.

-- Lock (creating them) the aggregates a serial enqueue touches; a new aggregate starts
-- at the lowest sequence number of its first batch. Returns next_seq. Only for tenants
-- the caller may enqueue for (Serial.hold).
CREATE OR REPLACE FUNCTION fairsched.aggregates_lock(p_queue text, p_tenants text[], p_keys text[], p_seqs bigint[])
    RETURNS TABLE (tenant text, aggregate_key text, next_seq bigint)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM fairsched.producer_tenants_check(p_tenants);
    IF NOT EXISTS (SELECT 1 FROM fairsched.queues AS q WHERE q.name = p_queue) THEN
        RETURN;
    END IF;
    RETURN QUERY
    INSERT INTO fairsched.aggregates AS a (queue_name, tenant, aggregate_key, next_seq)
    SELECT p_queue, t.tenant, t.aggregate_key, min(t.aggregate_seq)
      FROM unnest(p_tenants, p_keys, p_seqs) AS t(tenant, aggregate_key, aggregate_seq)
     GROUP BY t.tenant, t.aggregate_key
    ON CONFLICT (queue_name, tenant, aggregate_key) DO UPDATE SET updated_at = now()
    RETURNING a.tenant, a.aggregate_key, a.next_seq;
END
$$;

-- Serial jobs left running for good: advance their aggregate past them, or (poison mode
-- block) let a dead one hold it (Serial.settle). Read from the jobs' rows: calling it
-- again changes nothing.
CREATE OR REPLACE FUNCTION fairsched.aggregates_finish(p_ids bigint[])
    RETURNS TABLE (queue_name text, tenant text, aggregate_key text)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    UPDATE fairsched.aggregates AS a
       SET next_seq = CASE WHEN j.status = 'dead' AND q.serial_poison = 'block' THEN a.next_seq
                           ELSE greatest(a.next_seq, j.aggregate_seq + 1) END,
           blocked_job_id = CASE WHEN j.status = 'dead' AND q.serial_poison = 'block' THEN j.id
                                 WHEN a.blocked_job_id = j.id THEN NULL
                                 ELSE a.blocked_job_id END,
           updated_at = now()
      FROM fairsched.jobs j, fairsched.queues q
     WHERE j.id = ANY(p_ids) AND j.serial
       AND j.status IN ('succeeded', 'dead', 'discarded', 'cancelled')
       AND a.queue_name = j.queue_name AND a.tenant = j.tenant AND a.aggregate_key = j.aggregate_key
       AND q.name = j.queue_name
    RETURNING a.queue_name, a.tenant, a.aggregate_key;
END
$$;

-- Promote the next job of each given aggregate that has no job pending or running and
-- is not blocked (Serial.settle): what the serial order allows, so a call for any
-- aggregate only does what the next transition would.
CREATE OR REPLACE FUNCTION fairsched.aggregates_advance(p_queues text[], p_tenants text[], p_keys text[])
    RETURNS TABLE (id bigint, queue_name text, tenant text, available_at timestamptz)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH input AS (
        SELECT DISTINCT * FROM unnest(p_queues, p_tenants, p_keys) AS t(queue_name, tenant, aggregate_key)
    ), free AS (
        SELECT a.queue_name, a.tenant, a.aggregate_key, a.next_seq, q.serial_gap
          FROM input i
          JOIN fairsched.aggregates a USING (queue_name, tenant, aggregate_key)
          JOIN fairsched.queues q ON q.name = a.queue_name
         WHERE a.blocked_job_id IS NULL
           AND NOT EXISTS (SELECT 1 FROM fairsched.jobs j
                            WHERE j.serial AND j.queue_name = a.queue_name AND j.tenant = a.tenant
                              AND j.aggregate_key = a.aggregate_key
                              AND j.status IN ('pending', 'running'))
    ), head AS (
        SELECT f.*, w.id, w.aggregate_seq,
               w.aggregate_seq = f.next_seq
               OR (f.serial_gap = 'strict' AND w.aggregate_seq - f.next_seq = (
                    SELECT count(*) FROM fairsched.jobs c
                     WHERE c.serial AND c.queue_name = f.queue_name AND c.tenant = f.tenant
                       AND c.aggregate_key = f.aggregate_key AND c.status = 'cancelled'
                       AND c.aggregate_seq >= f.next_seq AND c.aggregate_seq < w.aggregate_seq))
                   AS in_order
          FROM free f
          LEFT JOIN LATERAL (
                SELECT j.id, j.aggregate_seq FROM fairsched.jobs j
                 WHERE j.queue_name = f.queue_name AND j.tenant = f.tenant
                   AND j.aggregate_key = f.aggregate_key AND j.status = 'waiting'
                 ORDER BY j.aggregate_seq LIMIT 1) w ON true
    ), promoted AS (
        UPDATE fairsched.jobs AS j
           SET status = 'pending'
          FROM head h
         WHERE j.id = h.id AND j.status = 'waiting'
           AND (h.serial_gap = 'lowest' OR h.in_order)
        RETURNING j.id, j.queue_name, j.tenant, j.available_at
    ), gaps AS (
        UPDATE fairsched.aggregates AS a
           SET gap_since = CASE WHEN h.id IS NOT NULL AND h.serial_gap = 'strict'
                                     AND NOT h.in_order
                                THEN coalesce(a.gap_since, now()) END
          FROM head h
         WHERE a.queue_name = h.queue_name AND a.tenant = h.tenant AND a.aggregate_key = h.aggregate_key
    )
    SELECT p.id, p.queue_name, p.tenant, p.available_at FROM promoted AS p;
END
$$;

-- Run an aggregate's dead head again (same id, fresh attempts); the aggregate resumes
-- (`fairsched aggregate unblock`).
CREATE OR REPLACE FUNCTION fairsched.aggregate_unblock(p_queue text, p_tenant text, p_key text, p_by text)
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

-- Discard an aggregate's dead head and let the aggregate move past it (`fairsched
-- aggregate skip`).
CREATE OR REPLACE FUNCTION fairsched.aggregate_skip(p_queue text, p_tenant text, p_key text, p_by text)
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

REVOKE ALL ON FUNCTION
        fairsched.aggregates_lock(text, text[], text[], bigint[]),
        fairsched.aggregates_finish(bigint[]),
        fairsched.aggregates_advance(text[], text[], text[]),
        fairsched.aggregate_unblock(text, text, text, text),
        fairsched.aggregate_skip(text, text, text, text)
   FROM PUBLIC;


-- == Privileges =======================================================================
--
-- Granted to each role that exists (001_baseline.sql creates them, or tells how).
-- Producers lock aggregates at enqueue and promote their heads; workers settle them
-- after a transition; the web role unblocks and skips, and settles what that changes;
-- the reader reads.

DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'fairsched_producer') THEN
        GRANT SELECT ON fairsched.aggregates TO fairsched_producer;
        GRANT EXECUTE ON FUNCTION
            fairsched.aggregates_lock(text, text[], text[], bigint[]),
            fairsched.aggregates_advance(text[], text[], text[])
          TO fairsched_producer;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'fairsched_worker') THEN
        GRANT SELECT ON fairsched.aggregates TO fairsched_worker;
        GRANT EXECUTE ON FUNCTION
            fairsched.aggregates_finish(bigint[]),
            fairsched.aggregates_advance(text[], text[], text[])
          TO fairsched_worker;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'fairsched_web') THEN
        GRANT EXECUTE ON FUNCTION
            fairsched.aggregates_finish(bigint[]),
            fairsched.aggregates_advance(text[], text[], text[]),
            fairsched.aggregate_unblock(text, text, text, text),
            fairsched.aggregate_skip(text, text, text, text)
          TO fairsched_web;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'fairsched_reader') THEN
        GRANT SELECT ON fairsched.aggregates TO fairsched_reader;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'fairsched_admin') THEN
        GRANT ALL ON fairsched.aggregates TO fairsched_admin;
        GRANT EXECUTE ON FUNCTION
            fairsched.aggregates_lock(text, text[], text[], bigint[]),
            fairsched.aggregates_finish(bigint[]),
            fairsched.aggregates_advance(text[], text[], text[]),
            fairsched.aggregate_unblock(text, text, text, text),
            fairsched.aggregate_skip(text, text, text, text)
          TO fairsched_admin;
    END IF;
END
$$;


-- == The owner, named =================================================================

COMMENT ON COLUMN fairsched.queues.serial_gap IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)';
COMMENT ON COLUMN fairsched.queues.serial_poison IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)';
COMMENT ON COLUMN fairsched.jobs.serial IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)';
COMMENT ON INDEX fairsched.jobs_aggregate_head_idx IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)';
COMMENT ON INDEX fairsched.jobs_aggregate_seq_idx IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)';
COMMENT ON INDEX fairsched.jobs_aggregate_waiting_idx IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)';
COMMENT ON TABLE fairsched.aggregates IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)';
COMMENT ON FUNCTION fairsched.aggregates_lock(text, text[], text[], bigint[])
    IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)';
COMMENT ON FUNCTION fairsched.aggregates_finish(bigint[]) IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)';
COMMENT ON FUNCTION fairsched.aggregates_advance(text[], text[], text[])
    IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)';
COMMENT ON FUNCTION fairsched.aggregate_unblock(text, text, text, text)
    IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)';
COMMENT ON FUNCTION fairsched.aggregate_skip(text, text, text, text)
    IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)';
