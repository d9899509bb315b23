-- Planner statistics that never take the jobs table for one tenant's. A tenant-first
-- claim scans each chosen tenant's pending jobs on its generic plan, which cannot see
-- the tenant: it estimates "a tenant's pending jobs" as the pending jobs divided by the
-- tenant column's distinct values. When ANALYZE samples a backlog that one flooding
-- tenant fills (its jobs queued first, or a million of them beside a few hundred of
-- the others'), it counts one distinct tenant. A tenant's jobs are then all the
-- queue's pending jobs, the queue-wide index serves the scan as cheaply as the
-- tenant's own, and the plan takes it: every other tenant's scan then walks the
-- flood's whole backlog, filtering on the tenant, on every claim. Measured: 1,209
-- buffers for a claim of 4 beside a 15k flood instead of 12, and the flood's
-- throughput halved while small tenants ran beside it.
--
-- The estimate is fixed at 100 distinct tenants, whatever ANALYZE samples: any count
-- of two or more makes the tenant's own index cheaper for a tenant's scan, and a
-- multi-tenant table holds more than one. The most common values ANALYZE finds are
-- still sampled, for the plans that see a tenant's name.
ALTER TABLE fairsched.jobs ALTER COLUMN tenant SET (n_distinct = 100);
ANALYZE fairsched.jobs (tenant);
