-- Roles that can only do their job (docs/security.md).
--
-- fairsched_producer and fairsched_worker keep SELECT where they read, and lose every
-- INSERT, UPDATE and DELETE on the schema's tables. Each transition they make is a
-- function below: SECURITY DEFINER (it runs as the schema owner), search_path pinned,
-- EXECUTE granted to the role whose job it is. Each checks what its caller presents:
--   heartbeat, complete, fail, release  the lease's owner and token (the fence);
--   enqueue and a serial enqueue's aggregate lock  the producer's tenant grant
--                                       (fairsched.producer_tenants);
--   the claim and the dry-tenant sweep  the queue's policy stack: one function per stack,
--                                       installed by whoever applies the configuration
--                                       (fairsched.stack_function_install, below), checks
--                                       that the queue has that stack.
-- The functions a role may call only do what the engine's own transitions do, so a
-- call with made-up arguments changes nothing a real transition would not: share
-- releases and aggregate steps are read from the jobs' rows, never taken from the caller.
-- Audit rows (attempt_log, job_events) and fairness state (tenant_shares,
-- tenant_releases, aggregates, claim_heads, pass_floors) are written only here.


-- == Producer tenant grants ===========================================================

-- Which tenants a producer role may enqueue for: one granted to a role the session's
-- login role is a member of, exactly (exact) or by prefix ('' with exact false grants
-- every tenant). A session whose login role is a superuser, the schema owner or a member of
-- fairsched_admin may enqueue for any tenant. A producer with no grant may enqueue for
-- none. Managed with `fairsched role grant-tenant / revoke-tenant / list`.
CREATE TABLE fairsched.producer_tenants (
    role_name   text NOT NULL CHECK (length(role_name) BETWEEN 1 AND 63),
    tenant      text NOT NULL CHECK (length(tenant) <= 128),
    exact       boolean NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (role_name, tenant, exact)
);

-- Refuses, with one error naming the login role and the first tenant outside its
-- grants, an enqueue for tenants the session may not enqueue for. The login role
-- (session_user) is the one checked: inside a SECURITY DEFINER function current_user is
-- the owner, and SET ROLE does not change who logged in.
CREATE FUNCTION fairsched.producer_tenants_check(p_tenants text[]) RETURNS void
    LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
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
$$;


-- == Enqueue ==========================================================================

-- Insert jobs for one queue (arrays, one element per job); returns one id per input,
-- in input order (NULL where an idempotency key exists: the caller looks it up). On a
-- serial queue, jobs of an aggregate start as 'waiting' (promoted after). Weighted
-- queues (p_activate): the jobs' tenants join the selection, committed with the jobs.
CREATE FUNCTION fairsched.jobs_enqueue(
    p_queue text, p_tenants text[], p_payloads jsonb[], p_priorities integer[],
    p_aggregate_keys text[], p_aggregate_seqs bigint[], p_run_ats timestamptz[],
    p_max_attempts integer[], p_idempotency_keys text[], p_serial boolean, p_activate boolean,
    p_trace_context jsonb)
    RETURNS TABLE (id bigint, activated bigint, notified bigint, inserted_status text)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM fairsched.producer_tenants_check(p_tenants);
    RETURN QUERY
    WITH q AS (
        SELECT name, max_attempts, notify, aging_interval_seconds
          FROM fairsched.queues WHERE name = p_queue
    ), input AS MATERIALIZED (
        SELECT t.*, nextval('fairsched.jobs_id_seq') AS new_id
          FROM unnest(p_tenants, p_payloads, p_priorities, p_aggregate_keys, p_aggregate_seqs,
                      p_run_ats, p_max_attempts, p_idempotency_keys)
               WITH ORDINALITY AS t(tenant, payload, priority, aggregate_key, aggregate_seq,
                                    run_at, max_attempts, idempotency_key, ord)
         WHERE EXISTS (SELECT 1 FROM q)
    ), inserted AS (
        INSERT INTO fairsched.jobs (id, queue_name, tenant, payload, priority, aggregate_key,
                                    aggregate_seq, available_at, max_attempts, idempotency_key,
                                    status, serial, aging_key, trace_context)
        OVERRIDING SYSTEM VALUE
        SELECT i.new_id, q.name, i.tenant, i.payload, i.priority, i.aggregate_key,
               i.aggregate_seq, coalesce(i.run_at, now()), coalesce(i.max_attempts, q.max_attempts),
               i.idempotency_key,
               CASE WHEN p_serial AND i.aggregate_key IS NOT NULL THEN 'waiting' ELSE 'pending' END,
               p_serial AND i.aggregate_key IS NOT NULL,
               extract(epoch FROM now()) - i.priority * q.aging_interval_seconds,
               p_trace_context
          FROM input i CROSS JOIN q
         ORDER BY i.ord
        ON CONFLICT (queue_name, tenant, idempotency_key) WHERE idempotency_key IS NOT NULL
        DO NOTHING
        RETURNING id, tenant, available_at, status, aggregate_key
    ), activated AS (
        SELECT fairsched.tenant_shares_activate(q.name, array_agg(i.tenant),
                                                array_agg(coalesce(i.run_at, '-infinity')))
          FROM q CROSS JOIN input i
         WHERE p_activate
         GROUP BY q.name
    ), notified AS (
        SELECT pg_notify('fairsched_jobs', q.name)
          FROM q
         WHERE q.notify AND EXISTS (SELECT 1 FROM inserted)
    )
    SELECT ins.id, (SELECT count(*) FROM activated), (SELECT count(*) FROM notified),
           ins.status
      FROM input i
      LEFT JOIN inserted ins ON ins.id = i.new_id
     ORDER BY i.ord;
END
$$;

-- Lock (creating them) the aggregates a serial enqueue touches; a new aggregate starts
-- at the lowest sequence number of its first batch. Returns next_seq. Only for tenants
-- the caller may enqueue for.
CREATE FUNCTION fairsched.aggregates_lock(p_queue text, p_tenants text[], p_keys text[], p_seqs bigint[])
    RETURNS TABLE (tenant text, aggregate_key text, next_seq bigint)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM fairsched.producer_tenants_check(p_tenants);
    IF NOT EXISTS (SELECT 1 FROM fairsched.queues AS q WHERE q.name = p_queue) THEN
        RETURN;
    END IF;
    RETURN QUERY
    INSERT INTO fairsched.aggregates AS a (queue_name, tenant, aggregate_key, next_seq)
    SELECT p_queue, t.tenant, t.aggregate_key, min(t.aggregate_seq)
      FROM unnest(p_tenants, p_keys, p_seqs) AS t(tenant, aggregate_key, aggregate_seq)
     GROUP BY t.tenant, t.aggregate_key
    ON CONFLICT (queue_name, tenant, aggregate_key) DO UPDATE SET updated_at = now()
    RETURNING a.tenant, a.aggregate_key, a.next_seq;
END
$$;

-- Tenants that got pending jobs join the weighted selection (001): it only ever raises a
-- pass, and a tenant activated with nothing pending leaves again at the next dry sweep.
ALTER FUNCTION fairsched.tenant_shares_activate(text, text[], timestamptz[])
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;


-- == The lease: heartbeat, complete, fail, release (fenced by owner and token) ========

-- Heartbeat: extend a held lease when progress advanced, never past max_runtime
-- (queries.sql, lease_renew).
CREATE FUNCTION fairsched.lease_renew(p_id bigint, p_owner text, p_token bigint, p_progress jsonb,
                                      p_lease_seconds double precision)
    RETURNS TABLE (lease_expires_at timestamptz)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
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
$$;

-- Complete held leases (arrays of id and token), settle the shares of the jobs weighted
-- claims counted, audit every lease that no longer held; returns the ids that completed
-- (queries.sql, leases_complete).
CREATE FUNCTION fairsched.leases_complete(p_owner text, p_ids bigint[], p_tokens bigint[])
    RETURNS TABLE (id bigint)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
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
        RETURNING j.id, j.queue_name, j.tenant, j.share_counted
    ), stale AS (
        INSERT INTO fairsched.job_events (job_id, kind, detail)
        SELECT i.id, 'stale_completion_rejected',
               jsonb_build_object('op', 'complete', 'token', i.token, 'owner', p_owner)
          FROM unnest(p_ids, p_tokens) AS i(id, token)
         WHERE (SELECT count(*) FROM done) < cardinality(p_ids)
           AND i.id <> ALL (ARRAY(SELECT d.id FROM done AS d))
    ), shares AS (
        SELECT fairsched.tenant_shares_finish(array_agg(d.id), array_agg(d.queue_name),
                                              array_agg(d.tenant))
          FROM done AS d
         WHERE d.share_counted
        HAVING count(*) > 0
    )
    SELECT d.id FROM done AS d LEFT JOIN shares ON true;
END
$$;

-- Record failed attempts of one owner (arrays of id, token, kind, code, error); returns
-- the ids that held with where each went (queries.sql, leases_fail).
CREATE FUNCTION fairsched.leases_fail(p_owner text, p_ids bigint[], p_tokens bigint[], p_kinds text[],
                                      p_codes text[], p_errors text[])
    RETURNS TABLE (id bigint, status text, available_at timestamptz)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
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
$$;

-- Give a held lease back unfinished (shutdown): pending now, the attempt not counted;
-- cancelled instead when a cancel was requested (queries.sql, lease_release).
CREATE FUNCTION fairsched.lease_release(p_id bigint, p_owner text, p_token bigint)
    RETURNS TABLE (id bigint)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
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
$$;


-- == Settling: the state beside jobs that left running ================================

-- Release the running slots of counted jobs (share_counted) that have left running and
-- are not succeeded (a completion settles its own in its statement), then mark them
-- settled: a second call with the same ids releases nothing. Replaces the one-argument
-- form of 001 for the roles; the three-argument form is no longer theirs to call.
CREATE FUNCTION fairsched.tenant_shares_settle(p_ids bigint[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
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
$$;

-- Jobs settled before this migration kept share_counted: clear it where it no longer
-- counts a running slot, so that no settle releases one again.
UPDATE fairsched.jobs SET share_counted = false
 WHERE share_counted AND status NOT IN ('running', 'succeeded');

-- Serial jobs left running for good: advance their aggregate past them, or (poison mode
-- block) let a dead one hold it (policies.sql, aggregates_finish). Read from the jobs'
-- rows: calling it again changes nothing.
CREATE FUNCTION fairsched.aggregates_finish(p_ids bigint[])
    RETURNS TABLE (queue_name text, tenant text, aggregate_key text)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
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
END
$$;

-- Promote the next job of each given aggregate that has no job pending or running and
-- is not blocked (policies.sql, aggregates_advance): what the serial order allows, so a
-- call for any aggregate only does what the next transition would.
CREATE FUNCTION fairsched.aggregates_advance(p_queues text[], p_tenants text[], p_keys text[])
    RETURNS TABLE (id bigint, queue_name text, tenant text, available_at timestamptz)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
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
$$;


-- == Recovery and the sweeper =========================================================

-- Move a bounded batch of expired leases (of every queue, or of one) back to pending,
-- to dead or to cancelled, auditing each (queries.sql, recovery_sweep). Only expired
-- leases: what any caller's sweep would do.
CREATE FUNCTION fairsched.recovery_sweep(p_queue text, p_batch integer)
    RETURNS TABLE (id bigint, queue_name text, status text)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
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
$$;

-- Sweeper: inactive tenants whose delayed work came due rejoin at the lowest active
-- pass (policies.sql, tenant_shares_wake).
CREATE FUNCTION fairsched.tenant_shares_wake(p_batch integer)
    RETURNS TABLE (queue_name text, tenant text, active boolean)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
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
$$;

-- Raise a queue's claim heads to its lowest pending job in each built-in job order,
-- skipping (false) while a transaction that makes jobs pending holds them
-- (queries.sql, claim_heads_lock and claim_heads_refresh). Heads only rise to where
-- the jobs are: any caller's refresh is the right one.
CREATE FUNCTION fairsched.claim_heads_refresh(p_queue text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM fairsched.claim_heads AS h WHERE h.queue_name = p_queue FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    WITH fifo AS (
        SELECT - j.priority AS rank, j.available_at, j.id
          FROM fairsched.claim_heads AS h
          JOIN fairsched.jobs AS j ON j.queue_name = h.queue_name
         WHERE h.queue_name = p_queue AND j.status = 'pending'
           AND (- j.priority, j.available_at, j.id) >= (h.fifo_rank, h.fifo_available_at, h.fifo_id)
         ORDER BY - j.priority, j.available_at, j.id
         LIMIT 1
    ), aging AS (
        SELECT j.aging_key, j.id
          FROM fairsched.claim_heads AS h
          JOIN fairsched.jobs AS j ON j.queue_name = h.queue_name
         WHERE h.queue_name = p_queue AND j.status = 'pending'
           AND (j.aging_key, j.id) >= (h.aging_key, h.aging_id)
         ORDER BY j.aging_key, j.id
         LIMIT 1
    )
    UPDATE fairsched.claim_heads AS h
       SET fifo_rank = coalesce((SELECT rank FROM fifo), h.fifo_rank),
           fifo_available_at = coalesce((SELECT available_at FROM fifo), h.fifo_available_at),
           fifo_id = coalesce((SELECT id FROM fifo), h.fifo_id),
           aging_key = coalesce((SELECT aging_key FROM aging), h.aging_key),
           aging_id = coalesce((SELECT id FROM aging), h.aging_id),
           refreshed_at = now()
     WHERE h.queue_name = p_queue;
    RETURN true;
END
$$;

-- Raise a queue's pass floor to its lowest active pass, skipping (false) while a tenant
-- is being activated (queries.sql, pass_floors_lock and pass_floors_refresh).
CREATE FUNCTION fairsched.pass_floors_refresh(p_queue text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
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
$$;


-- == The claim and the dry-tenant sweep: one function per policy stack ================

-- A claim's rows (the composer's RETURNING, fairsched/engine/composer.py).
CREATE TYPE fairsched.claimed AS (
    id               bigint,
    queue            text,
    token            bigint,
    owner            text,
    expires_at       timestamptz,
    tenant           text,
    payload          jsonb,
    attempt          integer,
    max_attempts     integer,
    idempotency_key  text,
    priority         integer,
    aggregate_key    text,
    aggregate_seq    bigint,
    created_at       timestamptz,
    started_at       timestamptz,
    lease_seconds    double precision,
    trace_context    jsonb
);

-- Creates (or keeps) the function `fairsched.<name>` that runs a stack's composed
-- statements, owned by the schema owner; returns whether it created it. The engine
-- composes the statements and names the function after their digest
-- (fairsched/engine/stackfunctions.py); `config apply`, `declare_queue` and
-- `policy set` install the functions of every stack they write, as do the first
-- claims of a session that may. Kinds:
--   claim  ($1 queue, $2 owner, $3 limit, $4 lease seconds) RETURNS SETOF claimed: bodies[1], the
--          claim statement, run by RETURN QUERY (its plan is cached per session, as a
--          prepared statement's);
--   dry    ($1 queue, $2 limit) RETURNS SETOF text: bodies[1] locks the dry tenants (as
--          dry_tenants), bodies[2] takes them out of the selection.
-- Each function first checks that the queue's stack is `stack`: a worker may only run
-- the claim the queue's configuration asks for. A body is one statement (no ';').
-- EXECUTE: the admin only (it writes what the workers run).
CREATE FUNCTION fairsched.stack_function_install(p_name text, p_kind text, p_stack text[], p_bodies text[])
    RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    check_stack text := format(
        'IF (SELECT qs.policies FROM fairsched.queues AS qs WHERE qs.name = $1) IS DISTINCT FROM %L::text[] THEN '
        'RAISE EXCEPTION ''permission denied: queue %% does not have the policy stack %s'', $1 '
        'USING ERRCODE = ''insufficient_privilege''; END IF;',
        p_stack, replace(array_to_string(p_stack, ' + '), '''', ''''''));
    body text;
BEGIN
    IF p_name !~ '^stack_(claim|dry)_[0-9a-f]{16}$' OR p_kind NOT IN ('claim', 'dry')
       OR position(p_kind IN p_name) = 0 THEN
        RAISE EXCEPTION 'invalid stack function % (%)', p_name, p_kind
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('fairsched.' || p_name));
    IF EXISTS (SELECT 1 FROM pg_proc AS p WHERE p.pronamespace = 'fairsched'::regnamespace
                                           AND p.proname = p_name) THEN
        RETURN false;
    END IF;
    IF cardinality(p_bodies) <> (CASE p_kind WHEN 'claim' THEN 1 ELSE 2 END)
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
    ELSE
        body := format(
            'CREATE FUNCTION fairsched.%I(text, integer) '
            'RETURNS SETOF text LANGUAGE plpgsql SECURITY DEFINER '
            'SET search_path = pg_catalog, pg_temp AS $fs$ DECLARE dry_tenants text[]; BEGIN %s '
            'SELECT coalesce(array_agg(d.tenant), ''{}'') INTO dry_tenants FROM (%s) AS d(tenant); '
            'IF cardinality(dry_tenants) > 0 THEN %s; END IF; '
            'RETURN QUERY SELECT unnest(dry_tenants); END $fs$',
            p_name, check_stack, p_bodies[1], p_bodies[2]);
    END IF;
    EXECUTE body;
    EXECUTE format('REVOKE ALL ON FUNCTION fairsched.%I FROM PUBLIC', p_name);
    IF (SELECT count(*) FROM pg_roles WHERE rolname IN ('fairsched_worker', 'fairsched_admin')) = 2 THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION fairsched.%I TO fairsched_worker, fairsched_admin', p_name);
    END IF;
    RETURN true;
END
$$;


-- The schedule duty (006_schedules.sql) as a worker runs it: lock a due schedule (FOR
-- UPDATE SKIP LOCKED: nothing when another process holds it or its tick moved on), then,
-- in the same transaction after enqueueing the tick's job (jobs_enqueue, with the
-- producer's tenant grants), move it on. The move checks what the caller presents: the
-- job is the tick's (its idempotency key names the schedule and the tick) and the next
-- tick comes after it.
CREATE FUNCTION fairsched.schedule_due_lock(p_name text)
    RETURNS TABLE (name text, cron text, timezone text, queue_name text, tenant text,
                   payload text, priority integer, jitter_seconds double precision,
                   next_tick timestamptz, now timestamptz)
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.name, s.cron, s.timezone, s.queue_name, s.tenant, s.payload::text, s.priority,
           s.jitter_seconds::double precision, s.next_tick, now()
      FROM fairsched.schedules AS s
     WHERE s.name = p_name AND s.enabled AND s.next_tick <= now()
       FOR UPDATE SKIP LOCKED
$$;

CREATE FUNCTION fairsched.schedule_tick_advance(p_name text, p_tick timestamptz, p_job_id bigint,
                                                p_next_tick timestamptz)
    RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
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
$$;


-- == Privileges ========================================================================

-- The functions of 001 that write state take no calls from the roles any more (the
-- functions above call them as the owner).
REVOKE ALL ON FUNCTION fairsched.tenant_shares_finish(bigint[], text[], text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.tenant_shares_finish(bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.tenant_shares_activate(text, text[], timestamptz[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.producer_tenants_check(text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.jobs_enqueue(text, text[], jsonb[], integer[], text[], bigint[],
                                              timestamptz[], integer[], text[], boolean, boolean,
                                              jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.aggregates_lock(text, text[], text[], bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.lease_renew(bigint, text, bigint, jsonb, double precision) FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.leases_complete(text, bigint[], bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.leases_fail(text, bigint[], bigint[], text[], text[], text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.lease_release(bigint, text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.tenant_shares_settle(bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.aggregates_finish(bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.aggregates_advance(text[], text[], text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.recovery_sweep(text, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.tenant_shares_wake(integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.claim_heads_refresh(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.pass_floors_refresh(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.stack_function_install(text, text, text[], text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION fairsched.schedule_due_lock(text),
                       fairsched.schedule_tick_advance(text, timestamptz, bigint, timestamptz) FROM PUBLIC;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fairsched_producer')
       OR NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fairsched_worker')
       OR NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fairsched_admin') THEN
        RAISE WARNING 'fairsched roles are missing: no grants made (see 001_baseline.sql)';
        RETURN;
    END IF;

    -- No writes on any table for the producer and the worker.
    REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA fairsched
      FROM fairsched_producer, fairsched_worker;
    REVOKE INSERT (queue_name, tenant, active, ready_at, pass),
           UPDATE (active, ready_at, pass, updated_at)
        ON fairsched.tenant_shares FROM fairsched_producer;
    REVOKE INSERT (queue_name, tenant, active, ready_at, pass),
           UPDATE (pass, running, active, ready_at, claimed_total, charged_total, runtime_estimate,
                   updated_at)
        ON fairsched.tenant_shares FROM fairsched_worker;
    REVOKE INSERT (queue_name, tenant, aggregate_key, next_seq), UPDATE (updated_at, gap_since)
        ON fairsched.aggregates FROM fairsched_producer;
    REVOKE UPDATE (next_seq, blocked_job_id, gap_since, updated_at)
        ON fairsched.aggregates FROM fairsched_worker;
    REVOKE UPDATE (status) ON fairsched.jobs FROM fairsched_producer;
    REVOKE USAGE ON SEQUENCE fairsched.jobs_id_seq FROM fairsched_producer;
    REVOKE USAGE ON SEQUENCE fairsched.job_events_id_seq FROM fairsched_worker;

    GRANT EXECUTE ON FUNCTION
        fairsched.jobs_enqueue(text, text[], jsonb[], integer[], text[], bigint[], timestamptz[],
                               integer[], text[], boolean, boolean, jsonb),
        fairsched.aggregates_lock(text, text[], text[], bigint[]),
        fairsched.aggregates_advance(text[], text[], text[]),
        fairsched.tenant_shares_activate(text, text[], timestamptz[])
      TO fairsched_producer, fairsched_admin;
    GRANT EXECUTE ON FUNCTION
        fairsched.lease_renew(bigint, text, bigint, jsonb, double precision),
        fairsched.leases_complete(text, bigint[], bigint[]),
        fairsched.leases_fail(text, bigint[], bigint[], text[], text[], text[]),
        fairsched.lease_release(bigint, text, bigint),
        fairsched.tenant_shares_settle(bigint[]),
        fairsched.aggregates_finish(bigint[]),
        fairsched.aggregates_advance(text[], text[], text[]),
        fairsched.tenant_shares_activate(text, text[], timestamptz[]),
        fairsched.recovery_sweep(text, integer),
        fairsched.tenant_shares_wake(integer),
        fairsched.claim_heads_refresh(text),
        fairsched.pass_floors_refresh(text),
        fairsched.schedule_due_lock(text),
        fairsched.schedule_tick_advance(text, timestamptz, bigint, timestamptz)
      TO fairsched_worker, fairsched_admin;
    GRANT EXECUTE ON FUNCTION fairsched.stack_function_install(text, text, text[], text[])
      TO fairsched_admin;

    -- The admin manages the producers' tenant grants (ALL through 001's default
    -- privileges); the roles do not read them.
    GRANT ALL ON fairsched.producer_tenants TO fairsched_admin;
END
$$;
