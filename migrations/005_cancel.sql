-- Cancellation: a job withdrawn before it ran, or stopped while it ran, ends `cancelled`
-- (docs/cancellation.md).
--
-- A pending or waiting job is cancelled at once. A running one gets a request
-- (cancel_requested_at) that its worker sees at its next heartbeat or progress call; the
-- handler stops and the worker ends the lease by the fenced failure path, which finds the
-- request and records the attempt `cancelled`. Whatever way a requested job leaves
-- running other than by succeeding (a failure, a release at shutdown, an expired lease
-- recovered) it ends cancelled too, never back in pending: the request is final. A
-- completion that wins the race with the request stands (the job succeeded).


-- == The jobs and their attempts ======================================================

ALTER TABLE fairsched.jobs
    ADD COLUMN cancel_requested_at timestamptz,
    DROP CONSTRAINT jobs_status_check,
    ADD CONSTRAINT jobs_status_check
        CHECK (status IN ('waiting', 'pending', 'running', 'succeeded', 'dead', 'discarded',
                          'cancelled'));

ALTER TABLE fairsched.attempt_log
    DROP CONSTRAINT attempts_outcome_check,
    ADD CONSTRAINT attempts_outcome_check
        CHECK (outcome IN ('succeeded', 'failed', 'retrying', 'dead', 'expired', 'released',
                           'cancelled'));


-- == Retention ========================================================================

-- Cancelled jobs are finished jobs: kept for the queue's finished_retention_seconds, then
-- pruned with the succeeded and discarded ones (the prune below, as in 002 otherwise).
DROP INDEX fairsched.jobs_finished_idx;
CREATE INDEX jobs_finished_idx
    ON fairsched.jobs (queue_name, finished_at)
    WHERE status IN ('succeeded', 'discarded', 'cancelled');

CREATE OR REPLACE FUNCTION fairsched.jobs_prune(queue text, kind text, batch integer, dry_run boolean DEFAULT false)
    RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q fairsched.queues;
    finished_before timestamptz;
    dead_before timestamptz;
    history_before timestamptz;
    removed bigint;
    more bigint;
BEGIN
    IF batch IS NULL OR batch NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'prune batch must be between 1 and 10000, got %', batch
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF kind IS NULL OR kind NOT IN ('finished', 'dead', 'history') THEN
        RAISE EXCEPTION 'prune kind must be finished, dead or history, got %', kind
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO q FROM fairsched.queues AS s WHERE s.name = queue;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF NOT dry_run AND NOT pg_try_advisory_xact_lock(28837374418316901) THEN  -- 'fsprune'
        RETURN NULL;
    END IF;
    finished_before := now() - make_interval(secs => q.finished_retention_seconds);
    dead_before := now() - make_interval(secs => q.dead_retention_seconds);
    history_before := now() - make_interval(secs => q.history_retention_seconds);

    IF kind = 'finished' THEN
        IF dry_run THEN
            SELECT count(*) INTO removed FROM fairsched.jobs AS j
             WHERE j.queue_name = queue AND j.status IN ('succeeded', 'discarded', 'cancelled')
               AND j.finished_at < finished_before;
        ELSE
            WITH doomed AS MATERIALIZED (
                SELECT j.id FROM fairsched.jobs AS j
                 WHERE j.queue_name = queue AND j.status IN ('succeeded', 'discarded', 'cancelled')
                   AND j.finished_at < finished_before
                 LIMIT batch
                   FOR UPDATE SKIP LOCKED
            )
            DELETE FROM fairsched.jobs AS j
             USING doomed AS d
             WHERE j.id = d.id AND j.status IN ('succeeded', 'discarded', 'cancelled');
            GET DIAGNOSTICS removed = ROW_COUNT;
        END IF;
        RETURN removed;
    END IF;

    IF kind = 'dead' THEN
        IF dry_run THEN
            SELECT count(*) INTO removed FROM fairsched.jobs AS j
             WHERE j.queue_name = queue AND j.status = 'dead' AND j.finished_at < dead_before
               AND NOT EXISTS (SELECT 1 FROM fairsched.aggregates AS a
                                WHERE a.queue_name = queue AND a.blocked_job_id = j.id);
        ELSE
            WITH doomed AS MATERIALIZED (
                SELECT j.id FROM fairsched.jobs AS j
                 WHERE j.queue_name = queue AND j.status = 'dead' AND j.finished_at < dead_before
                   AND NOT EXISTS (SELECT 1 FROM fairsched.aggregates AS a
                                    WHERE a.queue_name = queue AND a.blocked_job_id = j.id)
                 LIMIT batch
                   FOR UPDATE OF j SKIP LOCKED
            )
            DELETE FROM fairsched.jobs AS j
             USING doomed AS d
             WHERE j.id = d.id AND j.status = 'dead';
            GET DIAGNOSTICS removed = ROW_COUNT;
        END IF;
        RETURN removed;
    END IF;

    -- history: a row goes when its job is gone or past its own retention.
    IF dry_run THEN
        SELECT count(*) INTO removed FROM fairsched.attempt_log AS a
         WHERE a.queue_name = queue AND a.finished_at < history_before
           AND NOT EXISTS (SELECT 1 FROM fairsched.jobs AS j
                            WHERE j.id = a.job_id
                              AND NOT (j.status IN ('succeeded', 'discarded', 'cancelled') AND j.finished_at < finished_before)
                              AND NOT (j.status = 'dead' AND j.finished_at < dead_before));
        SELECT count(*) INTO more FROM fairsched.job_events AS e
         WHERE e.queue_name = queue AND e.at < history_before
           AND NOT EXISTS (SELECT 1 FROM fairsched.jobs AS j
                            WHERE j.id = e.job_id
                              AND NOT (j.status IN ('succeeded', 'discarded', 'cancelled') AND j.finished_at < finished_before)
                              AND NOT (j.status = 'dead' AND j.finished_at < dead_before));
        RETURN removed + more;
    END IF;
    WITH doomed AS MATERIALIZED (
        SELECT a.job_id, a.lease_token FROM fairsched.attempt_log AS a
         WHERE a.queue_name = queue AND a.finished_at < history_before
           AND NOT EXISTS (SELECT 1 FROM fairsched.jobs AS j
                            WHERE j.id = a.job_id
                              AND NOT (j.status IN ('succeeded', 'discarded', 'cancelled') AND j.finished_at < finished_before)
                              AND NOT (j.status = 'dead' AND j.finished_at < dead_before))
         LIMIT batch
           FOR UPDATE OF a SKIP LOCKED
    )
    DELETE FROM fairsched.attempt_log AS a
     USING doomed AS d
     WHERE a.job_id = d.job_id AND a.lease_token = d.lease_token;
    GET DIAGNOSTICS removed = ROW_COUNT;
    IF removed < batch THEN
        WITH doomed AS MATERIALIZED (
            SELECT e.id FROM fairsched.job_events AS e
             WHERE e.queue_name = queue AND e.at < history_before
               AND NOT EXISTS (SELECT 1 FROM fairsched.jobs AS j
                                WHERE j.id = e.job_id
                                  AND NOT (j.status IN ('succeeded', 'discarded', 'cancelled') AND j.finished_at < finished_before)
                                  AND NOT (j.status = 'dead' AND j.finished_at < dead_before))
             LIMIT batch - removed
               FOR UPDATE OF e SKIP LOCKED
        )
        DELETE FROM fairsched.job_events AS e USING doomed AS d WHERE e.id = d.id;
        GET DIAGNOSTICS more = ROW_COUNT;
        removed := removed + more;
    END IF;
    RETURN removed;
END
$$;


-- Roles: cancelling is the admin's (001 grants it everything in the schema); producers
-- and workers get nothing new.
