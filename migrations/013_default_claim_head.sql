-- The claim head of the default job order (highest priority first, then the earliest
-- due, then the lowest id) is the engine's; a policy that orders jobs its own way keeps
-- the head of its order (columns of fairsched.claim_heads, the trigger that lowers them
-- and the function that raises them) in its own migrations (the aging policy does).
-- The default head's columns are named after the order, and the engine's trigger and
-- refresh keep only them from now on.

ALTER TABLE fairsched.claim_heads RENAME COLUMN fifo_rank TO order_rank;
ALTER TABLE fairsched.claim_heads RENAME COLUMN fifo_available_at TO order_available_at;
ALTER TABLE fairsched.claim_heads RENAME COLUMN fifo_id TO order_id;

-- Jobs that became pending in a statement lower their queues' default heads, once per
-- statement (001_baseline.sql: lock first, then lower).
CREATE OR REPLACE FUNCTION fairsched.claim_heads_lower() RETURNS trigger
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
       SET order_rank = l.rank, order_available_at = l.available_at, order_id = l.id
      FROM (SELECT DISTINCT ON (c.queue_name) c.queue_name, - c.priority AS rank, c.available_at, c.id
              FROM changed AS c
             WHERE c.status = 'pending'
             ORDER BY c.queue_name, - c.priority, c.available_at, c.id) AS l
     WHERE h.queue_name = l.queue_name
       AND (l.rank, l.available_at, l.id) < (h.order_rank, h.order_available_at, h.order_id);
    RETURN NULL;
END
$$;

-- Raise a queue's default head to its lowest pending job, skipping (false) while a
-- transaction that makes jobs pending holds it (008_roles.sql: heads only rise to where
-- the jobs are, so any caller's refresh is the right one).
CREATE OR REPLACE FUNCTION fairsched.claim_heads_refresh(p_queue text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM fairsched.claim_heads AS h WHERE h.queue_name = p_queue FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    WITH lowest AS (
        SELECT - j.priority AS rank, j.available_at, j.id
          FROM fairsched.claim_heads AS h
          JOIN fairsched.jobs AS j ON j.queue_name = h.queue_name
         WHERE h.queue_name = p_queue AND j.status = 'pending'
           AND (- j.priority, j.available_at, j.id) >= (h.order_rank, h.order_available_at, h.order_id)
         ORDER BY - j.priority, j.available_at, j.id
         LIMIT 1
    )
    UPDATE fairsched.claim_heads AS h
       SET order_rank = coalesce((SELECT rank FROM lowest), h.order_rank),
           order_available_at = coalesce((SELECT available_at FROM lowest), h.order_available_at),
           order_id = coalesce((SELECT id FROM lowest), h.order_id),
           refreshed_at = now()
     WHERE h.queue_name = p_queue;
    RETURN true;
END
$$;
