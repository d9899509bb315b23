-- Fairness policies: each queue's policy stack and parameters, per-tenant share
-- state (weighted), per-aggregate order state (serial), the aging key, and the
-- 'waiting' status for jobs queued behind their aggregate (outside every claim index).

ALTER TABLE fairsched.queues
    ADD COLUMN policies text[] NOT NULL DEFAULT '{fifo}'
        CHECK (cardinality(policies) BETWEEN 1 AND 8),
    ADD COLUMN aging_interval_seconds double precision NOT NULL DEFAULT 60
        CHECK (aging_interval_seconds > 0),
    ADD COLUMN charge text NOT NULL DEFAULT 'count' CHECK (charge IN ('count', 'runtime')),
    ADD COLUMN tenant_cap integer CHECK (tenant_cap > 0),
    ADD COLUMN serial_gap text NOT NULL DEFAULT 'strict' CHECK (serial_gap IN ('strict', 'lowest')),
    ADD COLUMN serial_poison text NOT NULL DEFAULT 'block' CHECK (serial_poison IN ('block', 'skip')),
    ADD COLUMN policy_params jsonb NOT NULL DEFAULT '{}';

ALTER TABLE fairsched.jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE fairsched.jobs ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('waiting', 'pending', 'running', 'succeeded', 'dead', 'discarded'));

-- Aging: enqueue time in epoch seconds minus priority × the queue's aging interval.
ALTER TABLE fairsched.jobs ADD COLUMN aging_key double precision;
-- Serial: true when the job was enqueued on a queue whose stack holds 'serial'.
ALTER TABLE fairsched.jobs ADD COLUMN serial boolean NOT NULL DEFAULT false;

CREATE INDEX jobs_aging_idx
    ON fairsched.jobs (queue_name, aging_key, id)
    WHERE status = 'pending';

CREATE INDEX jobs_tenant_fifo_idx
    ON fairsched.jobs (queue_name, tenant, priority DESC, available_at, id)
    WHERE status = 'pending';

CREATE INDEX jobs_tenant_aging_idx
    ON fairsched.jobs (queue_name, tenant, aging_key, id)
    WHERE status = 'pending';

-- The serial mutex: one pending-or-running job per aggregate.
CREATE UNIQUE INDEX jobs_aggregate_head_idx
    ON fairsched.jobs (queue_name, tenant, aggregate_key)
    WHERE serial AND status IN ('pending', 'running');

CREATE UNIQUE INDEX jobs_aggregate_seq_idx
    ON fairsched.jobs (queue_name, tenant, aggregate_key, aggregate_seq)
    WHERE serial;

CREATE INDEX jobs_aggregate_waiting_idx
    ON fairsched.jobs (queue_name, tenant, aggregate_key, aggregate_seq)
    WHERE status = 'waiting';

CREATE INDEX jobs_tenant_running_idx
    ON fairsched.jobs (queue_name, tenant)
    WHERE status = 'running';

-- Weighted fair share: one row per (queue, tenant). `pass` is the tenant's
-- virtual time (stride scheduling); `active` means it may have pending jobs,
-- claimable from `ready_at` on. Only active rows are in the selection index.
CREATE TABLE fairsched.tenant_shares (
    queue_name        text NOT NULL,
    tenant            text NOT NULL CHECK (length(tenant) BETWEEN 1 AND 128),
    weight            double precision NOT NULL DEFAULT 1 CHECK (weight > 0 AND weight <= 1000000),
    cap               integer CHECK (cap > 0),
    pass              double precision NOT NULL DEFAULT 0,
    running           integer NOT NULL DEFAULT 0,
    active            boolean NOT NULL DEFAULT false,
    ready_at          timestamptz NOT NULL DEFAULT now(),
    runtime_estimate  double precision NOT NULL DEFAULT 1 CHECK (runtime_estimate > 0),
    claimed_total     bigint NOT NULL DEFAULT 0,
    charged_total     double precision NOT NULL DEFAULT 0,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, tenant)
) WITH (fillfactor = 50);

ALTER TABLE fairsched.tenant_shares SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);

CREATE INDEX tenant_shares_pass_idx
    ON fairsched.tenant_shares (queue_name, pass, tenant)
    WHERE active;

-- Serial aggregates: the next sequence number allowed to run, the dead job that
-- blocks the aggregate (poison mode 'block'), and since when it waits on a gap.
CREATE TABLE fairsched.aggregates (
    queue_name      text NOT NULL,
    tenant          text NOT NULL,
    aggregate_key   text NOT NULL,
    next_seq        bigint NOT NULL,
    blocked_job_id  bigint,
    gap_since       timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, tenant, aggregate_key)
);

CREATE INDEX aggregates_blocked_idx
    ON fairsched.aggregates (queue_name) WHERE blocked_job_id IS NOT NULL;
CREATE INDEX aggregates_gap_idx
    ON fairsched.aggregates (queue_name, gap_since) WHERE gap_since IS NOT NULL;

-- Inactive tenants whose delayed work comes due: the sweeper wakes them.
CREATE INDEX tenant_shares_wake_idx
    ON fairsched.tenant_shares (ready_at) WHERE NOT active;
