-- Which queues have capped tenants: a weighted claim reads it to choose its order
-- (fairsched/claim.py). With caps, the claim charges the share rows first and checks
-- each cap on the latest row version; without, it moves the jobs first and charges
-- last, holding the share rows only for the charge and its commit.
CREATE INDEX tenant_shares_capped_idx
    ON fairsched.tenant_shares (queue_name)
    WHERE cap IS NOT NULL;
