-- aging: the claim head of its job order (aging_key, then id). Claims in aging order
-- start their index scan at the queue's head (fairsched.claim_heads: aging_key, aging_id),
-- a key at or below every pending job's; jobs that become pending lower it (the trigger
-- below), and only aging_head_refresh raises it (docs/claim-design.md).

COMMENT ON COLUMN fairsched.claim_heads.aging_key IS
    'aging policy: a key at or below every pending job''s aging_key on the queue';
COMMENT ON COLUMN fairsched.claim_heads.aging_id IS
    'aging policy: with aging_key, at or below every pending job''s (aging_key, id)';

-- Jobs that became pending in a statement lower their queues' aging heads, once per
-- statement: lock the rows first (KEY SHARE, which a refresh's FOR UPDATE waits for),
-- then lower.
CREATE FUNCTION fairsched.aging_head_lower() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM changed AS c WHERE c.status = 'pending') THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM fairsched.claim_heads AS h
      WHERE h.queue_name IN (SELECT c.queue_name FROM changed AS c WHERE c.status = 'pending')
      ORDER BY h.queue_name
        FOR KEY SHARE;
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
REVOKE ALL ON FUNCTION fairsched.aging_head_lower() FROM PUBLIC;

CREATE TRIGGER jobs_inserted_lower_aging_head
    AFTER INSERT ON fairsched.jobs REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION fairsched.aging_head_lower();
CREATE TRIGGER jobs_updated_lower_aging_head
    AFTER UPDATE ON fairsched.jobs REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION fairsched.aging_head_lower();

-- Raise a queue's aging head to its lowest pending job, skipping (false) while a
-- transaction that makes jobs pending holds the row. Heads only rise to where the jobs
-- are: any caller's refresh is the right one.
CREATE FUNCTION fairsched.aging_head_refresh(p_queue text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM fairsched.claim_heads AS h WHERE h.queue_name = p_queue FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    WITH lowest AS (
        SELECT j.aging_key, j.id
          FROM fairsched.claim_heads AS h
          JOIN fairsched.jobs AS j ON j.queue_name = h.queue_name
         WHERE h.queue_name = p_queue AND j.status = 'pending'
           AND (j.aging_key, j.id) >= (h.aging_key, h.aging_id)
         ORDER BY j.aging_key, j.id
         LIMIT 1
    )
    UPDATE fairsched.claim_heads AS h
       SET aging_key = coalesce((SELECT aging_key FROM lowest), h.aging_key),
           aging_id = coalesce((SELECT id FROM lowest), h.aging_id)
     WHERE h.queue_name = p_queue;
    RETURN true;
END
$$;
REVOKE ALL ON FUNCTION fairsched.aging_head_refresh(text) FROM PUBLIC;

-- Heads nothing lowered while this policy's trigger did not exist (before it, or between
-- an uninstall and this install) may sit above a pending job: start them over from
-- below every key, for the next refresh to raise.
UPDATE fairsched.claim_heads SET aging_key = '-Infinity', aging_id = 0;

DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'fairsched_worker') THEN
        GRANT EXECUTE ON FUNCTION fairsched.aging_head_refresh(text) TO fairsched_worker;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'fairsched_admin') THEN
        GRANT EXECUTE ON FUNCTION fairsched.aging_head_refresh(text) TO fairsched_admin;
    END IF;
END
$$;
