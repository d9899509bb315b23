"""Running things: fairsched worker, exporter, demo, simulate."""

from __future__ import annotations

from pathlib import Path

import typer

from fairsched import Client, load_settings
from fairsched.cli.render import simulation_view
from fairsched.cli.root import (
    ConfigOption,
    JsonOption,
    console,
    database_now,
    open_client,
    print_json,
    setup_logs,
)


def worker(
    ctx: typer.Context,
    app_spec: str = typer.Option(..., "--app", help="handlers, as module:attribute"),
    queue: list[str] = typer.Option(
        ..., "--queue", help="queue=slots, or a bare queue name with --concurrency; repeatable"
    ),
    concurrency: int | None = typer.Option(
        None,
        "--concurrency",
        min=1,
        max=1000,
        help="slots shared by the bare --queue names by their [queues.<name>] weight; idle ones lent",
    ),
    config: str | None = ConfigOption,
    owner: str | None = typer.Option(None, "--owner", help="lease owner name (default host:pid)"),
    metrics_port: int | None = typer.Option(None, "--metrics-port", help="serve /metrics on this port"),
) -> None:
    """Run one worker process: pooled slots per queue, until SIGTERM/SIGINT.

    Static split: --queue emails=8 --queue reports=2. Weighted split:
    --concurrency 16 --queue emails --queue reports (see docs/capacity.md).
    """
    from fairsched.config.capacity import Split, parse_weighted
    from fairsched.worker.process import load_app, parse_queue_slots, run_worker

    settings = load_settings(config)
    setup_logs(ctx, settings)
    handlers = load_app(app_spec)
    if concurrency is None:
        slots = Split.static(parse_queue_slots(queue))
    else:
        weights = {name: q.weight for name, q in settings.queues.items()}
        slots = parse_weighted(queue, concurrency, weights)
    client = Client.from_settings(settings)
    raise typer.Exit(
        run_worker(handlers, slots, settings, dsn=client.dsn, owner=owner, metrics_port=metrics_port)
    )


def exporter(
    config: str | None = ConfigOption,
    port: int = typer.Option(
        9464, "--port", min=0, max=65535, help="HTTP port for /metrics (0: any free one)"
    ),
    host: str = typer.Option("0.0.0.0", "--host", help="address to bind"),
) -> None:
    """Serve the cluster-wide, database-derived metrics on /metrics."""
    from fairsched.observe.exporter import serve

    settings = load_settings(config)
    client = Client.from_settings(settings)
    serve(
        settings,
        dsn=client.dsn,
        host=host,
        port=port,
        on_listening=lambda url: typer.echo(f"exporter listening on {url}", err=True),
    )


def demo(
    jobs: int | None = typer.Option(None, "--jobs", min=1, help="jobs (default 3000; 400 --quick)"),
    workers: int = typer.Option(2, "--workers", min=1, max=16, help="worker processes"),
    slots: int = typer.Option(4, "--slots", min=1, max=64, help="slots per worker process"),
    policies: str = typer.Option(
        "weighted,aging,serial", "--policies", help="the demo queue's policy stack ('fifo': no fairness)"
    ),
    quick: bool = typer.Option(False, "--quick", help="a run of a few seconds"),
    config: str | None = ConfigOption,
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    """Run a multi-tenant workload end to end on real workers and show what happened.

    It runs in a database of its own on your server and never writes to yours, so
    `fairsched config diff` stays clean: `fairsched_demo` beside `fairsched` on the
    embedded PostgreSQL; with FAIRSCHED_DATABASE_URL set, your database's name plus
    `_demo` (e.g. `app_demo` beside `app`), as the same role. It is created if
    missing and kept for the next run. If your role may not create databases, have
    it created once, or set FAIRSCHED_DATABASE_URL to a database on a server where
    you may (the demo then uses that database's `_demo` sibling).
    """
    from fairsched.demo import run_demo
    from fairsched.demoapp import DemoPlan
    from fairsched.demoreport import print_report

    stack = [name.strip() for name in policies.split(",") if name.strip()]
    plan = DemoPlan.make(jobs=jobs, workers=workers, slots=slots, policies=stack, quick=quick)
    out = console(stderr=as_json)
    report = run_demo(load_settings(config), plan, out)
    if as_json:
        print_json(report.as_dict())
    else:
        print_report(report, out)


def simulate(
    scenario: Path | None = typer.Argument(None, help="scenario file (.toml or .json)"),
    from_queue: str | None = typer.Option(None, "--from-queue", help="replay this queue's recent jobs"),
    since: str = typer.Option("1h", "--since", help="with --from-queue: jobs created within (e.g. 1h)"),
    slots: int | None = typer.Option(
        None, "--slots", min=1, max=1000, help="slots (default: scenario's/peak)"
    ),
    propose: Path | None = typer.Option(None, "--propose", help="TOML: slots, [queue] keys, [tenants.X]"),
    changes: list[str] = typer.Option(
        [], "--set", help="tenant.X.weight=N, tenant.X.cap=N|none, queue.KEY=VALUE, slots=N (repeatable)"
    ),
    starving_after: float | None = typer.Option(None, "--starving-after", min=0.001, help="seconds"),
    config: str | None = ConfigOption,
    as_json: bool = JsonOption,
) -> None:
    """Predict each tenant's share, p50/p99 wait and starvation, now and under a proposal.

    Replays the workload through the real claim on a scratch database (created
    beside the configured one, dropped after) on a virtual clock; see docs/simulate.md.
    """
    from fairsched import simplan
    from fairsched import simulate as sim
    from fairsched.config import sync as configsync
    from fairsched.db.embedded import embedded_dsn
    from fairsched.observe.status import parse_span

    if (scenario is None) == (from_queue is None):
        raise typer.BadParameter("give a SCENARIO file or --from-queue QUEUE (not both)")
    settings = load_settings(config)
    admin_dsn = settings.database_url or embedded_dsn(settings.data_dir)
    if scenario is not None:
        loaded = simplan.load_scenario(scenario)
        current = simplan.scenario_plan(loaded, slots=slots)
        if starving_after is not None:
            current = sim.Plan(
                current.queue, current.slots, current.horizon, starving_after, current.arrivals
            )
    else:
        assert from_queue is not None
        with open_client(None, settings) as client, client.connection() as conn:
            now = database_now(conn)
            setting = configsync.queue_settings(conn, from_queue)
            current = simplan.history_plan(
                conn,
                from_queue,
                setting,
                since=now - parse_span(since),
                until=now,
                starving_after=starving_after or 30.0,
                slots=slots,
            )
    plans = {"current": current}
    if propose is not None or changes:
        queue, proposed_slots = simplan.propose(current.queue, current.slots, changes, propose)
        plans["proposed"] = sim.Plan(
            queue, proposed_slots, current.horizon, current.starving_after, current.arrivals
        )
    outcomes = sim.simulate(admin_dsn, plans)
    if as_json:
        print_json({name: outcome.as_dict() for name, outcome in outcomes.items()})
        return
    console().print(simulation_view(outcomes, plans))
