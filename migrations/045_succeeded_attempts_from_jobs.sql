-- A succeeded job's row is the record of its last attempt: attempt number, token, owner,
-- claimed (started_at) and finished at; and a succeeded job never changes again. So a
-- completion no longer writes an attempt row of its own (a heap row and an index entry
-- per job: half of a completion's WAL records). `fairsched.attempts` becomes a view over
-- the recorded attempts (`fairsched.attempt_log`: failures, retries, expiries, releases)
-- and the succeeded jobs, with the same columns as before.
ALTER TABLE fairsched.attempts RENAME TO attempt_log;
ALTER INDEX fairsched.attempts_pkey RENAME TO attempt_log_pkey;

-- Success rows written before this migration are their jobs' rows again.
DELETE FROM fairsched.attempt_log AS a
 USING fairsched.jobs AS j
 WHERE a.outcome = 'succeeded' AND j.id = a.job_id AND j.status = 'succeeded'
   AND j.lease_token = a.lease_token;

CREATE VIEW fairsched.attempts AS
SELECT a.job_id, a.attempt, a.lease_token, a.lease_owner, a.claimed_at, a.finished_at,
       a.outcome, a.error_code, a.error
  FROM fairsched.attempt_log AS a
UNION ALL
SELECT j.id, j.attempt_count, j.lease_token, j.lease_owner, j.started_at, j.finished_at,
       'succeeded'::text, NULL::text, NULL::text
  FROM fairsched.jobs AS j
 WHERE j.status = 'succeeded';

-- The audit trail stays append-only: nothing (no role, no statement) rewrites the
-- record a succeeded job holds. Checked per updated row before the update, in C
-- (the WHEN clause); the function only runs to refuse.
CREATE FUNCTION fairsched.jobs_succeeded_unchanged() RETURNS trigger
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'job % succeeded: its row records its last attempt and does not change', OLD.id
        USING ERRCODE = 'object_not_in_prerequisite_state';
END
$$;

CREATE TRIGGER jobs_succeeded_unchanged
    BEFORE UPDATE ON fairsched.jobs
    FOR EACH ROW
    WHEN (OLD.status = 'succeeded'
          AND (NEW.status, NEW.attempt_count, NEW.lease_token, NEW.lease_owner, NEW.started_at,
               NEW.finished_at)
              IS DISTINCT FROM
              (OLD.status, OLD.attempt_count, OLD.lease_token, OLD.lease_owner, OLD.started_at,
               OLD.finished_at))
    EXECUTE FUNCTION fairsched.jobs_succeeded_unchanged();

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fairsched_worker') THEN
        -- INSERT as 040_roles.sql grants it on `attempts`, so that replaying those grants
        -- changes nothing; the view takes no inserts (workers write to attempt_log).
        GRANT SELECT, INSERT ON fairsched.attempts TO fairsched_worker;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fairsched_admin') THEN
        GRANT ALL ON fairsched.attempts TO fairsched_admin;
    END IF;
END
$$;
