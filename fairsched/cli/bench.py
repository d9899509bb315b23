"""``fairsched bench``: end-to-end throughput of this install on the configured server."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from fairsched import load_settings
from fairsched.cli.root import ConfigOption, JsonOption, console, print_table
from fairsched.errors import InvalidInput

FIFO = ("fifo",)


def bench(
    jobs: int = typer.Option(20_000, "--jobs", min=100, max=10_000_000, help="no-op jobs per stack"),
    workers: int = typer.Option(2, "--workers", min=1, max=32, help="worker processes"),
    slots: int = typer.Option(50, "--slots", min=1, max=1000, help="slots per worker process"),
    policies: str = typer.Option(
        "weighted,aging,serial", "--policies", help="the composed stack measured beside fifo"
    ),
    config: str | None = ConfigOption,
    as_json: bool = JsonOption,
) -> None:
    """Measure jobs/s end to end (claim, run, complete) for fifo and a composed stack.

    Each stack runs on a scratch database of the configured server (FAIRSCHED_DATABASE_URL's,
    or the embedded one), dropped afterwards: your own database is not touched. Real
    ``fairsched worker`` processes run the built-in no-op handlers (fairsched.bench:app);
    the claim-only rate is one connection claiming one job at a time. For the design's
    bar and the peers, see the repository's lab: ``python -m bench``.
    """
    from fairsched import bench as product_bench
    from fairsched.db.embedded import embedded_dsn
    from fairsched.policy.registry import resolve

    stack = tuple(name.strip() for name in policies.split(",") if name.strip())
    if not stack:
        raise InvalidInput("--policies: name one policy or more, separated by commas")
    resolve(list(stack))  # an unknown policy fails here, before any database is made
    settings = load_settings(config)
    admin_dsn = settings.database_url or embedded_dsn(settings.data_dir, database="postgres")
    stacks = [FIFO] if stack == FIFO else [FIFO, stack]
    say = console(stderr=True)
    results = []
    for names in stacks:
        say.print(f"{'+'.join(names)}: {jobs:,} jobs, {workers} workers x {slots} slots")
        results.append(product_bench.measure(admin_dsn, names, jobs=jobs, workers=workers, slots=slots))
    data = product_bench.to_dict(results, jobs=jobs, workers=workers, slots=slots)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    table = Table(title="fairsched bench (no-op jobs, scratch databases)")
    for column in ("policies", "end to end jobs/s", "claims/s (1 per claim, one connection)", "jobs", "s"):
        table.add_column(column, justify="left" if column == "policies" else "right")
    for r in results:
        table.add_row(
            "+".join(r.policies),
            f"{r.jobs_per_second:,.0f}",
            f"{r.claims_per_second:,.0f}",
            f"{r.jobs:,}",
            f"{r.seconds:.2f}",
        )
    print_table(table)
    if "ratio" in data:
        ratio = data["ratio"]
        console().print(
            f"{ratio['stacks'][0]} / {ratio['stacks'][1]}: {ratio['jobs_per_second']:.2f} end to end, "
            f"{ratio['claims_per_second']:.2f} claim-only"
        )
