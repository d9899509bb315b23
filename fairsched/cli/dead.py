"""Dead jobs: fairsched dead list, show, replay, discard."""

from __future__ import annotations

import typer

from fairsched.cli.render import dead_table, job_tables
from fairsched.cli.root import ConfigOption, JsonOption, database_now, open_client, print_json, print_table

app = typer.Typer(help="Dead jobs: list, show, replay (same id) or discard.", no_args_is_help=True)


@app.command("list")
def dead_list(
    queue: str | None = typer.Option(None, "--queue", help="only this queue"),
    tenant: str | None = typer.Option(None, "--tenant", help="only this tenant"),
    code: str | None = typer.Option(
        None,
        "--code",
        help="only this error code, matched exactly (the error code column): a failed job's exception "
        "as its qualified class name, e.g. fairsched.errors.RetryableError (ValueError for a builtin), "
        "or lease_expired, max_runtime_exceeded",
    ),
    since: str | None = typer.Option(None, "--since", help="died within (2h, 30m, 1d) or since an ISO time"),
    limit: int = typer.Option(100, "--limit", min=1, max=10_000, help="at most this many"),
    config: str | None = ConfigOption,
    as_json: bool = JsonOption,
) -> None:
    """Dead jobs, newest first."""
    from fairsched.engine import dead
    from fairsched.observe.status import parse_since

    with open_client(config) as client, client.connection() as conn:
        after = parse_since(since, database_now(conn)) if since is not None else None
        jobs = dead.dead_list(conn, queue=queue, tenant=tenant, code=code, since=after, limit=limit)
    if as_json:
        print_json([vars(job) for job in jobs])
    elif not jobs:
        typer.echo("no dead jobs")
    else:
        print_table(dead_table(jobs))


@app.command("show")
def dead_show(
    job_id: int = typer.Argument(..., help="job id"),
    config: str | None = ConfigOption,
    as_json: bool = JsonOption,
) -> None:
    """A job (dead or not) with its payload and full history."""
    with open_client(config) as client:
        job = client.job_show(job_id)
    if as_json:
        print_json(job)
        return
    for table in job_tables(job):
        print_table(table)


@app.command("replay")
def dead_replay(job_id: int = typer.Argument(..., help="job id"), config: str | None = ConfigOption) -> None:
    """Run a dead job again: same id, fresh attempts, history kept."""
    with open_client(config) as client:
        client.dead_replay(job_id, by="cli")
    typer.echo(f"job {job_id} replayed: pending again")


@app.command("discard")
def dead_discard(job_id: int = typer.Argument(..., help="job id"), config: str | None = ConfigOption) -> None:
    """Resolve a dead job without running it (the row and its history stay)."""
    with open_client(config) as client:
        client.dead_discard(job_id, by="cli")
    typer.echo(f"job {job_id} discarded")
