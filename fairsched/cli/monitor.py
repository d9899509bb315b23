"""Watching the queues: fairsched status, top."""

from __future__ import annotations

import typer

from fairsched import load_settings
from fairsched.cli.render import status_view
from fairsched.cli.root import ConfigOption, JsonOption, console, open_client, print_json


def status(config: str | None = ConfigOption, as_json: bool = JsonOption) -> None:
    """Queues and tenants now: claimable, running, oldest claimable age, shares vs entitled,
    dead jobs, starving tenants and blocked aggregates."""
    from fairsched.observe import status as status_mod
    from fairsched.observe.snapshot import ExporterSettings

    settings = load_settings(config)
    with open_client(None, settings) as client, client.connection() as conn:
        report = status_mod.read_status(conn, settings, ExporterSettings.load())
    if as_json:
        print_json(report.as_dict())
    else:
        console().print(status_view(report, {}))


def top(
    interval: float = typer.Option(2.0, "--interval", min=0.1, help="seconds between refreshes"),
    iterations: int | None = typer.Option(None, "--iterations", min=1, help="stop after this many"),
    once: bool = typer.Option(False, "--once", help="one refresh, then exit"),
    config: str | None = ConfigOption,
) -> None:
    """status, refreshing in the terminal; shares over the last interval. Ctrl-C ends it.

    The first refresh (the only one with --once) has no interval before it: it shows
    each tenant's share of the claims counted so far, as status does.
    """
    import time

    from rich.live import Live

    from fairsched.observe import status as status_mod
    from fairsched.observe.snapshot import ExporterSettings

    settings = load_settings(config)
    limits = ExporterSettings.load()
    remaining = 1 if once else iterations
    out = console()
    with open_client(None, settings) as client, client.connection() as conn:
        previous: status_mod.Status | None = None
        live = Live(console=out, auto_refresh=False) if out.is_terminal else None
        try:
            if live is not None:
                live.start()
            while remaining is None or remaining > 0:
                report = status_mod.read_status(conn, settings, limits)
                recent = status_mod.interval_shares(previous, report)
                view = status_view(report, recent, interval if previous is not None else None)
                if live is not None:
                    live.update(view, refresh=True)
                else:
                    out.print(view)
                previous = report
                remaining = None if remaining is None else remaining - 1
                if remaining != 0:
                    time.sleep(interval)
        except KeyboardInterrupt:
            pass
        finally:
            if live is not None:
                live.stop()
