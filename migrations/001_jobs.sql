-- The job table, its queues, and the durable record of every attempt.
-- Status is text with a CHECK (not an enum) so later migrations can add states.

CREATE TABLE fairsched.queues (
    name                  text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$'),
    lease_seconds         double precision NOT NULL DEFAULT 30 CHECK (lease_seconds > 0),
    max_runtime_seconds   double precision NOT NULL DEFAULT 3600 CHECK (max_runtime_seconds > 0),
    max_attempts          integer NOT NULL DEFAULT 8 CHECK (max_attempts > 0),
    unknown_max_attempts  integer NOT NULL DEFAULT 3 CHECK (unknown_max_attempts > 0),
    backoff_base_seconds  double precision NOT NULL DEFAULT 1 CHECK (backoff_base_seconds >= 0),
    backoff_max_seconds   double precision NOT NULL DEFAULT 300 CHECK (backoff_max_seconds >= 0),
    notify                boolean NOT NULL DEFAULT true,
    updated_at            timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE fairsched.jobs (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_name        text NOT NULL,
    tenant            text NOT NULL CHECK (length(tenant) BETWEEN 1 AND 128),
    payload           jsonb NOT NULL,
    status            text NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'running', 'succeeded', 'dead', 'discarded')),
    priority          integer NOT NULL DEFAULT 0,
    available_at      timestamptz NOT NULL DEFAULT now(),
    attempt_count     integer NOT NULL DEFAULT 0,
    max_attempts      integer NOT NULL CHECK (max_attempts > 0),
    lease_owner       text,
    lease_token       bigint NOT NULL DEFAULT 0,
    lease_expires_at  timestamptz,
    started_at        timestamptz,
    progress          jsonb,
    last_error_code   text,
    last_error        text,
    aggregate_key     text CHECK (length(aggregate_key) BETWEEN 1 AND 256),
    aggregate_seq     bigint,
    idempotency_key   text CHECK (length(idempotency_key) BETWEEN 1 AND 256),
    created_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    CHECK ((aggregate_key IS NULL) = (aggregate_seq IS NULL))
) WITH (fillfactor = 80);

-- Queue rows churn: vacuum early and often so dead index entries at the head
-- of the claim index are cleaned before they pile up.
ALTER TABLE fairsched.jobs SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

CREATE INDEX jobs_claimable_idx
    ON fairsched.jobs (queue_name, priority DESC, available_at, id)
    WHERE status = 'pending';

CREATE INDEX jobs_expired_lease_idx
    ON fairsched.jobs (lease_expires_at)
    WHERE status = 'running';

CREATE INDEX jobs_dead_idx
    ON fairsched.jobs (queue_name, finished_at)
    WHERE status = 'dead';

CREATE UNIQUE INDEX jobs_idempotency_key_idx
    ON fairsched.jobs (queue_name, tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- One row per finished attempt: who held it, with which token, and how it ended.
CREATE TABLE fairsched.attempts (
    job_id       bigint NOT NULL,
    attempt      integer NOT NULL,
    lease_token  bigint NOT NULL,
    lease_owner  text NOT NULL,
    claimed_at   timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL DEFAULT now(),
    outcome      text NOT NULL CHECK (outcome IN ('succeeded', 'failed', 'retrying', 'dead', 'expired', 'released')),
    error_code   text,
    error        text,
    PRIMARY KEY (job_id, lease_token)
);

-- Events outside an attempt: replays, discards, rejected stale completions.
CREATE TABLE fairsched.job_events (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id   bigint NOT NULL,
    at       timestamptz NOT NULL DEFAULT now(),
    kind     text NOT NULL,
    detail   jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX job_events_job_idx ON fairsched.job_events (job_id, at);
