-- name: prune_queues
-- Every declared queue's name, in order (the prune visits them one by one).
SELECT name FROM fairsched.queues ORDER BY name

-- name: jobs_prune
-- Remove one batch of one kind (finished, dead, history) past a queue's retention;
-- NULL when another prune holds the lock (see fairsched.jobs_prune in 002_retention.sql).
SELECT fairsched.jobs_prune(%(queue)s, %(kind)s, %(batch)s, false)

-- name: jobs_prune_count
-- How many rows of one kind are past a queue's retention now (the dry run).
SELECT fairsched.jobs_prune(%(queue)s, %(kind)s, 1, true)

-- name: jobs_vacuum_due
-- The jobs table's live rows as the planner last counted them, and whether this
-- session may VACUUM it (its owner or a superuser; on PostgreSQL 17, MAINTAIN).
SELECT greatest(c.reltuples, 0)::bigint,
       r.rolsuper OR pg_has_role(current_user, c.relowner, 'USAGE')
       OR CASE WHEN current_setting('server_version_num')::int >= 170000
               THEN has_table_privilege(c.oid, 'MAINTAIN') ELSE false END
  FROM pg_class AS c, pg_roles AS r
 WHERE c.oid = 'fairsched.jobs'::regclass AND r.rolname = current_user

-- name: jobs_vacuum
-- Make the space of pruned rows reusable now; skipped while another VACUUM holds the table.
VACUUM (SKIP_LOCKED) fairsched.jobs
