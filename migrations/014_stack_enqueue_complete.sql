-- Enqueue and completion become a stack's, like its claim: the engine composes each
-- stack's insert and completion from its policies' parts (fairsched/engine/stackstatements.py)
-- and installs them as functions of the stack. The engine's own functions stop naming a
-- policy's columns and functions: a policy fills its job columns at enqueue, and a tenant
-- order learns of new tenants and of completions through functions it names itself.

-- Kinds (008_roles.sql's claim and dry, and two more):
--   enqueue  ($1 queue, $2 tenants, $3 payloads, $4 priorities, $5 aggregate keys,
--            $6 aggregate seqs, $7 run ats, $8 max attempts, $9 idempotency keys,
--            $10 activate, $11 trace context) RETURNS TABLE (id, activated, notified,
--            inserted_status): bodies[1], after the producer's tenant grants are checked
--            (fairsched.producer_tenants_check). EXECUTE: the producer and the admin.
--   complete ($1 owner, $2 ids, $3 tokens) RETURNS TABLE (id): bodies[1], fenced by
--            owner, token and expiry in the statement itself; no queue to check (a
--            lease is its own proof). EXECUTE: the worker and the admin.
-- An enqueue function first checks that the queue, when it exists, has the stack: a
-- producer may only insert the way the queue's configuration asks for.
CREATE OR REPLACE FUNCTION fairsched.stack_function_install(p_name text, p_kind text, p_stack text[],
                                                            p_bodies text[])
    RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
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
$$;

-- Completion for stacks whose tenant order settles nothing at completion: fenced by
-- owner, token and expiry, every lease that no longer held recorded. A stack whose
-- tenant order does settle at completion has a complete function of its own.
CREATE OR REPLACE FUNCTION fairsched.leases_complete(p_owner text, p_ids bigint[], p_tokens bigint[])
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
$$;

-- The engine's batch insert of 008_roles.sql is superseded by the stacks' enqueue
-- functions: it refuses, so that no caller inserts a queue's jobs other than the way its
-- stack asks (its grants, re-run with 008's roles block, stay harmless).
CREATE OR REPLACE FUNCTION fairsched.jobs_enqueue(
    p_queue text, p_tenants text[], p_payloads jsonb[], p_priorities integer[],
    p_aggregate_keys text[], p_aggregate_seqs bigint[], p_run_ats timestamptz[],
    p_max_attempts integer[], p_idempotency_keys text[], p_serial boolean, p_activate boolean,
    p_trace_context jsonb)
    RETURNS TABLE (id bigint, activated bigint, notified bigint, inserted_status text)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'fairsched.jobs_enqueue is superseded by the enqueue function of each policy stack'
        USING ERRCODE = 'feature_not_supported',
              HINT = 'upgrade the fairsched client; an admin installs stack functions with fairsched config apply';
END
$$;
