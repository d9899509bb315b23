"""The ``fairsched`` command line."""

from __future__ import annotations

import typer

from fairsched import Client, load_settings
from fairsched.errors import FairschedError

app = typer.Typer(help="fairsched: a multi-tenant fair job scheduler on PostgreSQL.", no_args_is_help=True)


@app.command()
def migrate(config: str | None = typer.Option(None, "--config", help="TOML config file")) -> None:
    """Apply pending schema migrations."""
    with Client.from_settings(load_settings(config)) as client:
        applied = client.migrate()
    typer.echo(f"applied: {', '.join(applied)}" if applied else "schema is up to date")


def main() -> None:
    """Entry point of the console script."""
    try:
        app()
    except FairschedError as e:
        typer.echo(f"error: {e}", err=True)
        raise SystemExit(1) from None
