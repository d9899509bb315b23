-- serial: a dead job passed over leaves its aggregate's order.
--
-- In poison mode skip a dead job is passed over at once: its aggregate moves past it and
-- runs the next numbers. It keeps its place in the dead list, but no longer counts as one
-- of the aggregate's jobs (jobs.serial false), so that replaying it later can be refused
-- with a reason (Serial.settle) instead of colliding with the aggregate's running head.
-- A dead job that blocks its aggregate (mode block) stays in the order: replaying it runs
-- it in its place, discarding it lets the aggregate move past it.

-- Serial jobs left running for good: advance their aggregate past them, or (poison mode
-- block) let a dead one hold it; a dead one passed over (mode skip) leaves the order
-- (Serial.settle). Read from the jobs' rows: calling it again changes nothing.
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
    UPDATE fairsched.jobs AS j
       SET serial = false
      FROM fairsched.aggregates a
     WHERE j.id = ANY(p_ids) AND j.serial AND j.status = 'dead'
       AND a.queue_name = j.queue_name AND a.tenant = j.tenant AND a.aggregate_key = j.aggregate_key
       AND a.blocked_job_id IS DISTINCT FROM j.id;
END
$$;

COMMENT ON FUNCTION fairsched.aggregates_finish(bigint[]) IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)';

-- The dead jobs passed over before this migration leave the order too: those their
-- aggregate does not wait on (its next number is past them).
UPDATE fairsched.jobs AS j
   SET serial = false
  FROM fairsched.aggregates a
 WHERE j.serial AND j.status = 'dead'
   AND a.queue_name = j.queue_name AND a.tenant = j.tenant AND a.aggregate_key = j.aggregate_key
   AND a.blocked_job_id IS DISTINCT FROM j.id AND a.next_seq > j.aggregate_seq;
