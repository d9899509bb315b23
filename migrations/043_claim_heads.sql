-- Claim heads: where a claim's index scan may start. Every claim moves rows out of the
-- claim indexes' predicate (status = 'pending'), so each leaves a dead entry at the head
-- of the index it scans, and until VACUUM removes them every later claim walks them
-- again. A head is a key at or below every pending job's key in a job order; claims add
-- `key >= head` to their index condition and descend straight past the dead entries.
--
-- Invariant: no pending job has a key below its queue's heads, and no active tenant
-- has a pass below its queue's pass floor.
--   Lowered: every transition into pending, and every tenant that becomes active or
--   whose pass goes down, lowers them in its own transaction (the triggers below), after
--   a KEY SHARE lock on the row.
--   Raised: only by a refresh (`claim_heads_refresh`, `pass_floors_refresh`), which locks
--   the row FOR UPDATE (conflicting with those KEY SHARE locks) and then reads the
--   lowest pending key on a snapshot taken after the lock. A transaction that locked
--   first has committed by then and its jobs are seen; one that locks later waits for
--   the refresh and lowers what the refresh raised past its jobs.

-- Every built-in job order becomes one ascending index key (positionable by a row
-- comparison): fifo's `priority DESC` is the ascending `-priority`. The queue-wide
-- index also carries `priority` itself, so the exporter's level scans stay index-only.
ALTER TABLE fairsched.jobs ADD CONSTRAINT jobs_priority_range_check CHECK (priority > -2147483648);
DROP INDEX fairsched.jobs_claimable_idx;
CREATE INDEX jobs_claimable_idx
    ON fairsched.jobs (queue_name, (- priority), available_at, id) INCLUDE (priority)
    WHERE status = 'pending';
DROP INDEX fairsched.jobs_tenant_fifo_idx;
CREATE INDEX jobs_tenant_fifo_idx
    ON fairsched.jobs (queue_name, tenant, (- priority), available_at, id)
    WHERE status = 'pending';

-- A row comparison never matches NULL: every job has an aging key.
UPDATE fairsched.jobs SET aging_key = extract(epoch FROM created_at) WHERE aging_key IS NULL;
ALTER TABLE fairsched.jobs ALTER COLUMN aging_key SET DEFAULT extract(epoch FROM now());
ALTER TABLE fairsched.jobs ALTER COLUMN aging_key SET NOT NULL;

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

-- One row per queue: at or below every active tenant's pass (the weighted selection's
-- index, tenant_shares_pass_idx, gets a dead entry at its low end with every claim).
-- A table of its own: tenants are activated while the job heads may be held.
CREATE TABLE fairsched.pass_floors (
    queue_name    text PRIMARY KEY,
    pass          double precision NOT NULL DEFAULT '-Infinity',
    refreshed_at  timestamptz
) WITH (fillfactor = 50);

INSERT INTO fairsched.claim_heads (queue_name) SELECT name FROM fairsched.queues;
INSERT INTO fairsched.pass_floors (queue_name) SELECT name FROM fairsched.queues;

-- Jobs that became pending in a statement lower their queues' heads (one call per
-- statement; SECURITY DEFINER: producers and workers need no rights on the heads).
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

CREATE TRIGGER jobs_inserted_lower_heads
    AFTER INSERT ON fairsched.jobs REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION fairsched.claim_heads_lower();
CREATE TRIGGER jobs_updated_lower_heads
    AFTER UPDATE ON fairsched.jobs REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION fairsched.claim_heads_lower();

-- A tenant that became active, or whose pass went down, lowers its queue's pass floor.
-- (Claims only raise passes: a rising pass can never go below a floor.)
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

CREATE TRIGGER tenant_shares_inserted_lower_floor
    AFTER INSERT ON fairsched.tenant_shares
    FOR EACH ROW WHEN (NEW.active) EXECUTE FUNCTION fairsched.pass_floors_lower();
CREATE TRIGGER tenant_shares_updated_lower_floor
    AFTER UPDATE OF active, pass ON fairsched.tenant_shares
    FOR EACH ROW WHEN (NEW.active AND (NOT OLD.active OR NEW.pass < OLD.pass))
    EXECUTE FUNCTION fairsched.pass_floors_lower();

REVOKE ALL ON FUNCTION fairsched.claim_heads_lower() FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.pass_floors_lower() FROM PUBLIC;

-- Workers refresh the heads; producers only lower them, through the triggers.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fairsched_worker') THEN
        GRANT SELECT, UPDATE ON fairsched.claim_heads, fairsched.pass_floors TO fairsched_worker;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fairsched_producer') THEN
        GRANT SELECT ON fairsched.claim_heads, fairsched.pass_floors TO fairsched_producer;
    END IF;
END
$$;
