"""Producer tenant grants: which tenants a producer role may enqueue for.

A grant names a role and a tenant, or a prefix (written ``acme-*``; ``*`` alone is every
tenant). An enqueue for a tenant outside the grants of the session's login role is
refused by the database (``fairsched.producer_tenants_check``, migrations/008_roles.sql).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.engine.enqueue import MAX_TENANT_CHARS, check_label
from fairsched.errors import InvalidInput

MAX_ROLE_CHARS = 63


@dataclass(frozen=True)
class TenantGrant:
    """One grant: ``tenant`` exactly, or every tenant starting with it (``exact`` false)."""

    role: str
    tenant: str
    exact: bool
    granted_at: datetime

    @property
    def pattern(self) -> str:
        """The grant as written on the command line: ``acme``, ``acme-*`` or ``*``."""
        return self.tenant if self.exact else f"{self.tenant}*"


def parse_pattern(pattern: str) -> tuple[str, bool]:
    """``acme`` -> (``acme``, exact); ``acme-*`` -> (``acme-``, prefix); ``*`` -> every tenant."""
    if pattern.endswith("*"):
        prefix = pattern[:-1]
        if prefix:
            check_label("tenant prefix", prefix, MAX_TENANT_CHARS)
        return prefix, False
    return check_label("tenant", pattern, MAX_TENANT_CHARS), True


def _checked(conn: psycopg.Connection, role: str, pattern: str) -> dict[str, object]:
    check_label("role", role, MAX_ROLE_CHARS)
    tenant, exact = parse_pattern(pattern)
    with operation("role_exists"):
        row = conn.execute(QUERIES["role_exists"], {"role": role}).fetchone()
    if not (row and row[0]):
        raise InvalidInput(
            f"no role {role!r} in this cluster: create it first (CREATE ROLE ... IN ROLE fairsched_producer)"
        )
    return {"role": role, "tenant": tenant, "exact": exact}


def tenant_grant(conn: psycopg.Connection, role: str, pattern: str) -> bool:
    """Let ``role`` enqueue for ``pattern``; False when it already could by this grant."""
    params = _checked(conn, role, pattern)
    with operation("producer_tenant_grant"):
        return conn.execute(QUERIES["producer_tenant_grant"], params).fetchone() is not None


def tenant_revoke(conn: psycopg.Connection, role: str, pattern: str) -> bool:
    """Take the grant ``pattern`` of ``role`` back; False when there was none."""
    params = _checked(conn, role, pattern)
    with operation("producer_tenant_revoke"):
        return conn.execute(QUERIES["producer_tenant_revoke"], params).fetchone() is not None


def tenant_grants(conn: psycopg.Connection) -> list[TenantGrant]:
    """Every grant, by role."""
    with operation("producer_tenants_list"):
        return [TenantGrant(*row) for row in conn.execute(QUERIES["producer_tenants_list"]).fetchall()]
