-- serial: where a new aggregate starts.
--
-- Gap mode `strict` waits for every number from the aggregate's start: a new aggregate
-- starts at 1, or at 0 when its first batch holds 0 (the lower of 0 and 1), whatever
-- number comes first; a later 2 waits for 1 and reports the gap. Gap mode `lowest`
-- starts at the lowest number of the first batch, as before. Aggregates that exist keep
-- their next number.

-- Lock (creating them) the aggregates a serial enqueue touches, and return next_seq.
-- Only for tenants the caller may enqueue for (Serial.hold).
CREATE OR REPLACE FUNCTION fairsched.aggregates_lock(p_queue text, p_tenants text[], p_keys text[], p_seqs bigint[])
    RETURNS TABLE (tenant text, aggregate_key text, next_seq bigint)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM fairsched.producer_tenants_check(p_tenants);
    RETURN QUERY
    INSERT INTO fairsched.aggregates AS a (queue_name, tenant, aggregate_key, next_seq)
    SELECT q.name, t.tenant, t.aggregate_key,
           CASE WHEN q.serial_gap = 'strict' THEN least(min(t.aggregate_seq), 1)
                ELSE min(t.aggregate_seq) END
      FROM unnest(p_tenants, p_keys, p_seqs) AS t(tenant, aggregate_key, aggregate_seq)
      JOIN fairsched.queues AS q ON q.name = p_queue
     GROUP BY q.name, q.serial_gap, t.tenant, t.aggregate_key
    ON CONFLICT (queue_name, tenant, aggregate_key) DO UPDATE SET updated_at = now()
    RETURNING a.tenant, a.aggregate_key, a.next_seq;
END
$$;

COMMENT ON FUNCTION fairsched.aggregates_lock(text, text[], text[], bigint[])
    IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)';
