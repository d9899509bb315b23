"""fairsched web: the dashboard (needs the ``web`` extra)."""

from __future__ import annotations

import typer

from fairsched.cli.root import ConfigOption


def web(
    ctx: typer.Context,
    bind: str | None = typer.Option(None, "--bind", help="host:port (default: web.bind, 127.0.0.1:8080)"),
    config: str | None = ConfigOption,
) -> None:
    """Serve the dashboard: queues, tenants' shares against their entitlement, starvation,
    aggregates, dead jobs; changes only with web.actions on (see docs/web.md)."""
    from fairsched import load_settings
    from fairsched.cli.root import setup_logs
    from fairsched.web.serve import serve

    settings = load_settings(config)
    setup_logs(ctx, settings)
    serve(settings, bind, on_listening=lambda url: typer.echo(f"fairsched web on {url}", err=True))
