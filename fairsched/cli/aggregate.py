"""Serial aggregates blocked by a dead job: fairsched aggregate list, unblock, skip."""

from __future__ import annotations

import typer

from fairsched.cli.render import blocked_table
from fairsched.cli.root import (
    ConfigOption,
    JsonOption,
    QueueArgument,
    TenantArgument,
    open_client,
    print_json,
    print_table,
)

app = typer.Typer(help="Serial aggregates blocked by a dead job: list, unblock, skip.", no_args_is_help=True)

KeyArgument = typer.Argument(..., help="aggregate key")


@app.command("list")
def aggregate_list(
    queue: str | None = typer.Option(None, "--queue", help="only this queue"),
    config: str | None = ConfigOption,
    as_json: bool = JsonOption,
) -> None:
    """Aggregates blocked by a dead job (poison mode block), longest-blocked first."""
    with open_client(config) as client:
        blocked = client.aggregates_blocked(queue=queue)
    if as_json:
        print_json([vars(b) for b in blocked])
    elif not blocked:
        typer.echo("no blocked aggregates")
    else:
        print_table(blocked_table(blocked))


@app.command("unblock")
def aggregate_unblock(
    queue: str = QueueArgument,
    tenant: str = TenantArgument,
    key: str = KeyArgument,
    config: str | None = ConfigOption,
) -> None:
    """Run the aggregate's dead head again (same id, fresh attempts); the rest follows it."""
    with open_client(config) as client:
        job_id = client.aggregate_unblock(queue, tenant, key, by="cli")
    typer.echo(f"aggregate {key} unblocked: job {job_id} pending again")


@app.command("skip")
def aggregate_skip(
    queue: str = QueueArgument,
    tenant: str = TenantArgument,
    key: str = KeyArgument,
    config: str | None = ConfigOption,
) -> None:
    """Discard the aggregate's dead head and let its next job run."""
    with open_client(config) as client:
        job_id = client.aggregate_skip(queue, tenant, key, by="cli")
    typer.echo(f"aggregate {key}: job {job_id} discarded, the next one may run")
