"""Producer tenant grants: fairsched role grant-tenant, revoke-tenant, list."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import typer

from fairsched.cli.root import ConfigOption, JsonOption, open_client, print_json, print_table

app = typer.Typer(
    help="Which tenants each producer role may enqueue for (docs/security.md).", no_args_is_help=True
)

RoleArgument = typer.Argument(..., help="a login or group role, e.g. a member of fairsched_producer")
PatternArgument = typer.Argument(..., help="a tenant, a prefix ending in * (acme-*), or * for every tenant")


@app.command("grant-tenant")
def role_grant_tenant(
    role: str = RoleArgument, tenant: str = PatternArgument, config: str | None = ConfigOption
) -> None:
    """Let ROLE (and its members) enqueue for TENANT, or for every tenant matching a prefix."""
    from fairsched.config.producers import tenant_grant

    added = _change(tenant_grant, role, tenant, config)
    typer.echo(f"{role} may enqueue for {tenant}" + ("" if added else " (already granted)"))


@app.command("revoke-tenant")
def role_revoke_tenant(
    role: str = RoleArgument, tenant: str = PatternArgument, config: str | None = ConfigOption
) -> None:
    """Take back a grant made with grant-tenant (the same TENANT or prefix)."""
    from fairsched.config.producers import tenant_revoke

    if not _change(tenant_revoke, role, tenant, config):
        typer.echo(f"error: {role} has no grant {tenant}", err=True)
        raise typer.Exit(1)
    typer.echo(f"{role} may no longer enqueue for {tenant}")


def _change(
    change: Callable[[psycopg.Connection, str, str], bool], role: str, tenant: str, config: str | None
) -> bool:
    with open_client(config) as client, client.connection() as conn:
        return change(conn, role, tenant)


@app.command("list")
def role_list(config: str | None = ConfigOption, as_json: bool = JsonOption) -> None:
    """Every producer tenant grant, by role."""
    from fairsched.cli.render import grants_table
    from fairsched.config.producers import tenant_grants

    with open_client(config) as client, client.connection() as conn:
        grants = tenant_grants(conn)
    if as_json:
        print_json([{"role": g.role, "tenant": g.pattern, "granted_at": g.granted_at} for g in grants])
    elif not grants:
        typer.echo("no tenant grants: producers may enqueue for no tenant (admins and the owner for any)")
    else:
        print_table(grants_table(grants))
