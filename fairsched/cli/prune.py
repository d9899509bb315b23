"""Retention by hand: fairsched prune."""

from __future__ import annotations

import typer
from rich.table import Table

from fairsched.cli.root import ConfigOption, JsonOption, open_client, print_json, print_table


def prune(
    dry_run: bool = typer.Option(False, "--dry-run", help="change nothing; count what would go"),
    queue: str | None = typer.Option(None, "--queue", help="only this queue"),
    config: str | None = ConfigOption,
    as_json: bool = JsonOption,
) -> None:
    """Delete jobs and attempt history past their queue's retention, now.

    Workers do this on their own about once a minute; this runs one pass, in batches of
    1000 rows, and prints the rows removed per queue and kind (finished: succeeded and
    discarded jobs; dead: dead jobs; history: attempt records and job events). With
    --dry-run nothing changes and it counts every row past retention now.
    """
    from fairsched.engine.prune import KINDS

    with open_client(config) as client:
        result = client.prune(queue=queue, dry_run=dry_run)
    if as_json:
        print_json(
            {
                "dry_run": result.dry_run,
                "skipped": result.skipped,
                "queues": result.removed,
                "failed": result.failed,
                "total": result.total,
            }
        )
    else:
        verb = "would remove" if dry_run else "removed"
        table = Table("queue", *KINDS, title=f"rows {verb}")
        for name, kinds in sorted(result.removed.items()):
            table.add_row(name, *(str(kinds[kind]) for kind in KINDS))
        print_table(table)
        if result.skipped:
            typer.echo("another prune is running: this one stopped early and left the rest to it")
        for name, error in sorted(result.failed.items()):
            typer.echo(f"queue {name}: prune failed: {error}", err=True)
    if result.failed:
        raise typer.Exit(1)
