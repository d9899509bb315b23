-- weighted: a tenant's cap is refused on a queue whose policy stack does not name this
-- policy, whoever calls tenant_share_set (the admin and web roles included): only this
-- policy's tenant order keeps tenants within their caps, and a cap it does not enforce
-- would say what does not happen. Removing a cap (0) and weights stay allowed on every
-- stack. The queue's row is share-locked while the share changes, so that its stack
-- cannot change under the check.
--
-- Same signature, result, owner and grants as 001_adopt_shares.sql defined; only the body
-- changes (CREATE OR REPLACE keeps the privileges and the comment).

CREATE OR REPLACE FUNCTION fairsched.tenant_share_set(p_queue text, p_tenant text, p_weight double precision, p_cap integer, p_by text)
    RETURNS TABLE (weight double precision, cap integer)
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
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
$$;
