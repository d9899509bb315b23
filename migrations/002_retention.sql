-- Retention: finished jobs, dead jobs and the attempt history leave the tables on a
-- per-queue schedule (docs/operations.md, "Retention").
--
-- Each queue gets three retention periods, in whole seconds:
--   finished_retention_seconds  succeeded and discarded jobs, from their finished_at;
--   dead_retention_seconds      dead jobs, from their death (finished_at): kept longer,
--                               so that `fairsched dead replay` finds them;
--   history_retention_seconds   attempt_log and job_events rows, from their own time, once
--                               their job is gone or goes in the same prune.
-- Every worker runs a pruner (fairsched/worker/pruner.py) that calls jobs_prune below in
-- small batches, one short transaction each; `fairsched prune` runs the same by hand.
--
-- Batched deletes behind an index, not partitions: the hot table stays one table (the
-- claim, its indexes and the claim heads are unchanged), a queue's retention is a row
-- of settings rather than a partition layout, and a batch of 1,000 rows costs one index
-- range scan and 1,000 primary key lookups. Autovacuum already visits the jobs table
-- after 1% of its rows changed (001), so the space the deletes free is reused by the
-- rows that come next instead of growing the table.


-- == Queue settings ===================================================================

ALTER TABLE fairsched.queues
    ADD COLUMN finished_retention_seconds integer NOT NULL DEFAULT 86400
        CONSTRAINT queues_finished_retention_range
        CHECK (finished_retention_seconds BETWEEN 1 AND 31536000),
    ADD COLUMN dead_retention_seconds integer NOT NULL DEFAULT 2592000
        CONSTRAINT queues_dead_retention_range
        CHECK (dead_retention_seconds BETWEEN 3600 AND 315360000),
    ADD COLUMN history_retention_seconds integer NOT NULL DEFAULT 2592000
        CONSTRAINT queues_history_retention_range
        CHECK (history_retention_seconds BETWEEN 60 AND 315360000);


-- == What the prune reads =============================================================

-- Succeeded and discarded jobs per queue, oldest first: the finished prune's range scan.
-- (Dead jobs have jobs_dead_idx, on the same key.)
CREATE INDEX jobs_finished_idx
    ON fairsched.jobs (queue_name, finished_at)
    WHERE status IN ('succeeded', 'discarded');

-- The attempt history outlives its job, so each row names its queue: set on insert
-- from the job's row (queue names never change), NULL only for a job already gone.
ALTER TABLE fairsched.attempt_log ADD COLUMN queue_name text;
ALTER TABLE fairsched.job_events ADD COLUMN queue_name text;

UPDATE fairsched.attempt_log AS a SET queue_name = j.queue_name
  FROM fairsched.jobs AS j WHERE j.id = a.job_id;
UPDATE fairsched.job_events AS e SET queue_name = j.queue_name
  FROM fairsched.jobs AS j WHERE j.id = e.job_id;

CREATE INDEX attempt_log_retention_idx ON fairsched.attempt_log (queue_name, finished_at);
CREATE INDEX job_events_retention_idx ON fairsched.job_events (queue_name, at);

-- Fills queue_name of a new history row. SECURITY DEFINER: whoever writes the history
-- needs no right to read the jobs table for it.
CREATE FUNCTION fairsched.history_queue_name() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.queue_name IS NULL THEN
        NEW.queue_name := (SELECT j.queue_name FROM fairsched.jobs AS j WHERE j.id = NEW.job_id);
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION fairsched.history_queue_name() FROM PUBLIC;

CREATE TRIGGER attempt_log_queue_name
    BEFORE INSERT ON fairsched.attempt_log
    FOR EACH ROW EXECUTE FUNCTION fairsched.history_queue_name();
CREATE TRIGGER job_events_queue_name
    BEFORE INSERT ON fairsched.job_events
    FOR EACH ROW EXECUTE FUNCTION fairsched.history_queue_name();


-- == The prune ========================================================================

-- Removes at most `batch` rows of one kind from one queue, past the queue's retention
-- (database time), and returns how many; with dry_run it deletes nothing and returns how
-- many rows of that kind are past retention now (all of them, not one batch). Kinds:
--   finished  succeeded and discarded jobs;
--   dead      dead jobs, except one that blocks its serial aggregate (poison mode
--             block: `fairsched aggregate` still needs it);
--   history   attempt_log rows, then job_events rows, whose job is gone or itself past
--             retention (the history of a job still kept stays with it).
-- One batch at a time across the cluster: it first tries a transaction-level advisory
-- lock and returns NULL at once, having done nothing, when another transaction holds it.
-- It never waits for a row: candidates are locked FOR UPDATE SKIP LOCKED, and no pending,
-- waiting or running job is a candidate, so claims never wait for a prune.
-- SECURITY DEFINER: workers prune without the right to delete anything else.
CREATE FUNCTION fairsched.jobs_prune(queue text, kind text, batch integer, dry_run boolean DEFAULT false)
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
             WHERE j.queue_name = queue AND j.status IN ('succeeded', 'discarded')
               AND j.finished_at < finished_before;
        ELSE
            WITH doomed AS MATERIALIZED (
                SELECT j.id FROM fairsched.jobs AS j
                 WHERE j.queue_name = queue AND j.status IN ('succeeded', 'discarded')
                   AND j.finished_at < finished_before
                 LIMIT batch
                   FOR UPDATE SKIP LOCKED
            )
            DELETE FROM fairsched.jobs AS j
             USING doomed AS d
             WHERE j.id = d.id AND j.status IN ('succeeded', 'discarded');
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
                              AND NOT (j.status IN ('succeeded', 'discarded') AND j.finished_at < finished_before)
                              AND NOT (j.status = 'dead' AND j.finished_at < dead_before));
        SELECT count(*) INTO more FROM fairsched.job_events AS e
         WHERE e.queue_name = queue AND e.at < history_before
           AND NOT EXISTS (SELECT 1 FROM fairsched.jobs AS j
                            WHERE j.id = e.job_id
                              AND NOT (j.status IN ('succeeded', 'discarded') AND j.finished_at < finished_before)
                              AND NOT (j.status = 'dead' AND j.finished_at < dead_before));
        RETURN removed + more;
    END IF;
    WITH doomed AS MATERIALIZED (
        SELECT a.job_id, a.lease_token FROM fairsched.attempt_log AS a
         WHERE a.queue_name = queue AND a.finished_at < history_before
           AND NOT EXISTS (SELECT 1 FROM fairsched.jobs AS j
                            WHERE j.id = a.job_id
                              AND NOT (j.status IN ('succeeded', 'discarded') AND j.finished_at < finished_before)
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
                                  AND NOT (j.status IN ('succeeded', 'discarded') AND j.finished_at < finished_before)
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
REVOKE ALL ON FUNCTION fairsched.jobs_prune(text, text, integer, boolean) FROM PUBLIC;


-- == Roles ============================================================================

-- Workers and admins prune (the function checks everything); producers do not. As in
-- 001, grants wait for the roles when they are missing.
DO $$
BEGIN
    IF (SELECT count(*) FROM pg_roles WHERE rolname IN ('fairsched_worker', 'fairsched_admin')) < 2 THEN
        RAISE WARNING 'fairsched roles are missing: no grant of fairsched.jobs_prune made; '
                      'create them and run the roles block of migrations/002_retention.sql';
        RETURN;
    END IF;
    GRANT EXECUTE ON FUNCTION fairsched.jobs_prune(text, text, integer, boolean)
       TO fairsched_worker, fairsched_admin;
END
$$;
