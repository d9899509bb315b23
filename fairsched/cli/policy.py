"""Live tuning of a queue's policy stack and settings, and dropping a policy's schema:
fairsched policy show, set, setting, uninstall."""

from __future__ import annotations

from typing import Any

import typer

from fairsched.cli.render import policy_table, setting
from fairsched.cli.root import (
    LOOSE,
    ConfigOption,
    JsonOption,
    QueueArgument,
    open_client,
    print_json,
    print_table,
    whole_number,
)
from fairsched.db import migrate
from fairsched.db.connection import Role, connect
from fairsched.errors import InvalidInput

app = typer.Typer(
    help="A queue's policy stack and settings: show, set (live); uninstall a policy's schema.",
    no_args_is_help=True,
)

APPLIES_AT_ENQUEUE = {"max_attempts", "notify"}
"""Settings read when a job is enqueued: they apply to jobs enqueued after the change."""


@app.command("show")
def policy_show(
    queue: str = QueueArgument, config: str | None = ConfigOption, as_json: bool = JsonOption
) -> None:
    """A queue's policy stack, its parameters, leases, retries and tenant settings."""
    from fairsched.config import sync as configsync
    from fairsched.policy.owned import owned_effective, stack_settings

    with open_client(config) as client, client.connection() as conn:
        stored = configsync.queue_settings(conn, queue)
    values = {field: getattr(stored, field) for field in configsync.STORED_FIELDS}
    for owned in stack_settings(stored.policies):
        if "queue" in owned.setting.levels:
            values[owned.name] = owned_effective(stored, owned.name)
    tenants = {t: s.model_dump() for t, s in sorted(stored.tenants.items())}
    if as_json:
        print_json({"queue": queue, **values, "tenants": tenants})
    else:
        print_table(policy_table(queue, values, tenants))


@app.command("set", context_settings=LOOSE)
def policy_set(
    queue: str = QueueArgument,
    policies: str | None = typer.Option(None, "--policies", help="the stack, e.g. weighted,aging,serial"),
    aging_interval: float | None = typer.Option(
        None, "--aging-interval", help="aging: seconds per level (at most 30 days)"
    ),
    serial_gap: str | None = typer.Option(None, "--serial-gap", help="serial: strict or lowest"),
    serial_poison: str | None = typer.Option(None, "--serial-poison", help="serial: block or skip"),
    charge: str | None = typer.Option(None, "--charge", help="weighted: count or runtime"),
    tenant_cap: str | None = typer.Option(
        None, "--tenant-cap", help="weighted: default cap per tenant (1 to 1000000), or none"
    ),
    lease: float | None = typer.Option(
        None, "--lease", help="lease seconds per claim and renewal (at most 7 days)"
    ),
    max_runtime: float | None = typer.Option(
        None, "--max-runtime", help="seconds; no renewal past it (at most 7 days)"
    ),
    max_attempts: int | None = typer.Option(None, "--max-attempts", help="attempts before dead (1 to 1000)"),
    unknown_max_attempts: int | None = typer.Option(
        None, "--unknown-max-attempts", help="attempts for failures of unknown kind"
    ),
    backoff_base: float | None = typer.Option(
        None, "--backoff-base", help="first retry delay ceiling (0 to 1 day, in s)"
    ),
    backoff_max: float | None = typer.Option(
        None, "--backoff-max", help="longest retry delay (0 to 1 day, in s)"
    ),
    notify: bool | None = typer.Option(None, "--notify/--no-notify", help="pg_notify workers on enqueue"),
    finished_retention: str | None = typer.Option(
        None,
        "--finished-retention",
        help="keep succeeded and discarded jobs this long (1s to 365d: 90s, 30m, 24h, 7d)",
    ),
    dead_retention: str | None = typer.Option(
        None, "--dead-retention", help="keep dead jobs (replayable) this long (1h to 3650d)"
    ),
    history_retention: str | None = typer.Option(
        None, "--history-retention", help="keep attempt records and job events this long (60s to 3650d)"
    ),
    config: str | None = ConfigOption,
) -> None:
    """Change a queue's policies and settings; running workers follow within seconds.

    Claims read the stack (cached one second per process), lease, runtime, cap and
    charge; failures read attempts and backoff; max attempts is fixed per job at
    enqueue, so it applies to jobs enqueued next; a new aging interval re-keys the
    queued backlog too, in batches. The policies' settings (--aging-interval,
    --serial-gap, --serial-poison, --charge, --tenant-cap) need their policy in the
    stack; `fairsched policy setting` sets them too.
    Retention applies at the next prune (every worker prunes about once a minute).
    """
    from fairsched.config import live

    changes: dict[str, Any] = {
        "policies": [p.strip() for p in policies.split(",") if p.strip()] if policies is not None else None,
        "aging_interval_seconds": aging_interval,
        "serial_gap": serial_gap,
        "serial_poison": serial_poison,
        "charge": charge,
        "tenant_cap": None if tenant_cap is None else _optional_cap(tenant_cap),
        "lease_seconds": lease,
        "max_runtime_seconds": max_runtime,
        "max_attempts": max_attempts,
        "unknown_max_attempts": unknown_max_attempts,
        "backoff_base_seconds": backoff_base,
        "backoff_max_seconds": backoff_max,
        "notify": notify,
        "finished_retention_seconds": _duration("--finished-retention", finished_retention),
        "dead_retention_seconds": _duration("--dead-retention", dead_retention),
        "history_retention_seconds": _duration("--history-retention", history_retention),
    }
    given = {k: v for k, v in changes.items() if v is not None}
    if tenant_cap is not None:
        given["tenant_cap"] = changes["tenant_cap"] or None
    if not given:
        raise typer.BadParameter("give at least one setting to change, e.g. --lease 60")
    with open_client(config) as client, client.connection() as conn:
        before, after = live.queue_settings_set(conn, queue, given)
    changed = list(live.changed_fields(before, after))
    if not changed:
        typer.echo(f"{queue}: nothing changed")
        return
    for field, old, new in changed:
        note = " (jobs enqueued from now on)" if field in APPLIES_AT_ENQUEUE else ""
        typer.echo(f"{queue}.{field}: {setting(old)} -> {setting(new)}{note}")


@app.command("setting", context_settings=LOOSE)
def policy_setting(
    queue: str = QueueArgument,
    name: str = typer.Argument(..., help="a setting a policy of the queue's stack owns, e.g. rate"),
    value: str = typer.Argument(..., help="its value, e.g. 50/s, or off to remove it"),
    tenant: str | None = typer.Option(
        None, "--tenant", help="the tenant's own value (without it: the queue's default for its tenants)"
    ),
    config: str | None = ConfigOption,
) -> None:
    """Set or remove (off) a setting a policy of the queue's stack owns, for a tenant or as
    the queue's default; the next claim follows it. The policy checks the value; a queue
    whose stack does not name that policy is refused. Without its own value a tenant
    follows the queue's default."""
    setting_set(queue, name, value, tenant=tenant, config=config)


def setting_set(queue: str, name: str, value: str, *, tenant: str | None, config: str | None) -> None:
    """Set a policy's setting through the client and echo it (``queue/tenant: name value``);
    a value or setting the policies refuse exits 2 with one line, before connecting."""
    from fairsched.config import policysettings

    try:
        _owned, parsed = policysettings.value_checked(name, value, tenant=tenant)
    except InvalidInput as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    with open_client(config) as client:
        client.set_policy_setting(queue, name, value, tenant=tenant)
    shown = "off" if parsed is None else parsed
    typer.echo(f"{queue if tenant is None else f'{queue}/{tenant}'}: {name} {shown}")


@app.command("uninstall")
def policy_uninstall(
    name: str = typer.Argument(..., help="policy name"),
    yes: bool = typer.Option(False, "--yes", help="do not ask for confirmation"),
    config: str | None = ConfigOption,
) -> None:
    """Drop a policy's own schema: run its uninstall.sql and forget its recorded migrations.

    Refused while a queue's stack names the policy: change those stacks first
    (``fairsched policy set QUEUE --policies ...``). Refused too for a policy whose
    migrations come without an uninstall.sql: its schema stays. Run it before removing the
    policy's package, so that its uninstall.sql can run.
    """
    with (
        open_client(config) as client,
        connect(client.dsn, role=Role.MIGRATIONS, settings=client.settings) as conn,
    ):
        plan = migrate.policy_uninstall_plan(conn, name)
        if plan.script is None and not plan.migrations:
            typer.echo(f"policy {name}: no schema of its own, nothing to drop")
            return
        if not yes:
            if plan.script is not None:
                typer.echo(f"policy {name}: will run its {migrate.UNINSTALL}:\n{plan.script.rstrip()}")
            if plan.migrations:
                typer.echo(f"policy {name}: will forget its migrations {', '.join(plan.migrations)}")
            typer.confirm(f"uninstall the schema of policy {name}?", abort=True)
        done = migrate.policy_uninstall(conn, name)
    ran = f"ran {migrate.UNINSTALL}, " if done.script is not None else ""
    forgot = ", ".join(done.migrations) or "none"
    typer.echo(f"policy {name}: {ran}forgot its migrations ({forgot})")


def _optional_cap(text: str) -> int:
    """--tenant-cap: a positive whole number, or 0 for none."""
    return 0 if text.strip().lower() == "none" else whole_number("--tenant-cap", text)


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def _duration(name: str, text: str | None) -> int | None:
    """Whole seconds from ``86400``, ``90s``, ``30m``, ``24h`` or ``7d``; the range is the
    queue setting's to check.

    >>> _duration("--dead-retention", "7d"), _duration("--dead-retention", "3600")
    (604800, 3600)
    """
    if text is None:
        return None
    stripped = text.strip().lower()
    unit = DURATION_UNITS.get(stripped[-1:], 0)
    digits = stripped[:-1] if unit else stripped
    if not digits.isdigit() or len(digits) > 12:
        raise InvalidInput(
            f"{name} must be a whole number of seconds or of s, m, h, d (e.g. 24h), got {text[:40]!r}"
        )
    return int(digits) * (unit or 1)
