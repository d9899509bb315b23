WITH q AS (
    SELECT qs.lease_seconds, qs.max_runtime_seconds, qs.policy_params AS params,
           qs.charge, qs.tenant_cap,
           qs.tenant_cap IS NOT NULL OR EXISTS (
               SELECT FROM fairsched.tenant_shares AS s
                WHERE s.queue_name = qs.name AND s.cap IS NOT NULL) AS capped,
           coalesce(f.pass, '-Infinity') AS pass_floor,
           coalesce("h"."order_rank", -2147483647) AS "order_rank",
           coalesce("h"."order_available_at", '-infinity') AS "order_available_at",
           coalesce("h"."order_id", 0) AS "order_id"
      FROM fairsched.queues AS qs
      LEFT JOIN fairsched.claim_heads AS h ON h.queue_name = qs.name
      LEFT JOIN fairsched.pass_floors AS f ON f.queue_name = qs.name
     WHERE qs.name = %(queue)s
), tenants AS MATERIALIZED (
    SELECT t.tenant, t.weight, t.pass, t.claimed_total,
           CASE WHEN q.charge = 'runtime' THEN t.runtime_estimate ELSE 1 END AS cost,
           least(%(limit)s, coalesce(lim.cap - lim.running, %(limit)s)) AS room
      FROM fairsched.tenant_shares AS t
     CROSS JOIN q
     CROSS JOIN LATERAL (
        SELECT coalesce(t.cap, q.tenant_cap) AS cap,
               CASE WHEN coalesce(t.cap, q.tenant_cap) IS NOT NULL THEN (t.running - fairsched.tenant_released(t.queue_name, t.tenant)) END AS running
     ) AS lim
     WHERE t.queue_name = %(queue)s AND t.active AND t.pass >= (SELECT q.pass_floor FROM q)
       AND (lim.cap IS NULL OR lim.running < lim.cap)
     ORDER BY t.pass, t.claimed_total, t.tenant
     LIMIT %(limit)s
), quota AS MATERIALIZED (
    SELECT s.tenant, count(*)::int AS n
      FROM (SELECT t.tenant
              FROM tenants AS t
             CROSS JOIN (SELECT greatest(max(u.pass),
                                         (%(limit)s + count(*) + sum(u.pass * u.weight / u.cost))
                                         / sum(u.weight / u.cost)) AS tag
                           FROM tenants AS u
                          WHERE u.room >= %(limit)s) AS bound
             CROSS JOIN LATERAL generate_series(1, CASE
                    WHEN bound.tag IS NULL THEN t.room
                    ELSE least(t.room, greatest(ceil((bound.tag - t.pass) * t.weight / t.cost), 0) + 1)::int
                    END) AS k(k)
             ORDER BY t.pass + k.k * t.cost / t.weight, t.claimed_total, t.tenant
             LIMIT %(limit)s) AS s
     GROUP BY s.tenant
), candidate AS MATERIALIZED (
    SELECT c.id, qt.tenant
      FROM quota AS qt
     CROSS JOIN LATERAL (
        SELECT j.id
          FROM fairsched.jobs AS j
         WHERE j.queue_name = %(queue)s AND j.tenant = qt.tenant
           AND j.status = 'pending' AND j.available_at <= now()
       AND ((- "j"."priority"), "j"."available_at", "j"."id") >= (SELECT "q"."order_rank", "q"."order_available_at", "q"."order_id" FROM q)
         ORDER BY (- "j"."priority"), "j"."available_at", "j"."id"
         LIMIT qt.n
           FOR UPDATE SKIP LOCKED) AS c
), locked AS MATERIALIZED (
    SELECT c.tenant, c.n, c.ids
      FROM (SELECT tenant, count(*)::int AS n, array_agg(id) AS ids
              FROM candidate GROUP BY tenant ORDER BY tenant) AS c
     CROSS JOIN LATERAL (
        SELECT
          FROM fairsched.tenant_shares AS t
         WHERE t.queue_name = %(queue)s AND t.tenant = c.tenant
           FOR NO KEY UPDATE) AS l
     WHERE (SELECT q.capped FROM q)
), charged AS (
    UPDATE fairsched.tenant_shares AS t
       SET pass = t.pass + c.n * tn.cost / t.weight,
           running = t.running + c.n,
           claimed_total = t.claimed_total + c.n,
           charged_total = t.charged_total + c.n * tn.cost,
           updated_at = now()
      FROM locked AS c JOIN tenants AS tn USING (tenant), q
     WHERE t.queue_name = %(queue)s AND t.tenant = ANY (ARRAY(SELECT l.tenant FROM locked AS l))
       AND t.tenant = c.tenant
       AND (coalesce(t.cap, q.tenant_cap) IS NULL
            OR (t.running - fairsched.tenant_released(t.queue_name, t.tenant)) + c.n <= coalesce(t.cap, q.tenant_cap))
    RETURNING c.ids
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
           share_counted = true
      FROM q
     WHERE j.id = ANY (ARRAY(SELECT unnest(c.ids) FROM charged AS c
                             UNION ALL
                             SELECT c.id FROM candidate AS c WHERE NOT (SELECT q.capped FROM q)))
    RETURNING j.id, j.queue_name AS queue, j.lease_token AS token, j.lease_owner AS owner,
          j.lease_expires_at AS expires_at, j.tenant, j.payload, j.attempt_count AS attempt,
          j.max_attempts,
          coalesce(j.idempotency_key, 'fairsched-job-' || j.id) AS idempotency_key,
          j.priority, j.aggregate_key, j.aggregate_seq, j.created_at, j.started_at,
          coalesce(%(lease_seconds)s::float8, q.lease_seconds) AS lease_seconds, j.trace_context
), charged_last AS (
    UPDATE fairsched.tenant_shares AS t
       SET pass = t.pass + c.n * tn.cost / t.weight,
           running = t.running + c.n,
           claimed_total = t.claimed_total + c.n,
           charged_total = t.charged_total + c.n * tn.cost,
           updated_at = now()
      FROM (SELECT m.tenant, count(*)::int AS n FROM moved AS m GROUP BY m.tenant ORDER BY m.tenant) AS c
      JOIN tenants AS tn USING (tenant)
     WHERE NOT (SELECT q.capped FROM q)
       AND t.queue_name = %(queue)s AND t.tenant = ANY (ARRAY(SELECT m.tenant FROM moved AS m))
       AND t.tenant = c.tenant
)
SELECT m.* FROM moved AS m
