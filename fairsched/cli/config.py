"""Configuration between a TOML file and the database: fairsched config check, apply, diff, export."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from fairsched import load_settings
from fairsched.cli.root import ConfigOption, JsonOption, database_now, open_client, print_json
from fairsched.errors import ConfigError
from fairsched.settings import TenantSettings

app = typer.Typer(
    help="Configuration between a TOML file and the database: check, apply, diff, export.",
    no_args_is_help=True,
)

FileArgument = typer.Argument(None, help="TOML file (default: --config / FAIRSCHED_CONFIG)")


def _config_file(file: Path | None, config: str | None) -> Path:
    chosen = file or (Path(config) if config else None)
    if chosen is None:
        raise typer.BadParameter("give a FILE or set --config / FAIRSCHED_CONFIG", param_hint="FILE")
    return chosen


@app.command("check")
def config_check(
    file: Path | None = FileArgument, config: str | None = ConfigOption, as_json: bool = JsonOption
) -> None:
    """Validate a config file (and FAIRSCHED_* overrides); name every bad key and value."""
    from fairsched.config import sync as configsync

    path = _config_file(file, config)
    settings = load_settings(path)
    configsync.check(settings, str(path))
    if as_json:
        print_json(
            {
                "file": str(path),
                "queues": sorted(settings.queues),
                "tenants": {name: t.weight for name, t in sorted(settings.tenants.items())},
            }
        )
        return
    queues = ", ".join(sorted(settings.queues)) or "none"
    typer.echo(f"{path}: ok (queues: {queues}; tenants: {len(settings.tenants)})")


@app.command("apply")
def config_apply(
    file: Path | None = FileArgument,
    config: str | None = ConfigOption,
    prune: bool = typer.Option(
        False,
        "--prune",
        help="also remove queues, per-queue tenant settings and schedules absent from the file",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="with --prune: list what it would remove, change nothing"
    ),
    force: bool = typer.Option(
        False, "--force", help="with --prune: remove queues whose jobs all finished (their rows stay)"
    ),
) -> None:
    """Write the file's queues, policies, tenant weights, caps and rates, and its
    schedules, to the database, atomically.

    Top-level [tenants.X] apply to every queue whose stack has the weighted policy (their
    rates and other policies' settings: every queue whose stack has the owning policy),
    unless the queue lists the tenant itself. A file queue's rates (and other policies'
    settings) are the file's: those it no longer gives are removed. Nothing else absent from
    the file is deleted unless --prune: then queues absent from the file go with their fairness state, and
    tenant settings a queue no longer gives go back to the defaults (an idle tenant's
    row goes). A queue that holds jobs is refused and nothing changes: unfinished or dead
    jobs always (drain it, replay or discard them first), finished ones unless --force
    (their rows stay as history). A changed aging interval re-keys the queued jobs.
    """
    from fairsched.config import sync as configsync

    if (dry_run or force) and not prune:
        flag = "--dry-run" if dry_run else "--force"
        raise typer.BadParameter(f"{flag} goes with --prune (config diff shows what apply would write)")
    path = _config_file(file, config)
    settings = load_settings(path)
    if not settings.queues:
        raise ConfigError(f"{path}: declares no queues; nothing to apply")
    configsync.check(settings, str(path))
    with open_client(None, settings) as client, client.connection() as conn:
        if dry_run:
            for removal in configsync.prune_plan(conn, settings, force=force):
                typer.echo(removal.line(done=False))
            typer.echo("dry run: nothing changed")
            return
        applied = configsync.apply(conn, settings, prune=prune, force=force)
    typer.echo(f"applied {len(settings.queues)} queues: {', '.join(sorted(settings.queues))}")
    if settings.schedules:
        names = ", ".join(sorted(s.name for s in settings.schedules))
        typer.echo(f"applied {len(settings.schedules)} schedules: {names}")
    for removal in applied.removed:
        typer.echo(removal.line(done=True))
    for queue, done in sorted(applied.reconfigured.items()):
        if done.jobs:
            names = ", ".join(sorted(done.settings))
            typer.echo(f"queues.{queue}: {names} changed, {done.jobs} queued jobs updated")


@app.command("diff")
def config_diff(
    file: Path | None = FileArgument,
    config: str | None = ConfigOption,
    exit_code: bool = typer.Option(False, "--exit-code", help="exit 1 when something differs"),
    as_json: bool = JsonOption,
) -> None:
    """What differs between a config file and the database (queues, policies, tenants,
    schedules)."""
    from fairsched.config import compare, schedules
    from fairsched.config import sync as configsync
    from fairsched.schedules.store import schedules_read

    path = _config_file(file, config)
    settings = load_settings(path)
    configsync.check(settings, str(path))
    with open_client(None, settings) as client, client.connection() as conn:
        differences = compare.diff(settings, configsync.database_settings(conn))
        differences += schedules.schedules_diff(settings, schedules_read(conn))
    if as_json:
        print_json([vars(d) | {"file": _plain(d.file), "database": _plain(d.database)} for d in differences])
    elif differences:
        for difference in differences:
            typer.echo(difference.line())
    else:
        typer.echo(f"{path}: the database matches")
    if differences and exit_code:
        raise typer.Exit(1)


def _plain(value: Any) -> Any:
    return value.model_dump() if isinstance(value, TenantSettings) else value


@app.command("export")
def config_export(
    output: Path | None = typer.Option(None, "--output", "-o", help="write to this file, not stdout"),
    config: str | None = ConfigOption,
) -> None:
    """The database's queues, policies, tenant settings and schedules as TOML (config apply
    reads it back)."""
    from fairsched.config import compare, schedules
    from fairsched.config import sync as configsync
    from fairsched.schedules.store import schedules_read

    with open_client(config) as client, client.connection() as conn:
        text = compare.export_toml(configsync.database_settings(conn), now=database_now(conn))
        text += schedules.schedules_toml(schedules_read(conn))
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, "utf-8")
        typer.echo(f"wrote {output}", err=True)
