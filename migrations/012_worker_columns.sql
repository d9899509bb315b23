-- Lease tokens a worker cannot read or guess (docs/security.md).
--
-- The fence (008_roles.sql) takes a lease's owner and token. Owners are no secret: they
-- name a host and a process, and the worker registry, the attempt record and the jobs'
-- rows show them. So the token must be one:
--   * a job's token starts at a random number (60 bits from gen_random_uuid, a strong
--     random source) and still grows by one at every claim: knowing how often a job was
--     claimed tells nothing of its token;
--   * fairsched_worker reads every column of the jobs and the attempt record except the
--     tokens, and job_events except its detail (a rejected stale completion records the
--     token it was presented, an earlier token of the same job). A claim still returns
--     its token to the claimer: that is how a worker learns the tokens of its own leases;
--   * what `job show` (`dead show`, the dashboard's job page) reads goes through the
--     views below, which run as their owner and show a token only to a caller that may
--     read fairsched.jobs.lease_token (the admin, the reader, the web role): the others
--     get NULL in its place, and an event's detail without its token.
-- The reader and web roles read tokens but call no lease function, nor does the producer
-- (which reads neither tokens nor owners): what they read they cannot present. A login
-- role that is a worker must not also be one of them.


-- == Random token starts ================================================================

-- 60 random bits (the last 15 hex digits of a version 4 UUID are all random): room for
-- 2^63 - 2^60 claims of one job above it.
CREATE FUNCTION fairsched.lease_token_start() RETURNS bigint
    LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$ SELECT ('x' || right(replace(pg_catalog.gen_random_uuid()::text, '-', ''), 15))::bit(60)::bigint $$;

ALTER TABLE fairsched.jobs ALTER COLUMN lease_token SET DEFAULT fairsched.lease_token_start();

-- Jobs that may be claimed again (pending, waiting, and dead ones a replay brings back)
-- move their token up by a random start: a token only grows, so the attempt record stays
-- in claim order. A running job keeps its lease (its worker holds the token) and counts
-- on from its old token until it finishes (docs/operations.md, upgrading to 012).
UPDATE fairsched.jobs SET lease_token = lease_token + fairsched.lease_token_start()
 WHERE status IN ('waiting', 'pending', 'dead');


-- == What `job show` reads ==============================================================

-- Whether the caller (current_user: a view's functions run as the caller) may read the
-- jobs' lease tokens.
CREATE FUNCTION fairsched.lease_tokens_readable() RETURNS boolean
    LANGUAGE sql STABLE
AS $$ SELECT pg_catalog.has_column_privilege('fairsched.jobs', 'lease_token', 'SELECT') $$;

-- Every attempt of every job (001), its token shown only to who may read tokens.
CREATE OR REPLACE VIEW fairsched.attempts AS
SELECT a.job_id, a.attempt,
       CASE WHEN (SELECT fairsched.lease_tokens_readable()) THEN a.lease_token END AS lease_token,
       a.lease_owner, a.claimed_at, a.finished_at, a.outcome, a.error_code, a.error
  FROM fairsched.attempt_log AS a
UNION ALL
SELECT j.id, j.attempt_count,
       CASE WHEN (SELECT fairsched.lease_tokens_readable()) THEN j.lease_token END,
       j.lease_owner, j.started_at, j.finished_at, 'succeeded'::text, NULL::text, NULL::text
  FROM fairsched.jobs AS j
 WHERE j.status = 'succeeded';

-- Each job's current token, shown only to who may read tokens.
CREATE VIEW fairsched.lease_tokens AS
SELECT j.id AS job_id,
       CASE WHEN (SELECT fairsched.lease_tokens_readable()) THEN j.lease_token END AS lease_token
  FROM fairsched.jobs AS j;

-- Every recorded attempt and event of every job (queries.sql, job_history); an event's
-- detail without its token for who may not read tokens.
CREATE VIEW fairsched.job_history AS
SELECT a.job_id, a.finished_at AS at, 'attempt' AS kind,
       jsonb_build_object('attempt', a.attempt, 'token', a.lease_token, 'owner', a.lease_owner,
                          'claimed_at', a.claimed_at, 'outcome', a.outcome,
                          'error_code', a.error_code, 'error', a.error) AS detail
  FROM fairsched.attempts AS a
UNION ALL
SELECT e.job_id, e.at, e.kind,
       CASE WHEN (SELECT fairsched.lease_tokens_readable()) THEN e.detail ELSE e.detail - 'token' END
  FROM fairsched.job_events AS e;


-- == Privileges ==========================================================================

-- Run after 001's roles block and 008's whenever they run again (001 grants SELECT on
-- whole tables). Revoking a table's SELECT revokes its columns' too, so this block may
-- run any number of times; the columns granted are every column but the hidden ones.
DO $$
DECLARE
    t record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fairsched_worker') THEN
        RAISE WARNING 'fairsched roles are missing: no grants of 012 made; create them and run '
                      'the roles blocks of migrations/001_baseline.sql, 008_roles.sql and '
                      '012_worker_columns.sql';
        RETURN;
    END IF;
    FOR t IN SELECT h.rel, h.hidden FROM (VALUES ('jobs', 'lease_token'), ('attempt_log', 'lease_token'),
                                               ('job_events', 'detail')) AS h(rel, hidden) LOOP
        EXECUTE format('REVOKE SELECT ON fairsched.%I FROM fairsched_worker', t.rel);
        EXECUTE format('GRANT SELECT (%s) ON fairsched.%I TO fairsched_worker',
                       (SELECT string_agg(quote_ident(c.attname), ', ' ORDER BY c.attnum)
                          FROM pg_attribute AS c
                         WHERE c.attrelid = format('fairsched.%I', t.rel)::regclass
                           AND c.attnum > 0 AND NOT c.attisdropped AND c.attname <> t.hidden),
                       t.rel);
    END LOOP;
    GRANT SELECT ON fairsched.attempts, fairsched.lease_tokens, fairsched.job_history TO fairsched_worker;
END
$$;
