WITH q AS (
    SELECT qs.lease_seconds, qs.max_runtime_seconds, qs.policy_params AS params,
           coalesce("h"."order_rank", -2147483647) AS "order_rank",
           coalesce("h"."order_available_at", '-infinity') AS "order_available_at",
           coalesce("h"."order_id", 0) AS "order_id"
      FROM fairsched.queues AS qs
      LEFT JOIN fairsched.claim_heads AS h ON h.queue_name = qs.name
     WHERE qs.name = %(queue)s
), scanned AS MATERIALIZED (
    SELECT j.id, j.tenant
      FROM fairsched.jobs AS j
     WHERE j.queue_name = %(queue)s AND j.status = 'pending' AND j.available_at <= now()
       AND ((- "j"."priority"), "j"."available_at", "j"."id") >= (SELECT "q"."order_rank", "q"."order_available_at", "q"."order_id" FROM q)
       AND coalesce("fairsched"."ratelimit_budget"(%(queue)s, j.tenant) >= 1, true)
     ORDER BY (- "j"."priority"), "j"."available_at", "j"."id"
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), admitted AS MATERIALIZED (
    SELECT a.tenant, a.admitted
      FROM (SELECT array_agg(d.tenant ORDER BY d.tenant) AS tenants,
                   array_agg(d.n ORDER BY d.tenant) AS wanted
              FROM (SELECT s.tenant, count(*)::int AS n FROM scanned AS s GROUP BY s.tenant) AS d) AS d
     CROSS JOIN LATERAL "fairsched"."ratelimit_admit"(%(queue)s, d.tenants, d.wanted) AS a(tenant, admitted)
     WHERE d.tenants IS NOT NULL
), candidate AS MATERIALIZED (
    SELECT s.id, s.tenant
      FROM (SELECT s.id, s.tenant, s.n, row_number() OVER (PARTITION BY s.tenant ORDER BY s.n) AS k
              FROM (SELECT s.id, s.tenant, row_number() OVER () AS n FROM scanned AS s) AS s) AS s
      LEFT JOIN admitted AS a USING (tenant)
     WHERE a.tenant IS NULL OR s.k <= a.admitted
     ORDER BY s.n
), moved AS (
    UPDATE fairsched.jobs AS j
       SET status = 'running',
       attempt_count = j.attempt_count + 1,
       lease_owner = %(owner)s,
       lease_token = j.lease_token + 1,
       started_at = now(),
       progress = NULL,
       lease_expires_at = now() + make_interval(
           secs => least(coalesce(%(lease_seconds)s::float8, q.lease_seconds), q.max_runtime_seconds)),
           share_counted = false
      FROM q
     WHERE j.id = ANY (ARRAY(SELECT c.id FROM candidate AS c))
    RETURNING j.id, j.queue_name AS queue, j.lease_token AS token, j.lease_owner AS owner,
          j.lease_expires_at AS expires_at, j.tenant, j.payload, j.attempt_count AS attempt,
          j.max_attempts,
          coalesce(j.idempotency_key, 'fairsched-job-' || j.id) AS idempotency_key,
          j.priority, j.aggregate_key, j.aggregate_seq, j.created_at, j.started_at,
          coalesce(%(lease_seconds)s::float8, q.lease_seconds) AS lease_seconds, j.trace_context
)
SELECT m.*
  FROM unnest(ARRAY(SELECT c.id FROM candidate AS c)) WITH ORDINALITY AS c(id, n)
  JOIN moved AS m USING (id)
 ORDER BY c.n
