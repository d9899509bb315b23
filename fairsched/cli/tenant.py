"""Live tuning of tenants: fairsched tenant list, show, weight, cap, rate."""

from __future__ import annotations

from typing import Any

import typer

from fairsched.cli.render import fields_table, number, tenant_table
from fairsched.cli.root import (
    LOOSE,
    ConfigOption,
    JsonOption,
    QueueArgument,
    TenantArgument,
    number_in,
    open_client,
    print_json,
    print_table,
    whole_number,
)

QUEUE_CAP = "tenant_cap"
"""The queue's default cap of its tenants: a setting of the weighted policy."""

app = typer.Typer(
    help="Tenants of a queue: list, show, set weight, cap or rate (live).", no_args_is_help=True
)


@app.command("list")
def tenant_list(
    queue: str = QueueArgument, config: str | None = ConfigOption, as_json: bool = JsonOption
) -> None:
    """Every tenant with share state on a queue: weight, cap, running, claims, shares."""
    from fairsched.config import sync as configsync
    from fairsched.policy.owned import owned_value

    with open_client(config) as client, client.connection() as conn:
        stored = configsync.queue_settings(conn, queue)
        shares = client.tenant_shares(queue)
    queue_cap = owned_value(stored, QUEUE_CAP)
    claimed = sum(s.claimed_total for s in shares)
    active_weight = sum(s.weight for s in shares if s.active)
    rows: list[dict[str, Any]] = [
        {
            "tenant": s.tenant,
            "weight": s.weight,
            "cap": s.cap,
            "effective_cap": s.cap or queue_cap,
            "running": s.running,
            "active": s.active,
            "claimed_total": s.claimed_total,
            "share": s.claimed_total / claimed if claimed else None,
            "entitled": s.weight / active_weight if s.active and active_weight else 0.0,
        }
        for s in shares
    ]
    if as_json:
        print_json(rows)
    elif not rows:
        typer.echo(f"no tenant has share state on {queue} yet (every tenant weighs 1)")
    else:
        print_table(tenant_table(queue, rows))


@app.command("show")
def tenant_show(
    queue: str = QueueArgument,
    tenant: str = TenantArgument,
    config: str | None = ConfigOption,
    as_json: bool = JsonOption,
) -> None:
    """One tenant of a queue: weight, cap, the settings its stack's policies own (rate),
    share state and its jobs by state."""
    from fairsched.config import policysettings
    from fairsched.config import sync as configsync
    from fairsched.engine import enqueue
    from fairsched.observe.snapshot import ExporterSettings
    from fairsched.observe.status import tenant_jobs, tenant_levels, tenant_share
    from fairsched.policy.owned import owned_value

    enqueue.check_label("tenant", tenant, enqueue.MAX_TENANT_CHARS)
    with open_client(config) as client, client.connection() as conn:
        stored = configsync.queue_settings(conn, queue)
        share = tenant_share(conn, queue, tenant) or {}
        jobs = tenant_jobs(conn, queue, tenant, ExporterSettings.load())
        levels = tenant_levels(conn, stored.policies, queue, tenant)
    shown: dict[str, Any] = {
        "queue": queue,
        "tenant": tenant,
        "weight": share.get("weight", 1.0),
        "cap": share.get("cap"),
        "queue_tenant_cap": owned_value(stored, QUEUE_CAP),
        "active": share.get("active", False),
        "claimed_total": share.get("claimed_total", 0),
        "charged_total": share.get("charged_total", 0.0),
        "runtime_estimate_seconds": share.get("runtime_estimate"),
        **policysettings.tenant_values(stored, tenant),
        **levels,
        **jobs,
    }
    if as_json:
        print_json(shown)
    else:
        print_table(fields_table(shown))


@app.command("weight", context_settings=LOOSE)
def tenant_weight(
    queue: str = QueueArgument,
    tenant: str = TenantArgument,
    weight: str = typer.Argument(..., help="a number from 0.001 to 1000000"),
    config: str | None = ConfigOption,
) -> None:
    """Set a tenant's weight on a queue; claims follow it within seconds, backlog included."""
    from fairsched import bounds
    from fairsched.config.live import tenant_set

    value = number_in("weight", weight, bounds.WEIGHT_MIN, bounds.WEIGHT_MAX)
    with open_client(config) as client, client.connection() as conn:
        note = tenant_set(conn, queue, tenant, weight=value)
    typer.echo(f"{queue}/{tenant}: weight {number(value)}{note}")


@app.command("cap", context_settings=LOOSE)
def tenant_cap(
    queue: str = QueueArgument,
    tenant: str = TenantArgument,
    cap: str = typer.Argument(..., help="most running jobs (1 to 1000000), or none"),
    config: str | None = ConfigOption,
) -> None:
    """Set or remove (none) a tenant's cap of running jobs on a queue.

    A cap is refused on a queue whose policy stack enforces none (one without weighted);
    none is allowed on every queue."""
    from fairsched.config.live import tenant_set

    value = 0 if cap.strip().lower() == "none" else whole_number("cap", cap)
    with open_client(config) as client, client.connection() as conn:
        note = tenant_set(conn, queue, tenant, cap=value)
    typer.echo(f"{queue}/{tenant}: cap {value or 'none'}{note}")


@app.command("rate", context_settings=LOOSE)
def tenant_rate(
    queue: str = QueueArgument,
    tenant: str = TenantArgument,
    rate: str = typer.Argument(..., help="most jobs claimed per period: N/s, N/m, N/h or N/d, or off"),
    config: str | None = ConfigOption,
) -> None:
    """Set or remove (off) a tenant's rate limit on a queue whose stack has the rate-limiting
    policy; the next claim follows it. Without its own rate a tenant follows the queue's
    default (`fairsched policy setting QUEUE rate RATE --tenant TENANT` does the same)."""
    from fairsched.cli.policy import setting_set
    from fairsched.config.rates import RATE

    setting_set(queue, RATE, rate, tenant=tenant, config=config)
