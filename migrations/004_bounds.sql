-- Bounded settings: every number a queue or a tenant stores has a finite range, and the
-- database refuses what lies outside it, whoever writes (docs/configuration.md; the same
-- ranges as fairsched/bounds.py, which the API, the CLI and the config file check).
--
-- Until now lease_seconds, max_runtime_seconds, aging_interval_seconds and the backoffs
-- only had to be positive (or not negative), so 'Infinity', 'NaN' or 1e300 were stored:
-- then `now() + lease` and `started_at + max_runtime` overflow, and the recovery sweep
-- failed for every queue ("timestamp out of range") and heartbeats failed ("interval out
-- of range"). A weight only had to be positive, so 1e-308 was stored: a claim advances a
-- pass by cost / weight, and every claim of its queue overflowed. Caps had no upper bound.
--
-- Values that earlier code wrote outside the new ranges are first brought inside: 'NaN'
-- goes back to the column's default, anything else to the nearest bound. A tenant whose
-- weight was below the new floor had its pass raised by enormous strides; it restarts at
-- its queue's virtual time as the other tenants set it (the lowest active pass, else the
-- highest pass: where a tenant back from idle starts), so that it is neither shut out of
-- its queue for good nor overflows the quota arithmetic. Then
-- the old positivity checks give way to named range constraints.


-- == Out-of-range values written by earlier code =======================================

UPDATE fairsched.queues
   SET lease_seconds = CASE WHEN lease_seconds = 'NaN' THEN 30 ELSE least(lease_seconds, 604800) END,
       updated_at = now()
 WHERE NOT lease_seconds <= 604800;
UPDATE fairsched.queues
   SET max_runtime_seconds = CASE WHEN max_runtime_seconds = 'NaN' THEN 3600
                                  ELSE least(max_runtime_seconds, 604800) END,
       updated_at = now()
 WHERE NOT max_runtime_seconds <= 604800;
UPDATE fairsched.queues
   SET backoff_base_seconds = CASE WHEN backoff_base_seconds = 'NaN' THEN 1
                                   ELSE least(backoff_base_seconds, 86400) END,
       updated_at = now()
 WHERE NOT backoff_base_seconds <= 86400;
UPDATE fairsched.queues
   SET backoff_max_seconds = CASE WHEN backoff_max_seconds = 'NaN' THEN 300
                                  ELSE least(backoff_max_seconds, 86400) END,
       updated_at = now()
 WHERE NOT backoff_max_seconds <= 86400;
UPDATE fairsched.queues
   SET aging_interval_seconds = CASE WHEN aging_interval_seconds = 'NaN' THEN 60
                                     ELSE least(aging_interval_seconds, 2592000) END,
       updated_at = now()
 WHERE NOT aging_interval_seconds <= 2592000;
UPDATE fairsched.queues
   SET max_attempts = least(max_attempts, 1000), unknown_max_attempts = least(unknown_max_attempts, 1000),
       tenant_cap = least(tenant_cap, 1000000), updated_at = now()
 WHERE max_attempts > 1000 OR unknown_max_attempts > 1000 OR tenant_cap > 1000000;

UPDATE fairsched.tenant_shares AS t
   SET weight = 0.001,
       pass = least(t.pass, coalesce(
           (SELECT min(o.pass) FROM fairsched.tenant_shares AS o
             WHERE o.queue_name = t.queue_name AND o.weight >= 0.001 AND o.active),
           (SELECT max(o.pass) FROM fairsched.tenant_shares AS o
             WHERE o.queue_name = t.queue_name AND o.weight >= 0.001),
           0)),
       updated_at = now()
 WHERE t.weight < 0.001;
UPDATE fairsched.tenant_shares SET cap = 1000000, updated_at = now() WHERE cap > 1000000;


-- == Ranges ===========================================================================

-- 'NaN' sorts above every number in PostgreSQL and 'Infinity' above every finite one, so
-- an upper bound refuses both.
ALTER TABLE fairsched.queues
    DROP CONSTRAINT queues_lease_seconds_check,
    DROP CONSTRAINT queues_max_runtime_seconds_check,
    DROP CONSTRAINT queues_max_attempts_check,
    DROP CONSTRAINT queues_unknown_max_attempts_check,
    DROP CONSTRAINT queues_backoff_base_seconds_check,
    DROP CONSTRAINT queues_backoff_max_seconds_check,
    DROP CONSTRAINT queues_aging_interval_seconds_check,
    DROP CONSTRAINT queues_tenant_cap_check,
    -- seconds, more than 0 and at most 7 days
    ADD CONSTRAINT queues_lease_seconds_range CHECK (lease_seconds > 0 AND lease_seconds <= 604800),
    ADD CONSTRAINT queues_max_runtime_seconds_range
        CHECK (max_runtime_seconds > 0 AND max_runtime_seconds <= 604800),
    ADD CONSTRAINT queues_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 1000),
    ADD CONSTRAINT queues_unknown_max_attempts_range CHECK (unknown_max_attempts BETWEEN 1 AND 1000),
    -- seconds, 0 to 1 day
    ADD CONSTRAINT queues_backoff_base_seconds_range
        CHECK (backoff_base_seconds >= 0 AND backoff_base_seconds <= 86400),
    ADD CONSTRAINT queues_backoff_max_seconds_range
        CHECK (backoff_max_seconds >= 0 AND backoff_max_seconds <= 86400),
    -- seconds, more than 0 and at most 30 days
    ADD CONSTRAINT queues_aging_interval_seconds_range
        CHECK (aging_interval_seconds > 0 AND aging_interval_seconds <= 2592000),
    ADD CONSTRAINT queues_tenant_cap_range CHECK (tenant_cap BETWEEN 1 AND 1000000);

ALTER TABLE fairsched.tenant_shares
    DROP CONSTRAINT tenant_shares_weight_check,
    DROP CONSTRAINT tenant_shares_cap_check,
    ADD CONSTRAINT tenant_shares_weight_range CHECK (weight >= 0.001 AND weight <= 1000000),
    ADD CONSTRAINT tenant_shares_cap_range CHECK (cap BETWEEN 1 AND 1000000);
