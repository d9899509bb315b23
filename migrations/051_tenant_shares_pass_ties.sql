-- Ties at the same pass go to the tenant claimed least so far, then by name
-- (fairsched/claim.py). A tenant that comes back with new work rejoins at the queue's
-- lowest active pass, level with the tenant that has kept the queue busy; by name alone
-- the same tenants lost every such tie, and a small tenant's job beside a flood waited
-- for the flood's claim first. The claim reads the lowest-pass tenants in this index's
-- order. claimed_total changes only with pass, so the index costs no extra update.
DROP INDEX fairsched.tenant_shares_pass_idx;
CREATE INDEX tenant_shares_pass_idx
    ON fairsched.tenant_shares (queue_name, pass, claimed_total, tenant)
    WHERE active;
