"""The ``fairsched`` command line: a face over :class:`fairsched.Client`.

Commands are grouped in typer sub-apps (``dead``, ``config``); a new group is a
``typer.Typer()`` plus one ``app.add_typer`` line. Errors are one line on
stderr and exit status 1; usage errors exit 2; ``--debug`` shows tracebacks.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import typer
from rich.console import Console
from rich.table import Table

from fairsched import Client, load_settings
from fairsched.db import connect, redact, translate
from fairsched.errors import ConfigError, FairschedError, InvalidInput
from fairsched.settings import Settings


class _Group(typer.core.TyperGroup):
    """The root command group: turns every error into one line on stderr and exit 1."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except Exception as e:
            if ctx.params.get("debug"):
                raise
            typer.echo(f"error: {_one_line(e)}", err=True)
            raise typer.Exit(1) from None


def _one_line(error: Exception) -> str:
    if isinstance(error, psycopg.Error):
        error = translate(error)
    if isinstance(error, FairschedError):
        text = str(error)
    else:
        text = f"unexpected {type(error).__name__}: {error} (rerun with --debug for the traceback)"
    return redact(" ".join(text.split()))


app = typer.Typer(
    cls=_Group,
    help="fairsched: a multi-tenant fair job scheduler on PostgreSQL.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
dead_app = typer.Typer(help="Dead jobs: list, show, replay (same id) or discard.", no_args_is_help=True)
config_app = typer.Typer(help="Configuration files: validate and apply.", no_args_is_help=True)
app.add_typer(dead_app, name="dead")
app.add_typer(config_app, name="config")

ConfigOption = typer.Option(None, "--config", envvar="FAIRSCHED_CONFIG", help="TOML config file")
JsonOption = typer.Option(False, "--json", help="print JSON instead of a table")


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="show tracebacks and debug logs")) -> None:
    """fairsched: a multi-tenant fair job scheduler on PostgreSQL.

    Without FAIRSCHED_DATABASE_URL, commands use an embedded PostgreSQL that
    they start (or reuse) under FAIRSCHED_DATA_DIR. Exit status: 0 ok,
    1 failure, 2 usage error.
    """
    if debug:
        logging.basicConfig(level=logging.DEBUG)


# -- helpers ---------------------------------------------------------------


@contextmanager
def open_client(config: str | None, settings: Settings | None = None) -> Iterator[Client]:
    """A client for the configured database (the embedded server when none is set).

    One plain connection is tried first, so an unreachable server fails at once
    with the driver's reason instead of after the pool's timeout.
    """
    with Client.from_settings(settings or load_settings(config)) as client:
        connect(client.dsn).close()
        yield client


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout (datetimes as ISO 8601)."""
    typer.echo(json.dumps(data, indent=2, default=_json_default, ensure_ascii=False))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def console(*, stderr: bool = False) -> Console:
    """A rich console: the terminal's width, or wide when piped so lines stay greppable."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 160)


def print_table(table: Table) -> None:
    """Render a rich table on stdout."""
    console().print(table)


def _when(value: datetime | None) -> str:
    return value.isoformat(sep=" ", timespec="seconds") if value else "-"


def parse_payload(text: str) -> Any:
    """``--payload``: JSON text, ``@file`` or ``@-`` (stdin)."""
    source = "payload"
    if text.startswith("@"):
        source = text[1:]
        try:
            text = sys.stdin.read() if source == "-" else Path(source).read_text("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InvalidInput(f"cannot read payload file {source}: {e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidInput(f"{source} is not valid JSON: {e}") from None


def parse_when(text: str | None) -> datetime | None:
    """``--run-at``: an ISO 8601 timestamp with a time zone."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"--run-at {text!r} is not an ISO 8601 timestamp") from None
    if when.tzinfo is None:
        raise InvalidInput(f"--run-at {text!r} has no time zone: add one, e.g. {text}+00:00")
    return when


def _config_file(file: Path | None, config: str | None) -> Path:
    chosen = file or (Path(config) if config else None)
    if chosen is None:
        raise typer.BadParameter("give a FILE or set --config / FAIRSCHED_CONFIG", param_hint="FILE")
    return chosen


# -- schema, recovery, enqueue ----------------------------------------------


@app.command()
def migrate(config: str | None = ConfigOption) -> None:
    """Apply pending schema migrations."""
    with open_client(config) as client:
        applied = client.migrate()
    typer.echo(f"applied: {', '.join(applied)}" if applied else "schema is up to date")


@app.command()
def recover(config: str | None = ConfigOption, as_json: bool = JsonOption) -> None:
    """Sweep expired leases once: back to pending (with backoff) or to dead."""
    with open_client(config) as client:
        result = client.recover()
    if as_json:
        print_json({"retried": result.retried, "dead": result.dead})
    else:
        typer.echo(f"expired leases recovered: {result.retried} back to pending, {result.dead} dead")


@app.command()
def enqueue(
    queue: str = typer.Option(..., "--queue", help="queue name (declared in the database)"),
    tenant: str = typer.Option(..., "--tenant", help="tenant the job belongs to"),
    payload: str = typer.Option("{}", "--payload", help="JSON text, @file or @- for stdin"),
    priority: int = typer.Option(0, "--priority", help="higher runs first"),
    aggregate_key: str | None = typer.Option(None, "--aggregate-key", help="aggregate the job belongs to"),
    aggregate_seq: int | None = typer.Option(None, "--aggregate-seq", help="order within the aggregate"),
    run_at: str | None = typer.Option(None, "--run-at", help="not before this ISO 8601 time (with zone)"),
    max_attempts: int | None = typer.Option(None, "--max-attempts", help="default: the queue's"),
    idempotency_key: str | None = typer.Option(None, "--idempotency-key", help="dedupe per queue+tenant"),
    config: str | None = ConfigOption,
) -> None:
    """Enqueue one job and print its id (the existing id for a known idempotency key)."""
    body = parse_payload(payload)
    when = parse_when(run_at)
    with open_client(config) as client:
        job_id = client.enqueue(
            queue,
            body,
            tenant=tenant,
            priority=priority,
            aggregate_key=aggregate_key,
            aggregate_seq=aggregate_seq,
            run_at=when,
            max_attempts=max_attempts,
            idempotency_key=idempotency_key,
        )
    typer.echo(job_id)


# -- dead jobs --------------------------------------------------------------


@dead_app.command("list")
def dead_list(
    queue: str | None = typer.Option(None, "--queue", help="only this queue"),
    tenant: str | None = typer.Option(None, "--tenant", help="only this tenant"),
    limit: int = typer.Option(100, "--limit", min=1, max=10_000, help="at most this many"),
    config: str | None = ConfigOption,
    as_json: bool = JsonOption,
) -> None:
    """Dead jobs, newest first."""
    with open_client(config) as client:
        jobs = client.dead_list(queue=queue, tenant=tenant, limit=limit)
    if as_json:
        print_json([vars(job) for job in jobs])
        return
    if not jobs:
        typer.echo("no dead jobs")
        return
    table = Table("id", "queue", "tenant", "attempts", "error code", "error", "died at")
    for job in jobs:
        error = (job.last_error or "").splitlines()[0][:60] if job.last_error else "-"
        table.add_row(
            str(job.id),
            job.queue_name,
            job.tenant,
            str(job.attempt_count),
            job.last_error_code or "-",
            error,
            _when(job.finished_at),
        )
    print_table(table)


@dead_app.command("show")
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
    history = job.pop("history")
    fields = Table("field", "value", show_header=False)
    for key, value in job.items():
        shown = json.dumps(value, ensure_ascii=False) if key == "payload" else value
        fields.add_row(key, _when(shown) if isinstance(shown, datetime) else str(shown))
    print_table(fields)
    events = Table("at", "kind", "detail", title="history")
    for entry in history:
        events.add_row(_when(entry["at"]), entry["kind"], json.dumps(entry["detail"], ensure_ascii=False))
    print_table(events)


@dead_app.command("replay")
def dead_replay(job_id: int = typer.Argument(..., help="job id"), config: str | None = ConfigOption) -> None:
    """Run a dead job again: same id, fresh attempts, history kept."""
    with open_client(config) as client:
        client.dead_replay(job_id, by="cli")
    typer.echo(f"job {job_id} replayed: pending again")


@dead_app.command("discard")
def dead_discard(job_id: int = typer.Argument(..., help="job id"), config: str | None = ConfigOption) -> None:
    """Resolve a dead job without running it (the row and its history stay)."""
    with open_client(config) as client:
        client.dead_discard(job_id, by="cli")
    typer.echo(f"job {job_id} discarded")


# -- configuration ----------------------------------------------------------

FileArgument = typer.Argument(None, help="TOML file (default: --config / FAIRSCHED_CONFIG)")


@config_app.command("check")
def config_check(
    file: Path | None = FileArgument, config: str | None = ConfigOption, as_json: bool = JsonOption
) -> None:
    """Validate a config file (and FAIRSCHED_* overrides); name every bad key and value."""
    path = _config_file(file, config)
    settings = load_settings(path)
    if as_json:
        print_json(
            {
                "file": str(path),
                "queues": sorted(settings.queues),
                "tenants": {name: t.weight for name, t in sorted(settings.tenants.items())},
            }
        )
        return
    queues = ", ".join(sorted(settings.queues)) or "none"
    typer.echo(f"{path}: ok (queues: {queues}; tenants: {len(settings.tenants)})")


@config_app.command("apply")
def config_apply(file: Path | None = FileArgument, config: str | None = ConfigOption) -> None:
    """Declare the config's queues in the database, all in one transaction."""
    path = _config_file(file, config)
    settings = load_settings(path)
    if not settings.queues:
        raise ConfigError(f"{path}: declares no queues; nothing to apply")
    with open_client(None, settings) as client:
        client.apply_settings()
    typer.echo(f"applied {len(settings.queues)} queues: {', '.join(sorted(settings.queues))}")


# -- running ------------------------------------------------------------------


@app.command()
def worker(
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

    Static split: ``--queue emails=8 --queue reports=2``. Weighted split:
    ``--concurrency 16 --queue emails --queue reports`` (see docs/capacity.md).
    """
    from fairsched.capacity import Split, parse_weighted
    from fairsched.worker import load_app, parse_queue_slots, run_worker

    settings = load_settings(config)
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


@app.command()
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

    Uses the embedded PostgreSQL unless FAIRSCHED_DATABASE_URL is set.
    """
    from fairsched import demo as demo_run

    stack = [name.strip() for name in policies.split(",") if name.strip()]
    plan = demo_run.DemoPlan.make(jobs=jobs, workers=workers, slots=slots, policies=stack, quick=quick)
    out = console(stderr=as_json)
    report = demo_run.run_demo(load_settings(config), plan, out)
    if as_json:
        print_json(report.as_dict())
    else:
        demo_run.print_report(report, out)


@app.command()
def bench(
    scenario: list[str] = typer.Option(
        [], "--scenario", help="claims, backlog, e2e, noisy, shares, memory (repeatable; default all)"
    ),
    jobs: int = typer.Option(20_000, "--jobs", min=1000, help="jobs per end-to-end run"),
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
    from fairsched import bench as bench_run
    from fairsched.embedded import embedded_dsn

    settings = load_settings(config)
    admin_dsn = settings.database_url or embedded_dsn(settings.data_dir, database="postgres")
    if soak:
        from fairsched.soak import run_soak

        with bench_run.scratch_db(admin_dsn, migrate=False) as dsn:
            result = run_soak(dsn, duration, progress=lambda line: console(stderr=True).print(line))
        typer.echo(result.summary())
        raise typer.Exit(0 if result.ok else 1)
    chosen = scenario or list(bench_run.SCENARIOS)
    unknown = sorted(set(chosen) - set(bench_run.SCENARIOS))
    if unknown:
        raise InvalidInput(f"unknown scenario {', '.join(unknown)}; known: {', '.join(bench_run.SCENARIOS)}")
    stack = tuple(name.strip() for name in policies.split(",") if name.strip())
    cfg = bench_run.BenchConfig(
        admin_dsn=admin_dsn, jobs=jobs, workers=workers, slots=slots, repeats=repeats, policies=stack
    )
    figures, plots = bench_run.run(cfg, chosen)
    text = bench_run.to_json(figures, cfg)
    if output is not None:
        output.write_text(text + "\n")
    if as_json:
        typer.echo(text)
    else:
        print_table(bench_run.render(figures))
    if plot is not None:
        for path in bench_run.write_plots(plots, plot):
            console(stderr=as_json).print(f"wrote {path}")


def main() -> None:
    """Entry point of the console script."""
    app()


if __name__ == "__main__":
    main()
