SCHEMA fairsched
  GRANT USAGE ON SCHEMA fairsched TO fairsched_admin
  GRANT USAGE ON SCHEMA fairsched TO fairsched_producer
  GRANT USAGE ON SCHEMA fairsched TO fairsched_reader
  GRANT USAGE ON SCHEMA fairsched TO fairsched_worker

ROLE fairsched_admin NOLOGIN

ROLE fairsched_producer NOLOGIN

ROLE fairsched_reader NOLOGIN

ROLE fairsched_web NOLOGIN

ROLE fairsched_worker NOLOGIN

SEQUENCE fairsched.admin_events_id_seq AS bigint START 1 INCREMENT 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1
  OWNED BY fairsched.admin_events.id (identity)
  GRANT ALL ON SEQUENCE fairsched.admin_events_id_seq TO fairsched_admin

SEQUENCE fairsched.job_events_id_seq AS bigint START 1 INCREMENT 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1
  OWNED BY fairsched.job_events.id (identity)
  GRANT ALL ON SEQUENCE fairsched.job_events_id_seq TO fairsched_admin

SEQUENCE fairsched.jobs_id_seq AS bigint START 1 INCREMENT 1 MINVALUE 1 MAXVALUE 9223372036854775807 CACHE 1
  OWNED BY fairsched.jobs.id (identity)
  GRANT ALL ON SEQUENCE fairsched.jobs_id_seq TO fairsched_admin

TABLE fairsched.admin_events
  COLUMN id bigint NOT NULL GENERATED ALWAYS AS IDENTITY
  COLUMN at timestamp with time zone NOT NULL DEFAULT now()
  COLUMN by text NOT NULL
  COLUMN action text NOT NULL
  COLUMN queue_name text
  COLUMN tenant text
  COLUMN detail jsonb NOT NULL DEFAULT '{}'::jsonb
  CONSTRAINT admin_events_action_check CHECK (((length(action) >= 1) AND (length(action) <= 64)))
  CONSTRAINT admin_events_by_check CHECK (((length(by) >= 1) AND (length(by) <= 128)))
  CONSTRAINT admin_events_pkey PRIMARY KEY (id)
  INDEX CREATE UNIQUE INDEX admin_events_pkey ON fairsched.admin_events USING btree (id)
  INDEX CREATE INDEX admin_events_queue_idx ON fairsched.admin_events USING btree (queue_name, at)
  GRANT ALL ON TABLE fairsched.admin_events TO fairsched_admin
  GRANT SELECT ON TABLE fairsched.admin_events TO fairsched_reader
  GRANT SELECT ON TABLE fairsched.admin_events TO fairsched_worker

TABLE fairsched.aggregates
  COLUMN queue_name text NOT NULL
  COLUMN tenant text NOT NULL
  COLUMN aggregate_key text NOT NULL
  COLUMN next_seq bigint NOT NULL
  COLUMN blocked_job_id bigint
  COLUMN gap_since timestamp with time zone
  COLUMN updated_at timestamp with time zone NOT NULL DEFAULT now()
  CONSTRAINT aggregates_pkey PRIMARY KEY (queue_name, tenant, aggregate_key)
  INDEX CREATE INDEX aggregates_blocked_idx ON fairsched.aggregates USING btree (queue_name) WHERE (blocked_job_id IS NOT NULL)
  INDEX CREATE INDEX aggregates_gap_idx ON fairsched.aggregates USING btree (queue_name, gap_since) WHERE (gap_since IS NOT NULL)
  INDEX CREATE UNIQUE INDEX aggregates_pkey ON fairsched.aggregates USING btree (queue_name, tenant, aggregate_key)
  GRANT ALL ON TABLE fairsched.aggregates TO fairsched_admin
  GRANT SELECT ON TABLE fairsched.aggregates TO fairsched_producer
  GRANT SELECT ON TABLE fairsched.aggregates TO fairsched_reader
  GRANT SELECT ON TABLE fairsched.aggregates TO fairsched_worker
  COMMENT ON TABLE fairsched.aggregates IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)'

TABLE fairsched.attempt_log
  COLUMN job_id bigint NOT NULL
  COLUMN attempt integer NOT NULL
  COLUMN lease_token bigint NOT NULL
  COLUMN lease_owner text NOT NULL
  COLUMN claimed_at timestamp with time zone NOT NULL
  COLUMN finished_at timestamp with time zone NOT NULL DEFAULT now()
  COLUMN outcome text NOT NULL
  COLUMN error_code text
  COLUMN error text
  COLUMN queue_name text
  CONSTRAINT attempt_log_pkey PRIMARY KEY (job_id, lease_token)
  CONSTRAINT attempts_outcome_check CHECK ((outcome = ANY (ARRAY['succeeded'::text, 'failed'::text, 'retrying'::text, 'dead'::text, 'expired'::text, 'released'::text, 'cancelled'::text])))
  INDEX CREATE UNIQUE INDEX attempt_log_pkey ON fairsched.attempt_log USING btree (job_id, lease_token)
  INDEX CREATE INDEX attempt_log_retention_idx ON fairsched.attempt_log USING btree (queue_name, finished_at)
  TRIGGER CREATE TRIGGER attempt_log_queue_name BEFORE INSERT ON fairsched.attempt_log FOR EACH ROW EXECUTE FUNCTION fairsched.history_queue_name()
  GRANT ALL ON TABLE fairsched.attempt_log TO fairsched_admin
  GRANT SELECT ON TABLE fairsched.attempt_log TO fairsched_reader
  GRANT SELECT (job_id, attempt, lease_owner, claimed_at, finished_at, outcome, error_code, error, queue_name) ON TABLE fairsched.attempt_log TO fairsched_worker

VIEW fairsched.attempts
  COLUMN job_id bigint
  COLUMN attempt integer
  COLUMN lease_token bigint
  COLUMN lease_owner text
  COLUMN claimed_at timestamp with time zone
  COLUMN finished_at timestamp with time zone
  COLUMN outcome text
  COLUMN error_code text
  COLUMN error text
  AS
     SELECT a.job_id,
        a.attempt,
            CASE
                WHEN ( SELECT fairsched.lease_tokens_readable() AS lease_tokens_readable) THEN a.lease_token
                ELSE NULL::bigint
            END AS lease_token,
        a.lease_owner,
        a.claimed_at,
        a.finished_at,
        a.outcome,
        a.error_code,
        a.error
       FROM fairsched.attempt_log a
    UNION ALL
     SELECT j.id AS job_id,
        j.attempt_count AS attempt,
            CASE
                WHEN ( SELECT fairsched.lease_tokens_readable() AS lease_tokens_readable) THEN j.lease_token
                ELSE NULL::bigint
            END AS lease_token,
        j.lease_owner,
        j.started_at AS claimed_at,
        j.finished_at,
        'succeeded'::text AS outcome,
        NULL::text AS error_code,
        NULL::text AS error
       FROM fairsched.jobs j
      WHERE j.status = 'succeeded'::text;
  GRANT ALL ON TABLE fairsched.attempts TO fairsched_admin
  GRANT SELECT ON TABLE fairsched.attempts TO fairsched_reader
  GRANT SELECT ON TABLE fairsched.attempts TO fairsched_worker

TABLE fairsched.claim_heads
  COLUMN queue_name text NOT NULL
  COLUMN order_rank integer NOT NULL DEFAULT '-2147483647'::integer
  COLUMN order_available_at timestamp with time zone NOT NULL DEFAULT '-infinity'::timestamp with time zone
  COLUMN order_id bigint NOT NULL DEFAULT 0
  COLUMN aging_key double precision NOT NULL DEFAULT '-Infinity'::double precision
  COLUMN aging_id bigint NOT NULL DEFAULT 0
  COLUMN refreshed_at timestamp with time zone
  WITH (fillfactor=50)
  CONSTRAINT claim_heads_pkey PRIMARY KEY (queue_name)
  INDEX CREATE UNIQUE INDEX claim_heads_pkey ON fairsched.claim_heads USING btree (queue_name)
  GRANT ALL ON TABLE fairsched.claim_heads TO fairsched_admin
  GRANT SELECT ON TABLE fairsched.claim_heads TO fairsched_producer
  GRANT SELECT ON TABLE fairsched.claim_heads TO fairsched_reader
  GRANT SELECT ON TABLE fairsched.claim_heads TO fairsched_worker
  COMMENT ON COLUMN fairsched.claim_heads.aging_key IS 'aging policy: a key at or below every pending job''s aging_key on the queue'
  COMMENT ON COLUMN fairsched.claim_heads.aging_id IS 'aging policy: with aging_key, at or below every pending job''s (aging_key, id)'

TYPE fairsched.claimed
  COLUMN id bigint
  COLUMN queue text
  COLUMN token bigint
  COLUMN owner text
  COLUMN expires_at timestamp with time zone
  COLUMN tenant text
  COLUMN payload jsonb
  COLUMN attempt integer
  COLUMN max_attempts integer
  COLUMN idempotency_key text
  COLUMN priority integer
  COLUMN aggregate_key text
  COLUMN aggregate_seq bigint
  COLUMN created_at timestamp with time zone
  COLUMN started_at timestamp with time zone
  COLUMN lease_seconds double precision
  COLUMN trace_context jsonb

TABLE fairsched.job_events
  COLUMN id bigint NOT NULL GENERATED ALWAYS AS IDENTITY
  COLUMN job_id bigint NOT NULL
  COLUMN at timestamp with time zone NOT NULL DEFAULT now()
  COLUMN kind text NOT NULL
  COLUMN detail jsonb NOT NULL DEFAULT '{}'::jsonb
  COLUMN queue_name text
  CONSTRAINT job_events_pkey PRIMARY KEY (id)
  INDEX CREATE INDEX job_events_job_idx ON fairsched.job_events USING btree (job_id, at)
  INDEX CREATE UNIQUE INDEX job_events_pkey ON fairsched.job_events USING btree (id)
  INDEX CREATE INDEX job_events_retention_idx ON fairsched.job_events USING btree (queue_name, at)
  TRIGGER CREATE TRIGGER job_events_queue_name BEFORE INSERT ON fairsched.job_events FOR EACH ROW EXECUTE FUNCTION fairsched.history_queue_name()
  GRANT ALL ON TABLE fairsched.job_events TO fairsched_admin
  GRANT SELECT ON TABLE fairsched.job_events TO fairsched_reader
  GRANT SELECT (id, job_id, at, kind, queue_name) ON TABLE fairsched.job_events TO fairsched_worker

VIEW fairsched.job_history
  COLUMN job_id bigint
  COLUMN at timestamp with time zone
  COLUMN kind text
  COLUMN detail jsonb
  AS
     SELECT a.job_id,
        a.finished_at AS at,
        'attempt'::text AS kind,
        jsonb_build_object('attempt', a.attempt, 'token', a.lease_token, 'owner', a.lease_owner, 'claimed_at', a.claimed_at, 'outcome', a.outcome, 'error_code', a.error_code, 'error', a.error) AS detail
       FROM fairsched.attempts a
    UNION ALL
     SELECT e.job_id,
        e.at,
        e.kind,
            CASE
                WHEN ( SELECT fairsched.lease_tokens_readable() AS lease_tokens_readable) THEN e.detail
                ELSE e.detail - 'token'::text
            END AS detail
       FROM fairsched.job_events e;
  GRANT ALL ON TABLE fairsched.job_history TO fairsched_admin
  GRANT SELECT ON TABLE fairsched.job_history TO fairsched_reader
  GRANT SELECT ON TABLE fairsched.job_history TO fairsched_worker

TABLE fairsched.jobs
  COLUMN id bigint NOT NULL GENERATED ALWAYS AS IDENTITY
  COLUMN queue_name text NOT NULL
  COLUMN tenant text NOT NULL WITH (n_distinct=100)
  COLUMN payload jsonb NOT NULL
  COLUMN status text NOT NULL DEFAULT 'pending'::text
  COLUMN priority integer NOT NULL DEFAULT 0
  COLUMN available_at timestamp with time zone NOT NULL DEFAULT now()
  COLUMN attempt_count integer NOT NULL DEFAULT 0
  COLUMN max_attempts integer NOT NULL
  COLUMN lease_owner text
  COLUMN lease_token bigint NOT NULL DEFAULT fairsched.lease_token_start()
  COLUMN lease_expires_at timestamp with time zone
  COLUMN started_at timestamp with time zone
  COLUMN progress jsonb
  COLUMN last_error_code text
  COLUMN last_error text
  COLUMN aggregate_key text
  COLUMN aggregate_seq bigint
  COLUMN idempotency_key text
  COLUMN created_at timestamp with time zone NOT NULL DEFAULT now()
  COLUMN finished_at timestamp with time zone
  COLUMN aging_key double precision NOT NULL DEFAULT EXTRACT(epoch FROM now())
  COLUMN serial boolean NOT NULL DEFAULT false
  COLUMN share_counted boolean NOT NULL DEFAULT false
  COLUMN cancel_requested_at timestamp with time zone
  COLUMN trace_context jsonb
  WITH (autovacuum_analyze_scale_factor=0.02, autovacuum_vacuum_cost_delay=0, autovacuum_vacuum_insert_scale_factor=0.05, autovacuum_vacuum_scale_factor=0.01, autovacuum_vacuum_threshold=1000, fillfactor=80)
  CONSTRAINT jobs_aggregate_key_check CHECK (((length(aggregate_key) >= 1) AND (length(aggregate_key) <= 256)))
  CONSTRAINT jobs_check CHECK (((aggregate_key IS NULL) = (aggregate_seq IS NULL)))
  CONSTRAINT jobs_idempotency_key_check CHECK (((length(idempotency_key) >= 1) AND (length(idempotency_key) <= 256)))
  CONSTRAINT jobs_max_attempts_check CHECK ((max_attempts > 0))
  CONSTRAINT jobs_pkey PRIMARY KEY (id)
  CONSTRAINT jobs_priority_range_check CHECK ((priority > '-2147483648'::integer))
  CONSTRAINT jobs_status_check CHECK ((status = ANY (ARRAY['waiting'::text, 'pending'::text, 'running'::text, 'succeeded'::text, 'dead'::text, 'discarded'::text, 'cancelled'::text])))
  CONSTRAINT jobs_tenant_check CHECK (((length(tenant) >= 1) AND (length(tenant) <= 128)))
  CONSTRAINT jobs_trace_context_check CHECK (((jsonb_typeof(trace_context) = 'object'::text) AND (octet_length((trace_context)::text) <= 4096))) NOT VALID
  INDEX CREATE UNIQUE INDEX jobs_aggregate_head_idx ON fairsched.jobs USING btree (queue_name, tenant, aggregate_key) WHERE (serial AND (status = ANY (ARRAY['pending'::text, 'running'::text])))
  COMMENT ON INDEX fairsched.jobs_aggregate_head_idx IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)'
  INDEX CREATE UNIQUE INDEX jobs_aggregate_seq_idx ON fairsched.jobs USING btree (queue_name, tenant, aggregate_key, aggregate_seq) WHERE serial
  COMMENT ON INDEX fairsched.jobs_aggregate_seq_idx IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)'
  INDEX CREATE INDEX jobs_aggregate_waiting_idx ON fairsched.jobs USING btree (queue_name, tenant, aggregate_key, aggregate_seq) WHERE (status = 'waiting'::text)
  COMMENT ON INDEX fairsched.jobs_aggregate_waiting_idx IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)'
  INDEX CREATE INDEX jobs_aging_idx ON fairsched.jobs USING btree (queue_name, aging_key, id) WHERE (status = 'pending'::text)
  INDEX CREATE INDEX jobs_claimable_idx ON fairsched.jobs USING btree (queue_name, ((- priority)), available_at, id) INCLUDE (priority) WHERE (status = 'pending'::text)
  INDEX CREATE INDEX jobs_dead_idx ON fairsched.jobs USING btree (queue_name, finished_at) WHERE (status = 'dead'::text)
  INDEX CREATE INDEX jobs_expired_lease_idx ON fairsched.jobs USING btree (lease_expires_at) WHERE (status = 'running'::text)
  INDEX CREATE INDEX jobs_finished_idx ON fairsched.jobs USING btree (queue_name, finished_at) WHERE (status = ANY (ARRAY['succeeded'::text, 'discarded'::text, 'cancelled'::text]))
  INDEX CREATE UNIQUE INDEX jobs_idempotency_key_idx ON fairsched.jobs USING btree (queue_name, tenant, idempotency_key) WHERE (idempotency_key IS NOT NULL)
  INDEX CREATE UNIQUE INDEX jobs_pkey ON fairsched.jobs USING btree (id)
  INDEX CREATE INDEX jobs_tenant_aging_idx ON fairsched.jobs USING btree (queue_name, tenant, aging_key, id) WHERE (status = 'pending'::text)
  INDEX CREATE INDEX jobs_tenant_dead_idx ON fairsched.jobs USING btree (queue_name, tenant, finished_at) WHERE (status = 'dead'::text)
  INDEX CREATE INDEX jobs_tenant_fifo_idx ON fairsched.jobs USING btree (queue_name, tenant, ((- priority)), available_at, id) WHERE (status = 'pending'::text)
  TRIGGER CREATE TRIGGER jobs_inserted_lower_aging_head AFTER INSERT ON fairsched.jobs REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION fairsched.aging_head_lower()
  TRIGGER CREATE TRIGGER jobs_inserted_lower_heads AFTER INSERT ON fairsched.jobs REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION fairsched.claim_heads_lower()
  TRIGGER CREATE TRIGGER jobs_succeeded_unchanged AFTER UPDATE ON fairsched.jobs FOR EACH ROW WHEN (((old.status = 'succeeded'::text) AND ((((((new.status IS DISTINCT FROM old.status) OR (new.attempt_count IS DISTINCT FROM old.attempt_count)) OR (new.lease_token IS DISTINCT FROM old.lease_token)) OR (new.lease_owner IS DISTINCT FROM old.lease_owner)) OR (new.started_at IS DISTINCT FROM old.started_at)) OR (new.finished_at IS DISTINCT FROM old.finished_at)))) EXECUTE FUNCTION fairsched.jobs_succeeded_unchanged()
  TRIGGER CREATE TRIGGER jobs_updated_lower_aging_head AFTER UPDATE ON fairsched.jobs REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION fairsched.aging_head_lower()
  TRIGGER CREATE TRIGGER jobs_updated_lower_heads AFTER UPDATE ON fairsched.jobs REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION fairsched.claim_heads_lower()
  GRANT ALL ON TABLE fairsched.jobs TO fairsched_admin
  GRANT SELECT ON TABLE fairsched.jobs TO fairsched_reader
  GRANT SELECT (id, queue_name, tenant, status, priority, available_at, aggregate_key, aggregate_seq, idempotency_key, created_at, serial) ON TABLE fairsched.jobs TO fairsched_producer
  GRANT SELECT (id, queue_name, tenant, payload, status, priority, available_at, attempt_count, max_attempts, lease_owner, lease_expires_at, started_at, progress, last_error_code, last_error, aggregate_key, aggregate_seq, idempotency_key, created_at, finished_at, aging_key, serial, share_counted, cancel_requested_at, trace_context) ON TABLE fairsched.jobs TO fairsched_worker
  COMMENT ON COLUMN fairsched.jobs.serial IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)'

VIEW fairsched.lease_tokens
  COLUMN job_id bigint
  COLUMN lease_token bigint
  AS
     SELECT j.id AS job_id,
            CASE
                WHEN ( SELECT fairsched.lease_tokens_readable() AS lease_tokens_readable) THEN j.lease_token
                ELSE NULL::bigint
            END AS lease_token
       FROM fairsched.jobs j;
  GRANT ALL ON TABLE fairsched.lease_tokens TO fairsched_admin
  GRANT SELECT ON TABLE fairsched.lease_tokens TO fairsched_reader
  GRANT SELECT ON TABLE fairsched.lease_tokens TO fairsched_worker

TABLE fairsched.pass_floors
  COLUMN queue_name text NOT NULL
  COLUMN pass double precision NOT NULL DEFAULT '-Infinity'::double precision
  COLUMN refreshed_at timestamp with time zone
  WITH (fillfactor=50)
  CONSTRAINT pass_floors_pkey PRIMARY KEY (queue_name)
  INDEX CREATE UNIQUE INDEX pass_floors_pkey ON fairsched.pass_floors USING btree (queue_name)
  GRANT ALL ON TABLE fairsched.pass_floors TO fairsched_admin
  GRANT SELECT ON TABLE fairsched.pass_floors TO fairsched_producer
  GRANT SELECT ON TABLE fairsched.pass_floors TO fairsched_reader
  GRANT SELECT ON TABLE fairsched.pass_floors TO fairsched_worker
  COMMENT ON TABLE fairsched.pass_floors IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)'

TABLE fairsched.policy_migrations
  COLUMN policy text NOT NULL
  COLUMN version text NOT NULL
  COLUMN name text NOT NULL
  COLUMN checksum text NOT NULL
  COLUMN applied_at timestamp with time zone NOT NULL DEFAULT now()
  CONSTRAINT policy_migrations_pkey PRIMARY KEY (policy, version)
  INDEX CREATE UNIQUE INDEX policy_migrations_pkey ON fairsched.policy_migrations USING btree (policy, version)
  GRANT ALL ON TABLE fairsched.policy_migrations TO fairsched_admin
  GRANT SELECT ON TABLE fairsched.policy_migrations TO fairsched_reader

TABLE fairsched.producer_tenants
  COLUMN role_name text NOT NULL
  COLUMN tenant text NOT NULL
  COLUMN exact boolean NOT NULL
  COLUMN granted_at timestamp with time zone NOT NULL DEFAULT now()
  CONSTRAINT producer_tenants_pkey PRIMARY KEY (role_name, tenant, exact)
  CONSTRAINT producer_tenants_role_name_check CHECK (((length(role_name) >= 1) AND (length(role_name) <= 63)))
  CONSTRAINT producer_tenants_tenant_check CHECK ((length(tenant) <= 128))
  INDEX CREATE UNIQUE INDEX producer_tenants_pkey ON fairsched.producer_tenants USING btree (role_name, tenant, exact)
  GRANT ALL ON TABLE fairsched.producer_tenants TO fairsched_admin
  GRANT SELECT ON TABLE fairsched.producer_tenants TO fairsched_reader

TABLE fairsched.queues
  COLUMN name text NOT NULL
  COLUMN lease_seconds double precision NOT NULL DEFAULT 30
  COLUMN max_runtime_seconds double precision NOT NULL DEFAULT 3600
  COLUMN max_attempts integer NOT NULL DEFAULT 8
  COLUMN unknown_max_attempts integer NOT NULL DEFAULT 3
  COLUMN backoff_base_seconds double precision NOT NULL DEFAULT 1
  COLUMN backoff_max_seconds double precision NOT NULL DEFAULT 300
  COLUMN notify boolean NOT NULL DEFAULT true
  COLUMN updated_at timestamp with time zone NOT NULL DEFAULT now()
  COLUMN policies text[] NOT NULL DEFAULT '{fifo}'::text[]
  COLUMN aging_interval_seconds double precision NOT NULL DEFAULT 60
  COLUMN charge text NOT NULL DEFAULT 'count'::text
  COLUMN tenant_cap integer
  COLUMN serial_gap text NOT NULL DEFAULT 'strict'::text
  COLUMN serial_poison text NOT NULL DEFAULT 'block'::text
  COLUMN policy_params jsonb NOT NULL DEFAULT '{}'::jsonb
  COLUMN finished_retention_seconds integer NOT NULL DEFAULT 86400
  COLUMN dead_retention_seconds integer NOT NULL DEFAULT 2592000
  COLUMN history_retention_seconds integer NOT NULL DEFAULT 2592000
  CONSTRAINT queues_aging_interval_seconds_range CHECK (((aging_interval_seconds > (0)::double precision) AND (aging_interval_seconds <= (2592000)::double precision)))
  CONSTRAINT queues_backoff_base_seconds_range CHECK (((backoff_base_seconds >= (0)::double precision) AND (backoff_base_seconds <= (86400)::double precision)))
  CONSTRAINT queues_backoff_max_seconds_range CHECK (((backoff_max_seconds >= (0)::double precision) AND (backoff_max_seconds <= (86400)::double precision)))
  CONSTRAINT queues_charge_check CHECK ((charge = ANY (ARRAY['count'::text, 'runtime'::text])))
  CONSTRAINT queues_dead_retention_range CHECK (((dead_retention_seconds >= 3600) AND (dead_retention_seconds <= 315360000)))
  CONSTRAINT queues_finished_retention_range CHECK (((finished_retention_seconds >= 1) AND (finished_retention_seconds <= 31536000)))
  CONSTRAINT queues_history_retention_range CHECK (((history_retention_seconds >= 60) AND (history_retention_seconds <= 315360000)))
  CONSTRAINT queues_lease_seconds_range CHECK (((lease_seconds > (0)::double precision) AND (lease_seconds <= (604800)::double precision)))
  CONSTRAINT queues_max_attempts_range CHECK (((max_attempts >= 1) AND (max_attempts <= 1000)))
  CONSTRAINT queues_max_runtime_seconds_range CHECK (((max_runtime_seconds > (0)::double precision) AND (max_runtime_seconds <= (604800)::double precision)))
  CONSTRAINT queues_name_check CHECK ((name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$'::text))
  CONSTRAINT queues_pkey PRIMARY KEY (name)
  CONSTRAINT queues_policies_check CHECK (((cardinality(policies) >= 1) AND (cardinality(policies) <= 8)))
  CONSTRAINT queues_serial_gap_check CHECK ((serial_gap = ANY (ARRAY['strict'::text, 'lowest'::text])))
  CONSTRAINT queues_serial_poison_check CHECK ((serial_poison = ANY (ARRAY['block'::text, 'skip'::text])))
  CONSTRAINT queues_tenant_cap_range CHECK (((tenant_cap >= 1) AND (tenant_cap <= 1000000)))
  CONSTRAINT queues_unknown_max_attempts_range CHECK (((unknown_max_attempts >= 1) AND (unknown_max_attempts <= 1000)))
  INDEX CREATE UNIQUE INDEX queues_pkey ON fairsched.queues USING btree (name)
  GRANT ALL ON TABLE fairsched.queues TO fairsched_admin
  GRANT SELECT ON TABLE fairsched.queues TO fairsched_producer
  GRANT SELECT ON TABLE fairsched.queues TO fairsched_reader
  GRANT SELECT ON TABLE fairsched.queues TO fairsched_worker
  COMMENT ON COLUMN fairsched.queues.aging_interval_seconds IS 'aging policy: defined by its migrations (fairsched_policies/migrations/aging)'
  COMMENT ON COLUMN fairsched.queues.charge IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)'
  COMMENT ON COLUMN fairsched.queues.tenant_cap IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)'
  COMMENT ON COLUMN fairsched.queues.serial_gap IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)'
  COMMENT ON COLUMN fairsched.queues.serial_poison IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)'

TABLE fairsched.ratelimits
  COLUMN queue_name text NOT NULL
  COLUMN tenant text NOT NULL
  COLUMN jobs integer
  COLUMN period_seconds double precision
  COLUMN tokens double precision
  COLUMN refilled_at timestamp with time zone
  COLUMN updated_at timestamp with time zone NOT NULL DEFAULT now()
  CONSTRAINT ratelimits_default_has_limit CHECK (((tenant <> ''::text) OR (jobs IS NOT NULL)))
  CONSTRAINT ratelimits_jobs_range CHECK (((jobs >= 1) AND (jobs <= 1000000)))
  CONSTRAINT ratelimits_limit_whole CHECK (((jobs IS NULL) = (period_seconds IS NULL)))
  CONSTRAINT ratelimits_period_unit CHECK ((period_seconds = ANY (ARRAY[(1)::double precision, (60)::double precision, (3600)::double precision, (86400)::double precision])))
  CONSTRAINT ratelimits_pkey PRIMARY KEY (queue_name, tenant)
  CONSTRAINT ratelimits_queue_name_fkey FOREIGN KEY (queue_name) REFERENCES fairsched.queues(name) ON UPDATE CASCADE ON DELETE CASCADE
  INDEX CREATE UNIQUE INDEX ratelimits_pkey ON fairsched.ratelimits USING btree (queue_name, tenant)
  GRANT ALL ON TABLE fairsched.ratelimits TO fairsched_admin
  GRANT SELECT ON TABLE fairsched.ratelimits TO fairsched_reader
  GRANT SELECT ON TABLE fairsched.ratelimits TO fairsched_worker

TABLE fairsched.schedules
  COLUMN name text NOT NULL
  COLUMN cron text NOT NULL
  COLUMN timezone text NOT NULL
  COLUMN queue_name text NOT NULL
  COLUMN tenant text NOT NULL
  COLUMN payload jsonb NOT NULL DEFAULT '{}'::jsonb
  COLUMN priority integer NOT NULL DEFAULT 0
  COLUMN jitter_seconds double precision NOT NULL DEFAULT 0
  COLUMN enabled boolean NOT NULL DEFAULT true
  COLUMN next_tick timestamp with time zone
  COLUMN last_tick timestamp with time zone
  COLUMN last_job_id bigint
  COLUMN created_at timestamp with time zone NOT NULL DEFAULT now()
  COLUMN updated_at timestamp with time zone NOT NULL DEFAULT now()
  CONSTRAINT schedules_cron_check CHECK (((length(cron) >= 1) AND (length(cron) <= 200)))
  CONSTRAINT schedules_jitter_in_range CHECK (((jitter_seconds >= (0)::double precision) AND (jitter_seconds <= (3600)::double precision)))
  CONSTRAINT schedules_name_check CHECK ((name ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$'::text))
  CONSTRAINT schedules_next_after_last CHECK ((next_tick > last_tick))
  CONSTRAINT schedules_pkey PRIMARY KEY (name)
  CONSTRAINT schedules_queue_name_fkey FOREIGN KEY (queue_name) REFERENCES fairsched.queues(name)
  CONSTRAINT schedules_tenant_check CHECK (((length(tenant) >= 1) AND (length(tenant) <= 128)))
  CONSTRAINT schedules_timezone_check CHECK (((length(timezone) >= 1) AND (length(timezone) <= 64)))
  INDEX CREATE INDEX schedules_due_idx ON fairsched.schedules USING btree (next_tick) WHERE enabled
  INDEX CREATE UNIQUE INDEX schedules_pkey ON fairsched.schedules USING btree (name)
  GRANT ALL ON TABLE fairsched.schedules TO fairsched_admin
  GRANT SELECT ON TABLE fairsched.schedules TO fairsched_reader
  GRANT SELECT ON TABLE fairsched.schedules TO fairsched_worker

TABLE fairsched.schema_migrations
  COLUMN version text NOT NULL
  COLUMN name text NOT NULL
  COLUMN checksum text NOT NULL
  COLUMN applied_at timestamp with time zone NOT NULL DEFAULT now()
  CONSTRAINT schema_migrations_pkey PRIMARY KEY (version)
  INDEX CREATE UNIQUE INDEX schema_migrations_pkey ON fairsched.schema_migrations USING btree (version)
  GRANT ALL ON TABLE fairsched.schema_migrations TO fairsched_admin
  GRANT SELECT ON TABLE fairsched.schema_migrations TO fairsched_reader
  GRANT SELECT ON TABLE fairsched.schema_migrations TO fairsched_worker

TABLE fairsched.tenant_releases
  COLUMN queue_name text NOT NULL
  COLUMN tenant text NOT NULL
  COLUMN shard smallint NOT NULL
  COLUMN released bigint NOT NULL DEFAULT 0
  WITH (autovacuum_vacuum_cost_delay=0, autovacuum_vacuum_scale_factor=0.0, autovacuum_vacuum_threshold=1000, fillfactor=50)
  CONSTRAINT tenant_releases_pkey PRIMARY KEY (queue_name, tenant, shard)
  INDEX CREATE UNIQUE INDEX tenant_releases_pkey ON fairsched.tenant_releases USING btree (queue_name, tenant, shard)
  GRANT ALL ON TABLE fairsched.tenant_releases TO fairsched_admin
  GRANT SELECT ON TABLE fairsched.tenant_releases TO fairsched_producer
  GRANT SELECT ON TABLE fairsched.tenant_releases TO fairsched_reader
  GRANT SELECT ON TABLE fairsched.tenant_releases TO fairsched_worker
  COMMENT ON TABLE fairsched.tenant_releases IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)'

TABLE fairsched.tenant_shares
  COLUMN queue_name text NOT NULL
  COLUMN tenant text NOT NULL
  COLUMN weight double precision NOT NULL DEFAULT 1
  COLUMN cap integer
  COLUMN pass double precision NOT NULL DEFAULT 0
  COLUMN running bigint NOT NULL DEFAULT 0
  COLUMN active boolean NOT NULL DEFAULT false
  COLUMN ready_at timestamp with time zone NOT NULL DEFAULT now()
  COLUMN runtime_estimate double precision NOT NULL DEFAULT 1
  COLUMN claimed_total bigint NOT NULL DEFAULT 0
  COLUMN charged_total double precision NOT NULL DEFAULT 0
  COLUMN updated_at timestamp with time zone NOT NULL DEFAULT now()
  WITH (autovacuum_vacuum_cost_delay=0, autovacuum_vacuum_scale_factor=0.0, autovacuum_vacuum_threshold=1000, fillfactor=50)
  CONSTRAINT tenant_shares_cap_range CHECK (((cap >= 1) AND (cap <= 1000000)))
  CONSTRAINT tenant_shares_pkey PRIMARY KEY (queue_name, tenant)
  CONSTRAINT tenant_shares_runtime_estimate_check CHECK ((runtime_estimate > (0)::double precision))
  CONSTRAINT tenant_shares_tenant_check CHECK (((length(tenant) >= 1) AND (length(tenant) <= 128)))
  CONSTRAINT tenant_shares_weight_range CHECK (((weight >= (0.001)::double precision) AND (weight <= (1000000)::double precision)))
  INDEX CREATE INDEX tenant_shares_capped_idx ON fairsched.tenant_shares USING btree (queue_name) WHERE (cap IS NOT NULL)
  INDEX CREATE INDEX tenant_shares_pass_idx ON fairsched.tenant_shares USING btree (queue_name, pass, claimed_total, tenant) WHERE active
  INDEX CREATE UNIQUE INDEX tenant_shares_pkey ON fairsched.tenant_shares USING btree (queue_name, tenant)
  INDEX CREATE INDEX tenant_shares_wake_idx ON fairsched.tenant_shares USING btree (ready_at) WHERE (NOT active)
  TRIGGER CREATE TRIGGER tenant_shares_inserted_lower_floor AFTER INSERT ON fairsched.tenant_shares FOR EACH ROW WHEN (new.active) EXECUTE FUNCTION fairsched.pass_floors_lower()
  TRIGGER CREATE TRIGGER tenant_shares_updated_lower_floor AFTER UPDATE OF active, pass ON fairsched.tenant_shares FOR EACH ROW WHEN ((new.active AND ((NOT old.active) OR (new.pass < old.pass)))) EXECUTE FUNCTION fairsched.pass_floors_lower()
  GRANT ALL ON TABLE fairsched.tenant_shares TO fairsched_admin
  GRANT SELECT ON TABLE fairsched.tenant_shares TO fairsched_producer
  GRANT SELECT ON TABLE fairsched.tenant_shares TO fairsched_reader
  GRANT SELECT ON TABLE fairsched.tenant_shares TO fairsched_worker
  COMMENT ON TABLE fairsched.tenant_shares IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)'

TABLE fairsched.workers
  COLUMN owner text NOT NULL
  COLUMN queues jsonb NOT NULL
  COLUMN claimed jsonb NOT NULL DEFAULT '{}'::jsonb
  COLUMN rates jsonb NOT NULL DEFAULT '{}'::jsonb
  COLUMN started_at timestamp with time zone NOT NULL DEFAULT now()
  COLUMN seen_at timestamp with time zone NOT NULL DEFAULT now()
  CONSTRAINT workers_claimed_check CHECK ((jsonb_typeof(claimed) = 'object'::text))
  CONSTRAINT workers_owner_check CHECK (((length(owner) >= 1) AND (length(owner) <= 200)))
  CONSTRAINT workers_pkey PRIMARY KEY (owner)
  CONSTRAINT workers_queues_check CHECK ((jsonb_typeof(queues) = 'object'::text))
  CONSTRAINT workers_rates_check CHECK ((jsonb_typeof(rates) = 'object'::text))
  INDEX CREATE UNIQUE INDEX workers_pkey ON fairsched.workers USING btree (owner)
  GRANT ALL ON TABLE fairsched.workers TO fairsched_admin
  GRANT SELECT ON TABLE fairsched.workers TO fairsched_reader
  GRANT SELECT ON TABLE fairsched.workers TO fairsched_worker

CREATE OR REPLACE FUNCTION fairsched.aggregate_skip(p_queue text, p_tenant text, p_key text, p_by text)
 RETURNS SETOF bigint
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
WITH old AS (
    SELECT a.blocked_job_id AS job_id
      FROM fairsched.aggregates a
     WHERE a.queue_name = $1 AND a.tenant = $2 AND a.aggregate_key = $3
       AND a.blocked_job_id IS NOT NULL
       FOR UPDATE
), agg AS (
    UPDATE fairsched.aggregates AS a
       SET blocked_job_id = NULL, updated_at = now(),
           next_seq = greatest(a.next_seq, coalesce(
               (SELECT j.aggregate_seq + 1 FROM fairsched.jobs j WHERE j.id = old.job_id),
               a.next_seq))
      FROM old
     WHERE a.queue_name = $1 AND a.tenant = $2 AND a.aggregate_key = $3
    RETURNING old.job_id AS blocked_job_id
), moved AS (
    UPDATE fairsched.jobs AS j
       SET status = 'discarded'
      FROM agg
     WHERE j.id = agg.blocked_job_id AND j.status = 'dead'
    RETURNING j.id
), event AS (
    INSERT INTO fairsched.job_events (job_id, kind, detail)
    SELECT id, 'discarded', jsonb_build_object('by', $4::text, 'via', 'aggregate_skip')
      FROM moved
)
SELECT id FROM moved
$function$
  GRANT EXECUTE ON FUNCTION fairsched.aggregate_skip(text,text,text,text) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.aggregate_skip(text,text,text,text) TO fairsched_web
  COMMENT ON FUNCTION fairsched.aggregate_skip(text,text,text,text) IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)'

CREATE OR REPLACE FUNCTION fairsched.aggregate_unblock(p_queue text, p_tenant text, p_key text, p_by text)
 RETURNS TABLE(id bigint, available_at timestamp with time zone)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
WITH old AS (
    SELECT a.blocked_job_id AS job_id
      FROM fairsched.aggregates a
     WHERE a.queue_name = $1 AND a.tenant = $2 AND a.aggregate_key = $3
       AND a.blocked_job_id IS NOT NULL
       FOR UPDATE
), agg AS (
    UPDATE fairsched.aggregates AS a
       SET blocked_job_id = NULL, updated_at = now()
      FROM old
     WHERE a.queue_name = $1 AND a.tenant = $2 AND a.aggregate_key = $3
    RETURNING old.job_id AS blocked_job_id
), moved AS (
    UPDATE fairsched.jobs AS j
       SET status = 'pending', attempt_count = 0, available_at = now(), finished_at = NULL
      FROM agg
     WHERE j.id = agg.blocked_job_id AND j.status = 'dead'
    RETURNING j.id, j.available_at
), event AS (
    INSERT INTO fairsched.job_events (job_id, kind, detail)
    SELECT id, 'replayed', jsonb_build_object('by', $4::text, 'via', 'aggregate_unblock')
      FROM moved
)
SELECT id, available_at FROM moved
$function$
  GRANT EXECUTE ON FUNCTION fairsched.aggregate_unblock(text,text,text,text) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.aggregate_unblock(text,text,text,text) TO fairsched_web
  COMMENT ON FUNCTION fairsched.aggregate_unblock(text,text,text,text) IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)'

CREATE OR REPLACE FUNCTION fairsched.aggregates_advance(p_queues text[], p_tenants text[], p_keys text[])
 RETURNS TABLE(id bigint, queue_name text, tenant text, available_at timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH input AS (
        SELECT DISTINCT * FROM unnest(p_queues, p_tenants, p_keys) AS t(queue_name, tenant, aggregate_key)
    ), free AS (
        SELECT a.queue_name, a.tenant, a.aggregate_key, a.next_seq, q.serial_gap
          FROM input i
          JOIN fairsched.aggregates a USING (queue_name, tenant, aggregate_key)
          JOIN fairsched.queues q ON q.name = a.queue_name
         WHERE a.blocked_job_id IS NULL
           AND NOT EXISTS (SELECT 1 FROM fairsched.jobs j
                            WHERE j.serial AND j.queue_name = a.queue_name AND j.tenant = a.tenant
                              AND j.aggregate_key = a.aggregate_key
                              AND j.status IN ('pending', 'running'))
    ), head AS (
        SELECT f.*, w.id, w.aggregate_seq,
               w.aggregate_seq = f.next_seq
               OR (f.serial_gap = 'strict' AND w.aggregate_seq - f.next_seq = (
                    SELECT count(*) FROM fairsched.jobs c
                     WHERE c.serial AND c.queue_name = f.queue_name AND c.tenant = f.tenant
                       AND c.aggregate_key = f.aggregate_key AND c.status = 'cancelled'
                       AND c.aggregate_seq >= f.next_seq AND c.aggregate_seq < w.aggregate_seq))
                   AS in_order
          FROM free f
          LEFT JOIN LATERAL (
                SELECT j.id, j.aggregate_seq FROM fairsched.jobs j
                 WHERE j.queue_name = f.queue_name AND j.tenant = f.tenant
                   AND j.aggregate_key = f.aggregate_key AND j.status = 'waiting'
                 ORDER BY j.aggregate_seq LIMIT 1) w ON true
    ), promoted AS (
        UPDATE fairsched.jobs AS j
           SET status = 'pending'
          FROM head h
         WHERE j.id = h.id AND j.status = 'waiting'
           AND (h.serial_gap = 'lowest' OR h.in_order)
        RETURNING j.id, j.queue_name, j.tenant, j.available_at
    ), gaps AS (
        UPDATE fairsched.aggregates AS a
           SET gap_since = CASE WHEN h.id IS NOT NULL AND h.serial_gap = 'strict'
                                     AND NOT h.in_order
                                THEN coalesce(a.gap_since, now()) END
          FROM head h
         WHERE a.queue_name = h.queue_name AND a.tenant = h.tenant AND a.aggregate_key = h.aggregate_key
    )
    SELECT p.id, p.queue_name, p.tenant, p.available_at FROM promoted AS p;
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.aggregates_advance(text[],text[],text[]) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.aggregates_advance(text[],text[],text[]) TO fairsched_producer
  GRANT EXECUTE ON FUNCTION fairsched.aggregates_advance(text[],text[],text[]) TO fairsched_web
  GRANT EXECUTE ON FUNCTION fairsched.aggregates_advance(text[],text[],text[]) TO fairsched_worker
  COMMENT ON FUNCTION fairsched.aggregates_advance(text[],text[],text[]) IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)'

CREATE OR REPLACE FUNCTION fairsched.aggregates_finish(p_ids bigint[])
 RETURNS TABLE(queue_name text, tenant text, aggregate_key text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    UPDATE fairsched.aggregates AS a
       SET next_seq = CASE WHEN j.status = 'dead' AND q.serial_poison = 'block' THEN a.next_seq
                           ELSE greatest(a.next_seq, j.aggregate_seq + 1) END,
           blocked_job_id = CASE WHEN j.status = 'dead' AND q.serial_poison = 'block' THEN j.id
                                 WHEN a.blocked_job_id = j.id THEN NULL
                                 ELSE a.blocked_job_id END,
           updated_at = now()
      FROM fairsched.jobs j, fairsched.queues q
     WHERE j.id = ANY(p_ids) AND j.serial
       AND j.status IN ('succeeded', 'dead', 'discarded', 'cancelled')
       AND a.queue_name = j.queue_name AND a.tenant = j.tenant AND a.aggregate_key = j.aggregate_key
       AND q.name = j.queue_name
    RETURNING a.queue_name, a.tenant, a.aggregate_key;
    UPDATE fairsched.jobs AS j
       SET serial = false
      FROM fairsched.aggregates a
     WHERE j.id = ANY(p_ids) AND j.serial AND j.status = 'dead'
       AND a.queue_name = j.queue_name AND a.tenant = j.tenant AND a.aggregate_key = j.aggregate_key
       AND a.blocked_job_id IS DISTINCT FROM j.id;
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.aggregates_finish(bigint[]) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.aggregates_finish(bigint[]) TO fairsched_web
  GRANT EXECUTE ON FUNCTION fairsched.aggregates_finish(bigint[]) TO fairsched_worker
  COMMENT ON FUNCTION fairsched.aggregates_finish(bigint[]) IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)'

CREATE OR REPLACE FUNCTION fairsched.aggregates_lock(p_queue text, p_tenants text[], p_keys text[], p_seqs bigint[])
 RETURNS TABLE(tenant text, aggregate_key text, next_seq bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    PERFORM fairsched.producer_tenants_check(p_tenants);
    RETURN QUERY
    INSERT INTO fairsched.aggregates AS a (queue_name, tenant, aggregate_key, next_seq)
    SELECT q.name, t.tenant, t.aggregate_key,
           CASE WHEN q.serial_gap = 'strict' THEN least(min(t.aggregate_seq), 1)
                ELSE min(t.aggregate_seq) END
      FROM unnest(p_tenants, p_keys, p_seqs) AS t(tenant, aggregate_key, aggregate_seq)
      JOIN fairsched.queues AS q ON q.name = p_queue
     GROUP BY q.name, q.serial_gap, t.tenant, t.aggregate_key
    ON CONFLICT (queue_name, tenant, aggregate_key) DO UPDATE SET updated_at = now()
    RETURNING a.tenant, a.aggregate_key, a.next_seq;
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.aggregates_lock(text,text[],text[],bigint[]) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.aggregates_lock(text,text[],text[],bigint[]) TO fairsched_producer
  COMMENT ON FUNCTION fairsched.aggregates_lock(text,text[],text[],bigint[]) IS 'serial policy: defined by its migrations (fairsched_policies/migrations/serial)'

CREATE OR REPLACE FUNCTION fairsched.aging_head_lower()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM changed AS c WHERE c.status = 'pending') THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM fairsched.claim_heads AS h
      WHERE h.queue_name IN (SELECT c.queue_name FROM changed AS c WHERE c.status = 'pending')
      ORDER BY h.queue_name
        FOR KEY SHARE;
    UPDATE fairsched.claim_heads AS h
       SET aging_key = l.aging_key, aging_id = l.id
      FROM (SELECT DISTINCT ON (c.queue_name) c.queue_name, c.aging_key, c.id
              FROM changed AS c
             WHERE c.status = 'pending'
             ORDER BY c.queue_name, c.aging_key, c.id) AS l
     WHERE h.queue_name = l.queue_name
       AND (l.aging_key, l.id) < (h.aging_key, h.aging_id);
    RETURN NULL;
END
$function$

CREATE OR REPLACE FUNCTION fairsched.aging_head_refresh(p_queue text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM 1 FROM fairsched.claim_heads AS h WHERE h.queue_name = p_queue FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    WITH lowest AS (
        SELECT j.aging_key, j.id
          FROM fairsched.claim_heads AS h
          JOIN fairsched.jobs AS j ON j.queue_name = h.queue_name
         WHERE h.queue_name = p_queue AND j.status = 'pending'
           AND (j.aging_key, j.id) >= (h.aging_key, h.aging_id)
         ORDER BY j.aging_key, j.id
         LIMIT 1
    )
    UPDATE fairsched.claim_heads AS h
       SET aging_key = coalesce((SELECT aging_key FROM lowest), h.aging_key),
           aging_id = coalesce((SELECT id FROM lowest), h.aging_id)
     WHERE h.queue_name = p_queue;
    RETURN true;
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.aging_head_refresh(text) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.aging_head_refresh(text) TO fairsched_worker

CREATE OR REPLACE FUNCTION fairsched.claim_heads_lower()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM changed AS c WHERE c.status = 'pending') THEN
        RETURN NULL;
    END IF;
    PERFORM 1 FROM fairsched.claim_heads AS h
      WHERE h.queue_name IN (SELECT c.queue_name FROM changed AS c WHERE c.status = 'pending')
      ORDER BY h.queue_name
        FOR KEY SHARE;
    UPDATE fairsched.claim_heads AS h
       SET order_rank = l.rank, order_available_at = l.available_at, order_id = l.id
      FROM (SELECT DISTINCT ON (c.queue_name) c.queue_name, - c.priority AS rank, c.available_at, c.id
              FROM changed AS c
             WHERE c.status = 'pending'
             ORDER BY c.queue_name, - c.priority, c.available_at, c.id) AS l
     WHERE h.queue_name = l.queue_name
       AND (l.rank, l.available_at, l.id) < (h.order_rank, h.order_available_at, h.order_id);
    RETURN NULL;
END
$function$

CREATE OR REPLACE FUNCTION fairsched.claim_heads_refresh(p_queue text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM 1 FROM fairsched.claim_heads AS h WHERE h.queue_name = p_queue FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    WITH lowest AS (
        SELECT - j.priority AS rank, j.available_at, j.id
          FROM fairsched.claim_heads AS h
          JOIN fairsched.jobs AS j ON j.queue_name = h.queue_name
         WHERE h.queue_name = p_queue AND j.status = 'pending'
           AND (- j.priority, j.available_at, j.id) >= (h.order_rank, h.order_available_at, h.order_id)
         ORDER BY - j.priority, j.available_at, j.id
         LIMIT 1
    )
    UPDATE fairsched.claim_heads AS h
       SET order_rank = coalesce((SELECT rank FROM lowest), h.order_rank),
           order_available_at = coalesce((SELECT available_at FROM lowest), h.order_available_at),
           order_id = coalesce((SELECT id FROM lowest), h.order_id),
           refreshed_at = now()
     WHERE h.queue_name = p_queue;
    RETURN true;
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.claim_heads_refresh(text) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.claim_heads_refresh(text) TO fairsched_worker

CREATE OR REPLACE FUNCTION fairsched.dead_discard(p_id bigint, p_by text)
 RETURNS SETOF bigint
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
WITH moved AS (
    UPDATE fairsched.jobs
       SET status = 'discarded'
     WHERE id = $1 AND status = 'dead'
    RETURNING id
), event AS (
    INSERT INTO fairsched.job_events (job_id, kind, detail)
    SELECT id, 'discarded', jsonb_build_object('by', $2::text) FROM moved
)
SELECT id FROM moved
$function$
  GRANT EXECUTE ON FUNCTION fairsched.dead_discard(bigint,text) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.dead_discard(bigint,text) TO fairsched_web

CREATE OR REPLACE FUNCTION fairsched.dead_replay(p_id bigint, p_by text)
 RETURNS SETOF bigint
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
WITH moved AS (
    UPDATE fairsched.jobs
       SET status = 'pending', attempt_count = 0, available_at = now(), finished_at = NULL
     WHERE id = $1 AND status = 'dead'
    RETURNING id
), event AS (
    INSERT INTO fairsched.job_events (job_id, kind, detail)
    SELECT id, 'replayed', jsonb_build_object('by', $2::text) FROM moved
)
SELECT id FROM moved
$function$
  GRANT EXECUTE ON FUNCTION fairsched.dead_replay(bigint,text) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.dead_replay(bigint,text) TO fairsched_web

CREATE OR REPLACE FUNCTION fairsched.history_queue_name()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF NEW.queue_name IS NULL THEN
        NEW.queue_name := (SELECT j.queue_name FROM fairsched.jobs AS j WHERE j.id = NEW.job_id);
    END IF;
    RETURN NEW;
END
$function$

CREATE OR REPLACE FUNCTION fairsched.jobs_cancel(p_ids bigint[], p_by text)
 RETURNS TABLE(id bigint, outcome text, status text, queue_name text)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
WITH target AS MATERIALIZED (
    SELECT j.id, j.queue_name, j.status, j.cancel_requested_at
      FROM fairsched.jobs AS j
     WHERE j.id = ANY (ARRAY(SELECT unnest($1::bigint[])))
     ORDER BY j.id
       FOR UPDATE
), cancelled AS (
    UPDATE fairsched.jobs AS j
       SET status = 'cancelled', finished_at = now(), cancel_requested_at = now()
      FROM target AS t
     WHERE j.id = t.id AND t.status IN ('pending', 'waiting')
    RETURNING j.id
), requested AS (
    UPDATE fairsched.jobs AS j
       SET cancel_requested_at = now()
      FROM target AS t
     WHERE j.id = t.id AND t.status = 'running' AND t.cancel_requested_at IS NULL
    RETURNING j.id
), events AS (
    INSERT INTO fairsched.job_events (job_id, kind, detail)
    SELECT id, 'cancelled', jsonb_build_object('by', $2::text) FROM cancelled
    UNION ALL
    SELECT id, 'cancel_requested', jsonb_build_object('by', $2::text) FROM requested
)
SELECT t.id, CASE WHEN t.status IN ('pending', 'waiting') THEN 'cancelled'
                  WHEN t.status = 'running' THEN 'requested'
                  ELSE 'finished' END,
       t.status, t.queue_name
  FROM target AS t
$function$
  GRANT EXECUTE ON FUNCTION fairsched.jobs_cancel(bigint[],text) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.jobs_cancel(bigint[],text) TO fairsched_web

CREATE OR REPLACE FUNCTION fairsched.jobs_enqueue(p_queue text, p_tenants text[], p_payloads jsonb[], p_priorities integer[], p_aggregate_keys text[], p_aggregate_seqs bigint[], p_run_ats timestamp with time zone[], p_max_attempts integer[], p_idempotency_keys text[], p_serial boolean, p_activate boolean, p_trace_context jsonb)
 RETURNS TABLE(id bigint, activated bigint, notified bigint, inserted_status text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RAISE EXCEPTION 'fairsched.jobs_enqueue is superseded by the enqueue function of each policy stack'
        USING ERRCODE = 'feature_not_supported',
              HINT = 'upgrade the fairsched client; an admin installs stack functions with fairsched config apply';
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.jobs_enqueue(text,text[],jsonb[],integer[],text[],bigint[],timestamp with time zone[],integer[],text[],boolean,boolean,jsonb) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.jobs_enqueue(text,text[],jsonb[],integer[],text[],bigint[],timestamp with time zone[],integer[],text[],boolean,boolean,jsonb) TO fairsched_producer

CREATE OR REPLACE FUNCTION fairsched.jobs_prune(queue text, kind text, batch integer, dry_run boolean DEFAULT false)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    q fairsched.queues;
    finished_before timestamptz;
    dead_before timestamptz;
    history_before timestamptz;
    removed bigint;
    more bigint;
BEGIN
    IF batch IS NULL OR batch NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'prune batch must be between 1 and 10000, got %', batch
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF kind IS NULL OR kind NOT IN ('finished', 'dead', 'history') THEN
        RAISE EXCEPTION 'prune kind must be finished, dead or history, got %', kind
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO q FROM fairsched.queues AS s WHERE s.name = queue;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF NOT dry_run AND NOT pg_try_advisory_xact_lock(28837374418316901) THEN  -- 'fsprune'
        RETURN NULL;
    END IF;
    finished_before := now() - make_interval(secs => q.finished_retention_seconds);
    dead_before := now() - make_interval(secs => q.dead_retention_seconds);
    history_before := now() - make_interval(secs => q.history_retention_seconds);

    IF kind = 'finished' THEN
        IF dry_run THEN
            SELECT count(*) INTO removed FROM fairsched.jobs AS j
             WHERE j.queue_name = queue AND j.status IN ('succeeded', 'discarded', 'cancelled')
               AND j.finished_at < finished_before;
        ELSE
            WITH doomed AS MATERIALIZED (
                SELECT j.id FROM fairsched.jobs AS j
                 WHERE j.queue_name = queue AND j.status IN ('succeeded', 'discarded', 'cancelled')
                   AND j.finished_at < finished_before
                 LIMIT batch
                   FOR UPDATE SKIP LOCKED
            )
            DELETE FROM fairsched.jobs AS j
             USING doomed AS d
             WHERE j.id = d.id AND j.status IN ('succeeded', 'discarded', 'cancelled');
            GET DIAGNOSTICS removed = ROW_COUNT;
        END IF;
        RETURN removed;
    END IF;

    IF kind = 'dead' THEN
        IF dry_run THEN
            SELECT count(*) INTO removed FROM fairsched.jobs AS j
             WHERE j.queue_name = queue AND j.status = 'dead' AND j.finished_at < dead_before
               AND NOT EXISTS (SELECT 1 FROM fairsched.aggregates AS a
                                WHERE a.queue_name = queue AND a.blocked_job_id = j.id);
        ELSE
            WITH doomed AS MATERIALIZED (
                SELECT j.id FROM fairsched.jobs AS j
                 WHERE j.queue_name = queue AND j.status = 'dead' AND j.finished_at < dead_before
                   AND NOT EXISTS (SELECT 1 FROM fairsched.aggregates AS a
                                    WHERE a.queue_name = queue AND a.blocked_job_id = j.id)
                 LIMIT batch
                   FOR UPDATE OF j SKIP LOCKED
            )
            DELETE FROM fairsched.jobs AS j
             USING doomed AS d
             WHERE j.id = d.id AND j.status = 'dead';
            GET DIAGNOSTICS removed = ROW_COUNT;
        END IF;
        RETURN removed;
    END IF;

    -- history: a row goes when its job is gone or past its own retention.
    IF dry_run THEN
        SELECT count(*) INTO removed FROM fairsched.attempt_log AS a
         WHERE a.queue_name = queue AND a.finished_at < history_before
           AND NOT EXISTS (SELECT 1 FROM fairsched.jobs AS j
                            WHERE j.id = a.job_id
                              AND NOT (j.status IN ('succeeded', 'discarded', 'cancelled') AND j.finished_at < finished_before)
                              AND NOT (j.status = 'dead' AND j.finished_at < dead_before));
        SELECT count(*) INTO more FROM fairsched.job_events AS e
         WHERE e.queue_name = queue AND e.at < history_before
           AND NOT EXISTS (SELECT 1 FROM fairsched.jobs AS j
                            WHERE j.id = e.job_id
                              AND NOT (j.status IN ('succeeded', 'discarded', 'cancelled') AND j.finished_at < finished_before)
                              AND NOT (j.status = 'dead' AND j.finished_at < dead_before));
        RETURN removed + more;
    END IF;
    WITH doomed AS MATERIALIZED (
        SELECT a.job_id, a.lease_token FROM fairsched.attempt_log AS a
         WHERE a.queue_name = queue AND a.finished_at < history_before
           AND NOT EXISTS (SELECT 1 FROM fairsched.jobs AS j
                            WHERE j.id = a.job_id
                              AND NOT (j.status IN ('succeeded', 'discarded', 'cancelled') AND j.finished_at < finished_before)
                              AND NOT (j.status = 'dead' AND j.finished_at < dead_before))
         LIMIT batch
           FOR UPDATE OF a SKIP LOCKED
    )
    DELETE FROM fairsched.attempt_log AS a
     USING doomed AS d
     WHERE a.job_id = d.job_id AND a.lease_token = d.lease_token;
    GET DIAGNOSTICS removed = ROW_COUNT;
    IF removed < batch THEN
        WITH doomed AS MATERIALIZED (
            SELECT e.id FROM fairsched.job_events AS e
             WHERE e.queue_name = queue AND e.at < history_before
               AND NOT EXISTS (SELECT 1 FROM fairsched.jobs AS j
                                WHERE j.id = e.job_id
                                  AND NOT (j.status IN ('succeeded', 'discarded', 'cancelled') AND j.finished_at < finished_before)
                                  AND NOT (j.status = 'dead' AND j.finished_at < dead_before))
             LIMIT batch - removed
               FOR UPDATE OF e SKIP LOCKED
        )
        DELETE FROM fairsched.job_events AS e USING doomed AS d WHERE e.id = d.id;
        GET DIAGNOSTICS more = ROW_COUNT;
        removed := removed + more;
    END IF;
    RETURN removed;
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.jobs_prune(text,text,integer,boolean) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.jobs_prune(text,text,integer,boolean) TO fairsched_worker

CREATE OR REPLACE FUNCTION fairsched.jobs_statistics_refresh(min_pending integer)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
 SET lock_timeout TO '50ms'
 SET default_statistics_target TO '10'
AS $function$
DECLARE
    estimate CONSTANT text := 'EXPLAIN (FORMAT JSON) SELECT FROM fairsched.jobs WHERE status = ''pending''';
    plan json;
    estimated float8;
    enough bigint;
BEGIN
    EXECUTE estimate INTO plan;
    estimated := (plan -> 0 -> 'Plan' ->> 'Plan Rows')::float8;
    IF estimated >= 10000 THEN
        RETURN false;  -- a backlog the claim's plan already reads in index order
    END IF;
    enough := greatest(min_pending, 10 * ceil(estimated)::bigint + 1);
    IF (SELECT count(*) FROM (SELECT FROM fairsched.jobs WHERE status = 'pending' LIMIT enough) AS p)
       < enough THEN
        RETURN false;
    END IF;
    -- ANALYZE's own lock, taken before ANALYZE: a refresh that analyzed meanwhile has
    -- committed its statistics, and the estimate below reads them.
    LOCK TABLE fairsched.jobs IN SHARE UPDATE EXCLUSIVE MODE;
    EXECUTE estimate INTO plan;
    IF 10 * (plan -> 0 -> 'Plan' ->> 'Plan Rows')::float8 >= enough THEN
        RETURN false;
    END IF;
    ANALYZE fairsched.jobs;
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.jobs_statistics_refresh(integer) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.jobs_statistics_refresh(integer) TO fairsched_worker

CREATE OR REPLACE FUNCTION fairsched.jobs_succeeded_unchanged()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RAISE EXCEPTION 'job % succeeded: its row records its last attempt and does not change', OLD.id
        USING ERRCODE = 'object_not_in_prerequisite_state';
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.jobs_succeeded_unchanged() TO PUBLIC

CREATE OR REPLACE FUNCTION fairsched.lease_release(p_id bigint, p_owner text, p_token bigint)
 RETURNS TABLE(id bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH moved AS (
        UPDATE fairsched.jobs AS j
           SET status = CASE WHEN j.cancel_requested_at IS NULL THEN 'pending' ELSE 'cancelled' END,
               finished_at = CASE WHEN j.cancel_requested_at IS NOT NULL THEN now() END,
               available_at = now(), lease_expires_at = NULL,
               attempt_count = j.attempt_count - 1
         WHERE j.id = p_id
           AND (j.status = 'running') IS TRUE
           AND j.lease_owner = p_owner
           AND j.lease_token = p_token
           AND j.lease_expires_at > now()
        RETURNING j.id, j.attempt_count, j.lease_token, j.lease_owner, j.started_at
    ), audit AS (
        INSERT INTO fairsched.attempt_log (job_id, attempt, lease_token, lease_owner, claimed_at, outcome)
        SELECT m.id, m.attempt_count + 1, m.lease_token, m.lease_owner, m.started_at, 'released'
          FROM moved AS m
    ), stale AS (
        INSERT INTO fairsched.job_events (job_id, kind, detail)
        SELECT p_id, 'stale_completion_rejected',
               jsonb_build_object('op', 'release', 'token', p_token, 'owner', p_owner)
         WHERE NOT EXISTS (SELECT 1 FROM moved)
    )
    SELECT m.id FROM moved AS m;
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.lease_release(bigint,text,bigint) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.lease_release(bigint,text,bigint) TO fairsched_worker

CREATE OR REPLACE FUNCTION fairsched.lease_renew(p_id bigint, p_owner text, p_token bigint, p_progress jsonb, p_lease_seconds double precision)
 RETURNS TABLE(lease_expires_at timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    UPDATE fairsched.jobs AS j
       SET lease_expires_at = CASE
               WHEN p_progress IS NOT NULL AND j.progress IS DISTINCT FROM p_progress
               THEN least(now() + make_interval(secs => p_lease_seconds),
                          j.started_at + make_interval(secs => q.max_runtime_seconds))
               ELSE j.lease_expires_at
           END,
           progress = coalesce(p_progress, j.progress)
      FROM fairsched.queues AS q
     WHERE q.name = j.queue_name
       AND j.id = p_id
       AND (j.status = 'running') IS TRUE
       AND j.lease_owner = p_owner
       AND j.lease_token = p_token
       AND j.lease_expires_at > now()
    RETURNING j.lease_expires_at;
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.lease_renew(bigint,text,bigint,jsonb,double precision) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.lease_renew(bigint,text,bigint,jsonb,double precision) TO fairsched_worker

CREATE OR REPLACE FUNCTION fairsched.lease_token_start()
 RETURNS bigint
 LANGUAGE sql
 PARALLEL SAFE
AS $function$ SELECT ('x' || right(replace(pg_catalog.gen_random_uuid()::text, '-', ''), 15))::bit(60)::bigint $function$
  GRANT EXECUTE ON FUNCTION fairsched.lease_token_start() TO PUBLIC

CREATE OR REPLACE FUNCTION fairsched.lease_tokens_readable()
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$ SELECT pg_catalog.has_column_privilege('fairsched.jobs', 'lease_token', 'SELECT') $function$
  GRANT EXECUTE ON FUNCTION fairsched.lease_tokens_readable() TO PUBLIC

CREATE OR REPLACE FUNCTION fairsched.leases_complete(p_owner text, p_ids bigint[], p_tokens bigint[])
 RETURNS TABLE(id bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH done AS (
        UPDATE fairsched.jobs AS j
           SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL
         WHERE j.id = ANY (ARRAY(SELECT unnest(p_ids)))
           AND (j.status = 'running') IS TRUE
           AND j.lease_owner = p_owner
           AND j.lease_token = p_tokens[array_position(p_ids, j.id)]
           AND j.lease_expires_at > now()
        RETURNING j.id
    ), stale AS (
        INSERT INTO fairsched.job_events (job_id, kind, detail)
        SELECT i.id, 'stale_completion_rejected',
               jsonb_build_object('op', 'complete', 'token', i.token, 'owner', p_owner)
          FROM unnest(p_ids, p_tokens) AS i(id, token)
         WHERE (SELECT count(*) FROM done) < cardinality(p_ids)
           AND i.id <> ALL (ARRAY(SELECT d.id FROM done AS d))
    )
    SELECT d.id FROM done AS d;
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.leases_complete(text,bigint[],bigint[]) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.leases_complete(text,bigint[],bigint[]) TO fairsched_worker

CREATE OR REPLACE FUNCTION fairsched.leases_fail(p_owner text, p_ids bigint[], p_tokens bigint[], p_kinds text[], p_codes text[], p_errors text[])
 RETURNS TABLE(id bigint, status text, available_at timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH target AS (
        SELECT j.id, p_codes[p.n] AS code, p_errors[p.n] AS error,
               (p_kinds[p.n] = 'permanent'
                OR j.attempt_count >= CASE WHEN p_kinds[p.n] = 'unknown'
                                           THEN least(j.max_attempts, q.unknown_max_attempts)
                                           ELSE j.max_attempts END) AS exhausted,
               j.cancel_requested_at IS NOT NULL AS cancelling,
               random() * least(q.backoff_max_seconds,
                                q.backoff_base_seconds * power(2, least(j.attempt_count - 1, 60)))
                   AS delay
          FROM fairsched.jobs AS j
          JOIN fairsched.queues AS q ON q.name = j.queue_name
         CROSS JOIN LATERAL (SELECT array_position(p_ids, j.id) AS n) AS p
         WHERE j.id = ANY (ARRAY(SELECT unnest(p_ids)))
           AND (j.status = 'running') IS TRUE
           AND j.lease_owner = p_owner
           AND j.lease_token = p_tokens[p.n]
           AND j.lease_expires_at > now()
         ORDER BY j.id
           FOR UPDATE OF j
    ), moved AS (
        UPDATE fairsched.jobs AS j
           SET status = CASE WHEN t.cancelling THEN 'cancelled' WHEN t.exhausted THEN 'dead'
                             ELSE 'pending' END,
               available_at = CASE WHEN t.exhausted OR t.cancelling THEN j.available_at
                                   ELSE now() + make_interval(secs => t.delay) END,
               finished_at = CASE WHEN t.exhausted OR t.cancelling THEN now() END,
               lease_expires_at = NULL,
               last_error_code = t.code,
               last_error = t.error
          FROM target t
         WHERE j.id = t.id
        RETURNING j.id, j.status, j.attempt_count, j.lease_token, j.lease_owner, j.started_at,
                  j.available_at, t.code, t.error
    ), audit AS (
        INSERT INTO fairsched.attempt_log (job_id, attempt, lease_token, lease_owner, claimed_at,
                                           outcome, error_code, error)
        SELECT m.id, m.attempt_count, m.lease_token, m.lease_owner, m.started_at,
               CASE WHEN m.status IN ('dead', 'cancelled') THEN m.status ELSE 'retrying' END,
               m.code, m.error
          FROM moved AS m
    ), stale AS (
        INSERT INTO fairsched.job_events (job_id, kind, detail)
        SELECT i.id, 'stale_completion_rejected',
               jsonb_build_object('op', 'fail', 'token', i.token, 'owner', p_owner)
          FROM unnest(p_ids, p_tokens) AS i(id, token)
         WHERE (SELECT count(*) FROM moved) < cardinality(p_ids)
           AND i.id <> ALL (ARRAY(SELECT m.id FROM moved AS m))
    )
    SELECT m.id, m.status, m.available_at FROM moved AS m;
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.leases_fail(text,bigint[],bigint[],text[],text[],text[]) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.leases_fail(text,bigint[],bigint[],text[],text[],text[]) TO fairsched_worker

CREATE OR REPLACE FUNCTION fairsched.pass_floors_lower()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM 1 FROM fairsched.pass_floors AS f WHERE f.queue_name = NEW.queue_name FOR KEY SHARE;
    UPDATE fairsched.pass_floors AS f
       SET pass = NEW.pass
     WHERE f.queue_name = NEW.queue_name AND f.pass > NEW.pass;
    RETURN NULL;
END
$function$
  COMMENT ON FUNCTION fairsched.pass_floors_lower() IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)'

CREATE OR REPLACE FUNCTION fairsched.pass_floors_refresh(p_queue text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM 1 FROM fairsched.pass_floors AS f WHERE f.queue_name = p_queue FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE fairsched.pass_floors AS f
       SET pass = coalesce((SELECT t.pass FROM fairsched.tenant_shares AS t
                             WHERE t.queue_name = f.queue_name AND t.active AND t.pass >= f.pass
                             ORDER BY t.pass LIMIT 1), f.pass),
           refreshed_at = now()
     WHERE f.queue_name = p_queue;
    RETURN true;
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.pass_floors_refresh(text) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.pass_floors_refresh(text) TO fairsched_worker
  COMMENT ON FUNCTION fairsched.pass_floors_refresh(text) IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)'

CREATE OR REPLACE FUNCTION fairsched.producer_tenants_check(p_tenants text[])
 RETURNS void
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    login name := session_user;
    refused text;
BEGIN
    IF (SELECT r.rolsuper FROM pg_roles AS r WHERE r.rolname = login)
       OR pg_has_role(login, (SELECT c.relowner FROM pg_class AS c
                               WHERE c.oid = 'fairsched.jobs'::regclass), 'MEMBER')
       OR pg_has_role(login, 'fairsched_admin', 'MEMBER') THEN
        RETURN;
    END IF;
    SELECT t.tenant INTO refused
      FROM unnest(p_tenants) AS t(tenant)
     WHERE NOT EXISTS (SELECT 1 FROM fairsched.producer_tenants AS g
                        WHERE CASE WHEN g.exact THEN t.tenant = g.tenant
                                   ELSE starts_with(t.tenant, g.tenant) END
                          AND pg_has_role(login, g.role_name, 'MEMBER'))
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'permission denied: role % may not enqueue for tenant %', login, refused
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'an admin grants tenants with: fairsched role grant-tenant ROLE TENANT (or PREFIX*)';
    END IF;
END
$function$

CREATE OR REPLACE FUNCTION fairsched.ratelimit_admit(p_queue text, p_tenants text[], p_wanted integer[])
 RETURNS TABLE(tenant text, admitted integer)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    has_default boolean := EXISTS (SELECT FROM fairsched.ratelimits AS d
                                    WHERE d.queue_name = p_queue AND d.tenant = '');
    locked text[];
    charged_at timestamptz;
BEGIN
    IF has_default THEN
        INSERT INTO fairsched.ratelimits (queue_name, tenant)
        SELECT p_queue, w.tenant FROM unnest(p_tenants) AS w(tenant) ORDER BY w.tenant
        ON CONFLICT (queue_name, tenant) DO NOTHING;
    END IF;
    SELECT coalesce(array_agg(l.tenant), '{}') INTO locked
      FROM (SELECT l.tenant FROM fairsched.ratelimits AS l
             WHERE l.queue_name = p_queue AND l.tenant = ANY (p_tenants)
             ORDER BY l.tenant
               FOR NO KEY UPDATE SKIP LOCKED) AS l;
    charged_at := clock_timestamp();
    RETURN QUERY
    UPDATE fairsched.ratelimits AS b
       SET tokens = c.level - c.take, refilled_at = charged_at, updated_at = charged_at
      FROM (SELECT l.tenant, lv.level, least(w.n, floor(lv.level))::integer AS take
              FROM fairsched.ratelimits AS l
              JOIN unnest(p_tenants, p_wanted) AS w(tenant, n) ON w.tenant = l.tenant
              LEFT JOIN fairsched.ratelimits AS d ON d.queue_name = p_queue AND d.tenant = ''
             CROSS JOIN LATERAL (
                SELECT CASE WHEN l.jobs IS NOT NULL THEN l.jobs ELSE d.jobs END::double precision AS jobs,
                       CASE WHEN l.jobs IS NOT NULL THEN l.period_seconds ELSE d.period_seconds END AS period
             ) AS lim
             CROSS JOIN LATERAL (
                SELECT least(lim.jobs, coalesce(l.tokens + lim.jobs / lim.period
                                                * extract(epoch FROM charged_at - l.refilled_at), lim.jobs))
                       AS level
             ) AS lv
             WHERE l.queue_name = p_queue AND l.tenant = ANY (locked) AND lim.jobs IS NOT NULL) AS c
     WHERE b.queue_name = p_queue AND b.tenant = c.tenant
    RETURNING b.tenant, c.take;
    RETURN QUERY
    SELECT l.tenant, 0
      FROM fairsched.ratelimits AS l
     WHERE l.queue_name = p_queue AND l.tenant = ANY (p_tenants) AND l.tenant <> ALL (locked)
       AND (l.jobs IS NOT NULL OR has_default);
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.ratelimit_admit(text,text[],integer[]) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.ratelimit_admit(text,text[],integer[]) TO fairsched_worker

CREATE OR REPLACE FUNCTION fairsched.ratelimit_budget(p_queue text, p_tenant text)
 RETURNS double precision
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    PERFORM FROM fairsched.ratelimits AS t
      WHERE t.queue_name = p_queue AND t.tenant = p_tenant
        FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND AND EXISTS (SELECT FROM fairsched.ratelimits AS t
                              WHERE t.queue_name = p_queue AND t.tenant = p_tenant) THEN
        RETURN 0;
    END IF;
    RETURN fairsched.ratelimit_level(p_queue, p_tenant);
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.ratelimit_budget(text,text) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.ratelimit_budget(text,text) TO fairsched_worker

CREATE OR REPLACE FUNCTION fairsched.ratelimit_level(p_queue text, p_tenant text)
 RETURNS double precision
 LANGUAGE sql
AS $function$
    SELECT least(lim.jobs, coalesce(t.tokens + lim.jobs / lim.period
                                     * extract(epoch FROM clock_timestamp() - t.refilled_at), lim.jobs))
      FROM (SELECT) AS one
      LEFT JOIN fairsched.ratelimits AS t ON t.queue_name = p_queue AND t.tenant = p_tenant
      LEFT JOIN fairsched.ratelimits AS d ON d.queue_name = p_queue AND d.tenant = ''
     CROSS JOIN LATERAL (
        SELECT CASE WHEN t.jobs IS NOT NULL THEN t.jobs ELSE d.jobs END::double precision AS jobs,
               CASE WHEN t.jobs IS NOT NULL THEN t.period_seconds ELSE d.period_seconds END AS period
     ) AS lim
$function$
  GRANT EXECUTE ON FUNCTION fairsched.ratelimit_level(text,text) TO PUBLIC

CREATE OR REPLACE FUNCTION fairsched.recovery_sweep(p_queue text, p_batch integer)
 RETURNS TABLE(id bigint, queue_name text, status text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    IF p_batch IS NULL OR p_batch NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'recovery batch must be between 1 and 10000, got %', p_batch
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    WITH expired AS MATERIALIZED (
        SELECT e.id, e.lease_owner, e.lease_token
          FROM fairsched.jobs AS e
         WHERE e.status = 'running' AND e.lease_expires_at <= now()
           AND (p_queue IS NULL OR e.queue_name = p_queue)
         ORDER BY e.lease_expires_at
         LIMIT p_batch
           FOR UPDATE SKIP LOCKED
    ), moved AS (
        UPDATE fairsched.jobs AS j
           SET status = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                             WHEN j.attempt_count >= j.max_attempts THEN 'dead' ELSE 'pending' END,
               available_at = CASE WHEN j.attempt_count >= j.max_attempts
                                     OR j.cancel_requested_at IS NOT NULL THEN j.available_at
                   ELSE now() + make_interval(secs => random() * least(q.backoff_max_seconds,
                            q.backoff_base_seconds * power(2, least(j.attempt_count - 1, 60))))
                   END,
               finished_at = CASE WHEN j.attempt_count >= j.max_attempts
                                    OR j.cancel_requested_at IS NOT NULL THEN now() END,
               last_error_code = CASE
                   WHEN now() >= j.started_at + make_interval(secs => q.max_runtime_seconds)
                   THEN 'max_runtime_exceeded' ELSE 'lease_expired' END,
               last_error = NULL,
               lease_expires_at = NULL
          FROM expired e, fairsched.queues q
         WHERE j.id = e.id AND q.name = j.queue_name
        RETURNING j.id, j.queue_name, j.status, j.attempt_count, e.lease_token, e.lease_owner,
                  j.started_at, j.last_error_code
    ), audit AS (
        INSERT INTO fairsched.attempt_log (job_id, attempt, lease_token, lease_owner, claimed_at,
                                           outcome, error_code)
        SELECT m.id, m.attempt_count, m.lease_token, m.lease_owner, m.started_at, 'expired',
               m.last_error_code
          FROM moved AS m
    )
    SELECT m.id, m.queue_name, m.status FROM moved AS m;
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.recovery_sweep(text,integer) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.recovery_sweep(text,integer) TO fairsched_worker

CREATE OR REPLACE FUNCTION fairsched.schedule_due_lock(p_name text)
 RETURNS TABLE(name text, cron text, timezone text, queue_name text, tenant text, payload text, priority integer, jitter_seconds double precision, next_tick timestamp with time zone, now timestamp with time zone)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT s.name, s.cron, s.timezone, s.queue_name, s.tenant, s.payload::text, s.priority,
           s.jitter_seconds::double precision, s.next_tick, now()
      FROM fairsched.schedules AS s
     WHERE s.name = p_name AND s.enabled AND s.next_tick <= now()
       FOR UPDATE SKIP LOCKED
$function$
  GRANT EXECUTE ON FUNCTION fairsched.schedule_due_lock(text) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.schedule_due_lock(text) TO fairsched_worker

CREATE OR REPLACE FUNCTION fairsched.schedule_tick_advance(p_name text, p_tick timestamp with time zone, p_job_id bigint, p_next_tick timestamp with time zone)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF p_next_tick IS NULL OR p_next_tick <= p_tick
       OR NOT EXISTS (SELECT 1 FROM fairsched.jobs AS j, fairsched.schedules AS s
                       WHERE j.id = p_job_id AND s.name = p_name
                         AND j.queue_name = s.queue_name AND j.tenant = s.tenant
                         AND left(j.idempotency_key, length(p_name) + 10) = 'schedule:' || p_name || ':'
                         AND substr(j.idempotency_key, length(p_name) + 11)::timestamptz = p_tick) THEN
        RAISE EXCEPTION 'permission denied: job % is not the tick % of schedule %', p_job_id, p_tick, p_name
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    UPDATE fairsched.schedules AS s
       SET last_tick = p_tick, last_job_id = p_job_id, next_tick = p_next_tick, updated_at = now()
     WHERE s.name = p_name;
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.schedule_tick_advance(text,timestamp with time zone,bigint,timestamp with time zone) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.schedule_tick_advance(text,timestamp with time zone,bigint,timestamp with time zone) TO fairsched_worker

CREATE OR REPLACE FUNCTION fairsched.stack_function_install(p_name text, p_kind text, p_stack text[], p_bodies text[])
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    stack_text text := replace(array_to_string(p_stack, ' + '), '''', '''''');
    check_stack text := format(
        'IF (SELECT qs.policies FROM fairsched.queues AS qs WHERE qs.name = $1) IS DISTINCT FROM %L::text[] THEN '
        'RAISE EXCEPTION ''permission denied: queue %% does not have the policy stack %s'', $1 '
        'USING ERRCODE = ''insufficient_privilege''; END IF;',
        p_stack, stack_text);
    check_existing text := format(
        'IF EXISTS (SELECT 1 FROM fairsched.queues AS qs WHERE qs.name = $1 '
        'AND qs.policies IS DISTINCT FROM %L::text[]) THEN '
        'RAISE EXCEPTION ''permission denied: queue %% does not have the policy stack %s'', $1 '
        'USING ERRCODE = ''insufficient_privilege''; END IF;',
        p_stack, stack_text);
    body text;
    grantees text;
BEGIN
    IF p_name !~ '^stack_(claim|dry|enqueue|complete)_[0-9a-f]{16}$'
       OR p_kind NOT IN ('claim', 'dry', 'enqueue', 'complete')
       OR position(p_kind IN p_name) = 0 THEN
        RAISE EXCEPTION 'invalid stack function % (%)', p_name, p_kind
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('fairsched.' || p_name));
    IF EXISTS (SELECT 1 FROM pg_proc AS p WHERE p.pronamespace = 'fairsched'::regnamespace
                                           AND p.proname = p_name) THEN
        RETURN false;
    END IF;
    IF cardinality(p_bodies) <> (CASE p_kind WHEN 'dry' THEN 2 ELSE 1 END)
       OR EXISTS (SELECT 1 FROM unnest(p_bodies) AS b(t) WHERE position(';' IN b.t) > 0
                                                          OR position('$fs$' IN b.t) > 0) THEN
        RAISE EXCEPTION 'stack function % takes one statement per body, without '';''', p_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_kind = 'claim' THEN
        body := format(
            'CREATE FUNCTION fairsched.%I(text, text, integer, double precision) '
            'RETURNS SETOF fairsched.claimed LANGUAGE plpgsql SECURITY DEFINER '
            'SET search_path = pg_catalog, pg_temp AS $fs$ BEGIN %s RETURN QUERY %s; END $fs$',
            p_name, check_stack, p_bodies[1]);
        grantees := 'fairsched_worker, fairsched_admin';
    ELSIF p_kind = 'dry' THEN
        body := format(
            'CREATE FUNCTION fairsched.%I(text, integer) '
            'RETURNS SETOF text LANGUAGE plpgsql SECURITY DEFINER '
            'SET search_path = pg_catalog, pg_temp AS $fs$ DECLARE dry_tenants text[]; BEGIN %s '
            'SELECT coalesce(array_agg(d.tenant), ''{}'') INTO dry_tenants FROM (%s) AS d(tenant); '
            'IF cardinality(dry_tenants) > 0 THEN %s; END IF; '
            'RETURN QUERY SELECT unnest(dry_tenants); END $fs$',
            p_name, check_stack, p_bodies[1], p_bodies[2]);
        grantees := 'fairsched_worker, fairsched_admin';
    ELSIF p_kind = 'enqueue' THEN
        body := format(
            'CREATE FUNCTION fairsched.%I(text, text[], jsonb[], integer[], text[], bigint[], '
            'timestamptz[], integer[], text[], boolean, jsonb) '
            'RETURNS TABLE (id bigint, activated bigint, notified bigint, inserted_status text) '
            'LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fs$ '
            '#variable_conflict use_column
BEGIN %s PERFORM fairsched.producer_tenants_check($2); RETURN QUERY %s; END $fs$',
            p_name, check_existing, p_bodies[1]);
        grantees := 'fairsched_producer, fairsched_admin';
    ELSE
        body := format(
            'CREATE FUNCTION fairsched.%I(text, bigint[], bigint[]) RETURNS TABLE (id bigint) '
            'LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fs$ '
            '#variable_conflict use_column
BEGIN RETURN QUERY %s; END $fs$',
            p_name, p_bodies[1]);
        grantees := 'fairsched_worker, fairsched_admin';
    END IF;
    EXECUTE body;
    EXECUTE format('REVOKE ALL ON FUNCTION fairsched.%I FROM PUBLIC', p_name);
    IF (SELECT count(*) FROM pg_roles
         WHERE rolname IN ('fairsched_producer', 'fairsched_worker', 'fairsched_admin')) = 3 THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION fairsched.%I TO %s', p_name, grantees);
    END IF;
    RETURN true;
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.stack_function_install(text,text,text[],text[]) TO fairsched_admin

CREATE OR REPLACE FUNCTION fairsched.tenant_released(queue_name text, tenant text)
 RETURNS bigint
 LANGUAGE sql
 STABLE
RETURN (SELECT (COALESCE(sum(r.released), (0)::numeric))::bigint AS "coalesce" FROM fairsched.tenant_releases r WHERE ((r.queue_name = tenant_released.queue_name) AND (r.tenant = tenant_released.tenant)))
  GRANT EXECUTE ON FUNCTION fairsched.tenant_released(text,text) TO PUBLIC
  COMMENT ON FUNCTION fairsched.tenant_released(text,text) IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)'

CREATE OR REPLACE FUNCTION fairsched.tenant_share_set(p_queue text, p_tenant text, p_weight double precision, p_cap integer, p_by text)
 RETURNS TABLE(weight double precision, cap integer)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    v_policies text[];
BEGIN
    IF coalesce(p_cap, 0) <> 0 THEN
        SELECT q.policies INTO v_policies FROM fairsched.queues AS q WHERE q.name = p_queue FOR SHARE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'queue % is not declared, so it has no tenant caps', p_queue
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF NOT 'weighted' = ANY (v_policies) THEN
            RAISE EXCEPTION 'queue %''s policy stack [%] does not name weighted, which alone enforces '
                            'caps: add weighted to its policies first (a cap of 0 removes one)',
                            p_queue, array_to_string(v_policies, ', ')
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    RETURN QUERY
    WITH changed AS (
        INSERT INTO fairsched.tenant_shares AS t (queue_name, tenant, weight, cap, active, ready_at)
        VALUES (p_queue, p_tenant, coalesce(p_weight, 1), nullif(p_cap, 0), false, 'infinity')
        ON CONFLICT (queue_name, tenant) DO UPDATE
           SET weight = coalesce(p_weight, t.weight),
               cap = CASE WHEN p_cap IS NULL THEN t.cap ELSE nullif(p_cap, 0) END,
               updated_at = now()
        RETURNING t.weight, t.cap
    ), audit AS (
        INSERT INTO fairsched.admin_events (by, action, queue_name, tenant, detail)
        SELECT p_by, 'tenant_share', p_queue, p_tenant,
               jsonb_build_object('weight', c.weight, 'cap', c.cap)
          FROM changed AS c
    )
    SELECT c.weight, c.cap FROM changed AS c;
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.tenant_share_set(text,text,double precision,integer,text) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.tenant_share_set(text,text,double precision,integer,text) TO fairsched_web
  COMMENT ON FUNCTION fairsched.tenant_share_set(text,text,double precision,integer,text) IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)'

CREATE OR REPLACE FUNCTION fairsched.tenant_shares_activate(queue text, tenants text[], dues timestamp with time zone[])
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    floor_pass double precision;
BEGIN
    floor_pass := fairsched.tenant_shares_floor(queue);
    INSERT INTO fairsched.tenant_shares AS s (queue_name, tenant, active, ready_at, pass)
    SELECT queue, i.tenant, false, 'infinity', floor_pass
      FROM (SELECT DISTINCT t.tenant FROM unnest(tenants) AS t(tenant)) AS i
     ORDER BY i.tenant
    ON CONFLICT (queue_name, tenant) DO NOTHING;

    PERFORM
       FROM fairsched.tenant_shares AS s
      WHERE s.queue_name = queue AND s.tenant = ANY (tenants)
      ORDER BY s.tenant
        FOR KEY SHARE;

    floor_pass := fairsched.tenant_shares_floor(queue);  -- read after the locks

    UPDATE fairsched.tenant_shares AS t
       SET active = i.due <= now(),
           ready_at = CASE WHEN i.due <= now() THEN t.ready_at ELSE least(t.ready_at, i.due) END,
           pass = CASE WHEN i.due <= now() THEN greatest(t.pass, floor_pass) ELSE t.pass END,
           updated_at = now()
      FROM (SELECT u.tenant, min(u.due) AS due
              FROM unnest(tenants, dues) AS u(tenant, due)
             GROUP BY u.tenant) AS i
     WHERE t.queue_name = queue AND t.tenant = i.tenant AND NOT t.active;
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.tenant_shares_activate(text,text[],timestamp with time zone[]) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.tenant_shares_activate(text,text[],timestamp with time zone[]) TO fairsched_producer
  GRANT EXECUTE ON FUNCTION fairsched.tenant_shares_activate(text,text[],timestamp with time zone[]) TO fairsched_web
  GRANT EXECUTE ON FUNCTION fairsched.tenant_shares_activate(text,text[],timestamp with time zone[]) TO fairsched_worker
  COMMENT ON FUNCTION fairsched.tenant_shares_activate(text,text[],timestamp with time zone[]) IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)'

CREATE OR REPLACE FUNCTION fairsched.tenant_shares_finish(ids bigint[])
 RETURNS void
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    SELECT fairsched.tenant_shares_finish(array_agg(j.id), array_agg(j.queue_name), array_agg(j.tenant))
      FROM fairsched.jobs AS j
     WHERE j.id = ANY (ids) AND j.share_counted
$function$
  COMMENT ON FUNCTION fairsched.tenant_shares_finish(bigint[]) IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)'

CREATE OR REPLACE FUNCTION fairsched.tenant_shares_finish(ids bigint[], queues text[], tenants text[])
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    -- ids, queues and tenants: the counted jobs (`share_counted`) that left running, by
    -- position.
    INSERT INTO fairsched.tenant_releases AS r (queue_name, tenant, shard, released)
    SELECT f.queue_name, f.tenant, mod(pg_backend_pid(), 16), count(*)
      FROM unnest(queues, tenants) AS f(queue_name, tenant)
     GROUP BY f.queue_name, f.tenant
     ORDER BY f.queue_name, f.tenant
    ON CONFLICT (queue_name, tenant, shard) DO UPDATE SET released = r.released + excluded.released;

    IF NOT EXISTS (SELECT 1 FROM fairsched.queues AS q WHERE q.charge = 'runtime') THEN
        RETURN;
    END IF;
    WITH ended AS (
        SELECT j.queue_name, j.tenant, count(*) AS n,
               sum(greatest(extract(epoch FROM now() - j.started_at), 0.001)) AS seconds
          FROM fairsched.jobs AS j
          JOIN fairsched.queues AS q ON q.name = j.queue_name AND q.charge = 'runtime'
         WHERE j.id = ANY (ids) AND j.share_counted
         GROUP BY j.queue_name, j.tenant
    ), locked AS MATERIALIZED (
        SELECT t.queue_name, t.tenant
          FROM fairsched.tenant_shares AS t
          JOIN ended AS e USING (queue_name, tenant)
         ORDER BY t.tenant
           FOR NO KEY UPDATE OF t
    )
    UPDATE fairsched.tenant_shares AS t
       SET pass = t.pass + (e.seconds - e.n * t.runtime_estimate) / t.weight,
           charged_total = t.charged_total + e.seconds - e.n * t.runtime_estimate,
           runtime_estimate = 0.8 * t.runtime_estimate + 0.2 * e.seconds / e.n,
           updated_at = now()
      FROM ended AS e JOIN locked USING (queue_name, tenant)
     WHERE t.queue_name = e.queue_name AND t.tenant = e.tenant;
END
$function$
  COMMENT ON FUNCTION fairsched.tenant_shares_finish(bigint[],text[],text[]) IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)'

CREATE OR REPLACE FUNCTION fairsched.tenant_shares_floor(queue text)
 RETURNS double precision
 LANGUAGE sql
 STABLE
RETURN COALESCE((SELECT a.pass FROM fairsched.tenant_shares a WHERE ((a.queue_name = tenant_shares_floor.queue) AND a.active) ORDER BY a.pass LIMIT 1), (SELECT max(a.pass) AS max FROM fairsched.tenant_shares a WHERE (a.queue_name = tenant_shares_floor.queue)), (0)::double precision)
  GRANT EXECUTE ON FUNCTION fairsched.tenant_shares_floor(text) TO PUBLIC
  COMMENT ON FUNCTION fairsched.tenant_shares_floor(text) IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)'

CREATE OR REPLACE FUNCTION fairsched.tenant_shares_settle(p_ids bigint[])
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    settled bigint[];
BEGIN
    SELECT array_agg(j.id ORDER BY j.id) INTO settled
      FROM fairsched.jobs AS j
     WHERE j.id = ANY (p_ids) AND j.share_counted
       AND j.status NOT IN ('running', 'succeeded');
    IF settled IS NULL THEN
        RETURN;
    END IF;
    PERFORM fairsched.tenant_shares_finish(settled);
    UPDATE fairsched.jobs AS j SET share_counted = false
     WHERE j.id = ANY (settled) AND j.share_counted AND j.status NOT IN ('running', 'succeeded');
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.tenant_shares_settle(bigint[]) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.tenant_shares_settle(bigint[]) TO fairsched_web
  GRANT EXECUTE ON FUNCTION fairsched.tenant_shares_settle(bigint[]) TO fairsched_worker
  COMMENT ON FUNCTION fairsched.tenant_shares_settle(bigint[]) IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)'

CREATE OR REPLACE FUNCTION fairsched.tenant_shares_wake(p_batch integer)
 RETURNS TABLE(queue_name text, tenant text, active boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    IF p_batch IS NULL OR p_batch NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'wake batch must be between 1 and 10000, got %', p_batch
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    WITH due AS MATERIALIZED (
        SELECT t.queue_name, t.tenant
          FROM fairsched.tenant_shares t
         WHERE NOT t.active AND t.ready_at <= now()
         ORDER BY t.ready_at
         LIMIT p_batch
           FOR UPDATE SKIP LOCKED
    )
    UPDATE fairsched.tenant_shares AS t
       SET active = EXISTS (SELECT 1 FROM fairsched.jobs j
                             WHERE j.queue_name = t.queue_name AND j.tenant = t.tenant
                               AND j.status = 'pending'),
           ready_at = 'infinity',
           pass = greatest(t.pass, fairsched.tenant_shares_floor(t.queue_name)),
           updated_at = now()
      FROM due d
     WHERE t.queue_name = d.queue_name AND t.tenant = d.tenant
    RETURNING t.queue_name, t.tenant, t.active;
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.tenant_shares_wake(integer) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.tenant_shares_wake(integer) TO fairsched_worker
  COMMENT ON FUNCTION fairsched.tenant_shares_wake(integer) IS 'weighted policy: defined by its migrations (fairsched_policies/migrations/weighted)'

CREATE OR REPLACE FUNCTION fairsched.worker_gone(owner text)
 RETURNS void
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ DELETE FROM fairsched.workers AS w WHERE w.owner = worker_gone.owner $function$
  GRANT EXECUTE ON FUNCTION fairsched.worker_gone(text) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.worker_gone(text) TO fairsched_worker

CREATE OR REPLACE FUNCTION fairsched.worker_seen(owner text, queues jsonb, claimed jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    IF jsonb_typeof(queues) IS DISTINCT FROM 'object'
       OR (SELECT count(*) FROM jsonb_object_keys(queues)) > 1000
       OR EXISTS (SELECT 1 FROM jsonb_each(queues) AS q(name, slots)
                   WHERE jsonb_typeof(q.slots) <> 'number'
                      OR NOT (q.slots::numeric BETWEEN 0 AND 100000)
                      OR length(q.name) NOT BETWEEN 1 AND 63) THEN
        RAISE EXCEPTION 'a worker''s queues are an object of at most 1000 queue names, each with 0 to 100000 slots'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_typeof(claimed) IS DISTINCT FROM 'object'
       OR EXISTS (SELECT 1 FROM jsonb_each(claimed) AS c(name, n)
                   WHERE NOT queues ? c.name OR jsonb_typeof(c.n) <> 'number'
                      OR NOT (c.n::numeric BETWEEN 0 AND 1e15) OR c.n::numeric <> trunc(c.n::numeric)) THEN
        RAISE EXCEPTION 'a worker''s claim counts are an object of its queues, each a whole number from 0'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO fairsched.workers AS w (owner, queues, claimed) VALUES (owner, queues, claimed)
    ON CONFLICT ON CONSTRAINT workers_pkey
    DO UPDATE SET queues = excluded.queues, claimed = excluded.claimed, seen_at = now(),
                  rates = coalesce((
                      SELECT jsonb_object_agg(c.name, round(greatest(c.n::numeric - coalesce((w.claimed ->> c.name)::numeric, 0), 0)
                                              / greatest(extract(epoch FROM now() - w.seen_at), 0.001), 1))
                        FROM jsonb_each(excluded.claimed) AS c(name, n)), '{}');
    DELETE FROM fairsched.workers AS w WHERE w.seen_at < now() - interval '1 day';
END
$function$
  GRANT EXECUTE ON FUNCTION fairsched.worker_seen(text,jsonb,jsonb) TO fairsched_admin
  GRANT EXECUTE ON FUNCTION fairsched.worker_seen(text,jsonb,jsonb) TO fairsched_worker

DEFAULT PRIVILEGES IN SCHEMA fairsched GRANT ALL ON SEQUENCES TO fairsched_admin
DEFAULT PRIVILEGES IN SCHEMA fairsched GRANT ALL ON TABLES TO fairsched_admin
DEFAULT PRIVILEGES IN SCHEMA fairsched GRANT SELECT ON TABLES TO fairsched_reader
