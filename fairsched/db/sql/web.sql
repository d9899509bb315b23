-- name: web_aggregate_blocked
-- The dead job blocking one aggregate, if it is blocked (primary key lookup).
SELECT blocked_job_id
  FROM fairsched.aggregates
 WHERE queue_name = %(queue)s AND tenant = %(tenant)s AND aggregate_key = %(key)s
   AND blocked_job_id IS NOT NULL

-- name: web_aggregates_gap
-- The %(shown)s longest gap waits: per queue, its longest-waiting aggregates in gap_since
-- order (aggregates_gap_idx, at most %(shown)s each), merged; O(queues x shown).
SELECT g.queue_name, g.tenant, g.aggregate_key, g.next_seq, g.gap_since
  FROM fairsched.queues q
 CROSS JOIN LATERAL (
        SELECT a.queue_name, a.tenant, a.aggregate_key, a.next_seq, a.gap_since
          FROM fairsched.aggregates a
         WHERE a.queue_name = q.name AND a.gap_since IS NOT NULL
         ORDER BY a.gap_since
         LIMIT %(shown)s) g
 ORDER BY g.gap_since, g.queue_name, g.tenant, g.aggregate_key
 LIMIT %(shown)s
