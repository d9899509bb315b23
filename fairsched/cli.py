"""The ``fairsched`` command line."""

from __future__ import annotations

import typer

from fairsched import Client, load_settings
from fairsched.errors import FairschedError

app = typer.Typer(help="fairsched: a multi-tenant fair job scheduler on PostgreSQL.", no_args_is_help=True)

ConfigOption = typer.Option(None, "--config", envvar="FAIRSCHED_CONFIG", help="TOML config file")


@app.command()
def migrate(config: str | None = ConfigOption) -> None:
    """Apply pending schema migrations."""
    with Client.from_settings(load_settings(config)) as client:
        applied = client.migrate()
    typer.echo(f"applied: {', '.join(applied)}" if applied else "schema is up to date")


@app.command()
def worker(
    app_spec: str = typer.Option(..., "--app", help="handlers, as module:attribute"),
    queue: list[str] = typer.Option(..., "--queue", help="queue=slots, repeatable"),
    config: str | None = ConfigOption,
    owner: str | None = typer.Option(None, "--owner", help="lease owner name (default host:pid)"),
    metrics_port: int | None = typer.Option(None, "--metrics-port", help="serve /metrics on this port"),
) -> None:
    """Run one worker process: pooled slots per queue, until SIGTERM/SIGINT."""
    from fairsched.worker import load_app, parse_queue_slots, run_worker

    settings = load_settings(config)
    handlers = load_app(app_spec)
    slots = parse_queue_slots(queue)
    client = Client.from_settings(settings)
    raise typer.Exit(
        run_worker(handlers, slots, settings, dsn=client.dsn, owner=owner, metrics_port=metrics_port)
    )


@app.command()
def exporter(
    config: str | None = ConfigOption,
    port: int = typer.Option(9464, "--port", help="HTTP port for /metrics"),
    host: str = typer.Option("0.0.0.0", "--host", help="address to bind"),
) -> None:
    """Serve the cluster-wide, database-derived metrics on /metrics."""
    from fairsched.exporter import serve

    settings = load_settings(config)
    client = Client.from_settings(settings)
    serve(settings, dsn=client.dsn, host=host, port=port)


def main() -> None:
    """Entry point of the console script."""
    try:
        app()
    except FairschedError as e:
        typer.echo(f"error: {e}", err=True)
        raise SystemExit(1) from None
