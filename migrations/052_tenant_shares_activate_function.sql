-- Activation as one call: tenants that got pending jobs (due at `dues`) join the
-- weighted selection. It was two statements sent one after the other; as a function,
-- a weighted enqueue runs it inside its own insert statement, one round trip instead of
-- five (BEGIN, insert, lock, activate, COMMIT), and jobs and activation still commit
-- together. Each statement below takes its own snapshot (a VOLATILE function's
-- statements do), as the two statements did:
--   1. missing share rows are created inactive, at the queue's virtual time;
--   2. every share row is KEY SHARE locked until the caller's transaction commits, so a
--      concurrent deactivation skips it (it locks FOR UPDATE SKIP LOCKED); a row a
--      deactivation held is locked once that one committed, and read after it;
--   3. tenants with work due now join at the queue's lowest active pass (no credit
--      banked while idle); work due later is remembered for the sweeper.

-- The queue's virtual time: the lowest active pass; when no tenant is active, the highest
-- pass reached, so tenants returning to an idle queue start level. STABLE: it reads the
-- calling statement's snapshot. The sweeper's wake reads it too.
CREATE FUNCTION fairsched.tenant_shares_floor(queue text) RETURNS double precision
    LANGUAGE sql STABLE
    RETURN coalesce((SELECT a.pass FROM fairsched.tenant_shares AS a
                      WHERE a.queue_name = tenant_shares_floor.queue AND a.active
                      ORDER BY a.pass LIMIT 1),
                    (SELECT max(a.pass) FROM fairsched.tenant_shares AS a
                      WHERE a.queue_name = tenant_shares_floor.queue), 0);

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
