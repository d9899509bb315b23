-- name: producer_tenant_grant
-- Let a role enqueue for a tenant (exact) or every tenant starting with a prefix.
INSERT INTO fairsched.producer_tenants (role_name, tenant, exact)
SELECT r.rolname, %(tenant)s, %(exact)s FROM pg_roles AS r WHERE r.rolname = %(role)s
ON CONFLICT DO NOTHING
RETURNING role_name

-- name: producer_tenant_revoke
-- Take a tenant (or prefix) grant back; returns what was revoked.
DELETE FROM fairsched.producer_tenants
 WHERE role_name = %(role)s AND tenant = %(tenant)s AND exact = %(exact)s
RETURNING role_name

-- name: producer_tenants_list
-- Every producer tenant grant, by role.
SELECT role_name, tenant, exact, granted_at FROM fairsched.producer_tenants
 ORDER BY role_name, tenant, exact

-- name: role_exists
-- Whether a role exists in the cluster.
SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %(role)s)
