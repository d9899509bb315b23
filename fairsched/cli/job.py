"""One job at a time: fairsched job cancel."""

from __future__ import annotations

import typer

from fairsched.cli.root import ConfigOption, JsonOption, open_client, print_json

app = typer.Typer(help="Jobs: cancel.", no_args_is_help=True)


@app.command("cancel")
def job_cancel(
    job_ids: list[int] | None = typer.Argument(None, help="job ids (or --queue and --tenant)"),
    queue: str | None = typer.Option(None, "--queue", help="with --tenant: all unfinished jobs of a tenant"),
    tenant: str | None = typer.Option(None, "--tenant", help="with --queue: the tenant whose jobs to cancel"),
    by: str = typer.Option("cli", "--by", help="who cancels, as the audit trail records it"),
    config: str | None = ConfigOption,
    as_json: bool = JsonOption,
) -> None:
    """Cancel jobs: a pending or waiting job is cancelled at once; a running one is asked
    to stop (its handler sees it within about a second) and ends cancelled unless it
    succeeds first. Finished jobs are named and left alone: the exit code is then 1."""
    with open_client(config) as client:
        if job_ids:
            result = client.cancel_many(job_ids, queue=queue, tenant=tenant, by=by)
        else:
            result = client.cancel_many(queue=queue, tenant=tenant, by=by)
    if as_json:
        print_json(
            {
                "cancelled": result.cancelled,
                "requested": result.requested,
                "finished": {str(k): v for k, v in result.finished.items()},
                "not_found": result.not_found,
            }
        )
    else:
        typer.echo(f"cancelled: {len(result.cancelled)}; asked to stop (running): {len(result.requested)}")
        for job_id, status in sorted(result.finished.items()):
            typer.echo(f"error: job {job_id} already finished ({status}): not cancelled", err=True)
        for job_id in result.not_found:
            typer.echo(f"error: no job with id {job_id}", err=True)
    if result.finished or result.not_found:
        raise typer.Exit(1)
