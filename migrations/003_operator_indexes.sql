-- Operator queries: indexes that keep `fairsched tenant show` at O(priority levels), never
-- O(jobs) (docs/operations.md, "What a scrape costs"; DESIGN §9).
--
-- Every other operator query walks an index of 001 or 002: the exporter and KEDA count
-- claimable work per priority level in jobs_claimable_idx, the per-tenant ages walk
-- jobs_tenant_fifo_idx one (tenant, level) at a time, `simulate --from-queue` finds its
-- window by bisecting the primary key. Only a tenant's dead jobs had no index of their
-- own: jobs_dead_idx has no tenant, so counting one tenant's dead jobs read every dead job
-- of the queue, and dead jobs are kept for weeks (dead_retention_seconds).


-- == Dead jobs per tenant =============================================================

-- A tenant's dead jobs on a queue, oldest first. Only jobs entering dead (rare) write to
-- it: claims and completions never do.
CREATE INDEX jobs_tenant_dead_idx
    ON fairsched.jobs (queue_name, tenant, finished_at)
    WHERE status = 'dead';
