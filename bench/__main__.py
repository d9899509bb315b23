"""``python -m bench`` (from the repository's root): the lab's command line.

Runs the scenarios of :mod:`bench.bench` against the bar of DESIGN.md §7 and the peers,
or (``--soak``) the crash-injection soak of :mod:`bench.soak`. The peers and the charts
need ``pip install -r bench/requirements.txt``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import typer

from fairsched import load_settings
from fairsched.cli.root import ConfigOption, JsonOption, console
from fairsched.errors import FairschedError, InvalidInput

app = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False)


@app.command()
def lab(
    scenario: list[str] = typer.Option(
        [],
        "--scenario",
        help="claims, backlog, churn, e2e, noisy, shares, memory, retention, rate (repeatable; default all)",
    ),
    churn_backlog: int = typer.Option(
        1_000_000, "--churn-backlog", min=1000, help="backlog of the churn scenario (as many are churned)"
    ),
    jobs: int = typer.Option(20_000, "--jobs", min=1000, help="jobs per end-to-end run"),
    large_backlog: int = typer.Option(
        1_000_000, "--large-backlog", min=1000, help="backlog of the end-to-end run timed on a large backlog"
    ),
    claims_backlog: int = typer.Option(
        100_000, "--claims-backlog", min=25_000, help="backlog of the claims scenario (it claims 19,200)"
    ),
    backlogs: str = typer.Option(
        "10000,100000,1000000", "--backlogs", help="backlog sizes of the backlog scenario, ascending"
    ),
    noisy_seconds: float = typer.Option(
        15.0, "--noisy-seconds", min=1, max=3600, help="length of each noisy-neighbour run"
    ),
    shares_claims: int = typer.Option(
        10_000, "--shares-claims", min=100, help="claims counted in the shares scenario"
    ),
    rate_seconds: float = typer.Option(
        60.0, "--rate-seconds", min=2, max=3600, help="window of the rate scenario with its limits set"
    ),
    workers: int = typer.Option(2, "--workers", min=1, max=32, help="worker processes"),
    slots: int = typer.Option(50, "--slots", min=1, max=1000, help="slots per worker process"),
    repeats: int = typer.Option(3, "--repeats", min=1, max=20, help="runs per figure (median, min, max)"),
    policies: str = typer.Option("weighted,aging,serial", "--policies", help="the composed stack measured"),
    output: Path | None = typer.Option(None, "--output", help="also write the JSON results here"),
    plot: Path | None = typer.Option(None, "--plot", help="write PNG charts into this folder"),
    soak: bool = typer.Option(False, "--soak", help="run the crash-injection soak instead"),
    duration: float = typer.Option(600.0, "--duration", min=1, help="soak length in seconds"),
    config: str | None = ConfigOption,
    as_json: bool = JsonOption,
) -> None:
    """Measure fairsched against the bar (DESIGN.md section 7) and the peers, as ratios.

    Every scenario runs on scratch databases of one server: FAIRSCHED_DATABASE_URL's,
    or the embedded one. ``--soak`` runs producers and workers with random kill -9
    and SIGSTOP for ``--duration`` seconds and prints the ledger's counts.
    """
    from bench import bench as bench_run
    from bench.peers import peers_available
    from fairsched.bench import scratch_db
    from fairsched.db.embedded import embedded_dsn

    settings = load_settings(config)
    admin_dsn = settings.database_url or embedded_dsn(settings.data_dir, database="postgres")
    if soak:
        from bench.soak import run_soak

        with scratch_db(admin_dsn, migrate=False) as dsn:
            result = run_soak(dsn, duration, progress=lambda line: console(stderr=True).print(line))
        typer.echo(result.summary())
        raise typer.Exit(0 if result.ok else 1)
    chosen = scenario or list(bench_run.SCENARIOS)
    unknown = sorted(set(chosen) - set(bench_run.SCENARIOS))
    if unknown:
        raise InvalidInput(f"unknown scenario {', '.join(unknown)}; known: {', '.join(bench_run.SCENARIOS)}")
    sizes = bench_run.parse_backlogs(backlogs)
    if plot is not None and importlib.util.find_spec("matplotlib") is None:
        raise InvalidInput("--plot needs matplotlib: pip install -r bench/requirements.txt")
    peer_scenarios = {"e2e", "noisy"} & set(chosen)
    missing = [name for name, found in peers_available().items() if not found] if peer_scenarios else []
    if missing:
        console(stderr=True).print(
            f"{' and '.join(missing)} not installed: no figures against them"
            " (pip install -r bench/requirements.txt)"
        )
    stack = tuple(name.strip() for name in policies.split(",") if name.strip())
    cfg = bench_run.BenchConfig(
        admin_dsn=admin_dsn,
        jobs=jobs,
        workers=workers,
        slots=slots,
        repeats=repeats,
        policies=stack,
        churn_backlog=churn_backlog,
        large_backlog=large_backlog,
        claims_backlog=claims_backlog,
        backlogs=sizes,
        noisy_seconds=noisy_seconds,
        shares_claims=shares_claims,
        rate_seconds=rate_seconds,
    )
    figures, plots = bench_run.run(cfg, chosen)
    text = bench_run.to_json(figures, cfg)
    if output is not None:
        output.write_text(text + "\n")
    if as_json:
        typer.echo(text)
    else:
        console().print(bench_run.render(figures))
    if plot is not None:
        for path in bench_run.write_plots(plots, plot):
            console(stderr=as_json).print(f"wrote {path}")


def main() -> None:
    """Run the lab; a fairsched error is one line on stderr and exit status 1."""
    try:
        app()
    except FairschedError as error:
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
