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
from fairsched.db.connection import connect, redact, translate
from fairsched.db.sql import QUERIES
from fairsched.errors import ConfigError, FairschedError, InvalidInput
from fairsched.settings import Settings, TenantSettings


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
    help="fairsched: a multi-tenant fair job scheduler on PostgreSQL.\n\n"
    "Exit status: 0 ok, 1 failure (one line on stderr; --debug for the traceback), 2 usage error.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
dead_app = typer.Typer(help="Dead jobs: list, show, replay (same id) or discard.", no_args_is_help=True)
config_app = typer.Typer(
    help="Configuration between a TOML file and the database: check, apply, diff, export.",
    no_args_is_help=True,
)
tenant_app = typer.Typer(
    help="Tenants of a queue: list, show, set weight or cap (live).", no_args_is_help=True
)
policy_app = typer.Typer(help="A queue's policy stack and settings: show, set (live).", no_args_is_help=True)
aggregate_app = typer.Typer(
    help="Serial aggregates blocked by a dead job: list, unblock, skip.", no_args_is_help=True
)
app.add_typer(dead_app, name="dead")
app.add_typer(config_app, name="config")
app.add_typer(tenant_app, name="tenant")
app.add_typer(policy_app, name="policy")
app.add_typer(aggregate_app, name="aggregate")

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


def database_now(conn: psycopg.Connection) -> datetime:
    """The database's clock, which every age and ``--since`` is measured against."""
    row = conn.execute(QUERIES["exporter_now"]).fetchone()
    assert row is not None
    now: datetime = row[0]
    return now


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
    """Sweep expired leases once (back to pending with backoff, or to dead), and raise
    the claim heads past claimed jobs."""
    with open_client(config) as client:
        result = client.recover()
        heads = client.heads_refresh()
    if as_json:
        print_json({"retried": result.retried, "dead": result.dead, "heads_raised": heads})
    else:
        typer.echo(f"expired leases recovered: {result.retried} back to pending, {result.dead} dead")
        typer.echo(f"claim heads raised: {heads}")


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
    code: str | None = typer.Option(None, "--code", help="only this error code"),
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
    from fairsched.config import sync as configsync

    path = _config_file(file, config)
    settings = load_settings(path)
    configsync.check(settings, str(path))
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
    """Write the file's queues, policies, tenant weights and caps to the database, atomically.

    Top-level [tenants.X] apply to every queue whose stack has the weighted policy,
    unless the queue lists the tenant itself. Nothing absent from the file is deleted.
    """
    from fairsched.config import sync as configsync

    path = _config_file(file, config)
    settings = load_settings(path)
    if not settings.queues:
        raise ConfigError(f"{path}: declares no queues; nothing to apply")
    configsync.check(settings, str(path))
    with open_client(None, settings) as client, client.connection() as conn:
        configsync.apply(conn, settings)
    typer.echo(f"applied {len(settings.queues)} queues: {', '.join(sorted(settings.queues))}")


@config_app.command("diff")
def config_diff(
    file: Path | None = FileArgument,
    config: str | None = ConfigOption,
    exit_code: bool = typer.Option(False, "--exit-code", help="exit 1 when something differs"),
    as_json: bool = JsonOption,
) -> None:
    """What differs between a config file and the database (queues, policies, tenants)."""
    from fairsched.config import sync as configsync

    path = _config_file(file, config)
    settings = load_settings(path)
    configsync.check(settings, str(path))
    with open_client(None, settings) as client, client.connection() as conn:
        differences = configsync.diff(settings, configsync.database_settings(conn))
    if as_json:
        print_json([vars(d) | {"file": _plain(d.file), "database": _plain(d.database)} for d in differences])
    elif differences:
        for difference in differences:
            typer.echo(difference.line())
    else:
        typer.echo(f"{path}: the database matches")
    if differences and exit_code:
        raise typer.Exit(1)


def _plain(value: Any) -> Any:
    return value.model_dump() if isinstance(value, TenantSettings) else value


@config_app.command("export")
def config_export(
    output: Path | None = typer.Option(None, "--output", "-o", help="write to this file, not stdout"),
    config: str | None = ConfigOption,
) -> None:
    """The database's queues, policies and tenant settings as TOML (`config apply` reads it back)."""
    from fairsched.config import sync as configsync

    with open_client(config) as client, client.connection() as conn:
        text = configsync.export_toml(configsync.database_settings(conn), now=database_now(conn))
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, "utf-8")
        typer.echo(f"wrote {output}", err=True)


# -- live tuning: tenants -------------------------------------------------------

QueueArgument = typer.Argument(..., help="queue name")
TenantArgument = typer.Argument(..., help="tenant name")
LOOSE = {"ignore_unknown_options": True}
"""Lets a value such as ``-1`` reach the command, which refuses it with a clear message."""


@tenant_app.command("list")
def tenant_list(
    queue: str = QueueArgument, config: str | None = ConfigOption, as_json: bool = JsonOption
) -> None:
    """Every tenant with share state on a queue: weight, cap, running, claims, shares."""
    from fairsched.config import sync as configsync

    with open_client(config) as client, client.connection() as conn:
        stored = configsync.queue_settings(conn, queue)
        shares = client.tenant_shares(queue)
    claimed = sum(s.claimed_total for s in shares)
    active_weight = sum(s.weight for s in shares if s.active)
    rows: list[dict[str, Any]] = [
        {
            "tenant": s.tenant,
            "weight": s.weight,
            "cap": s.cap,
            "effective_cap": s.cap or stored.tenant_cap,
            "running": s.running,
            "active": s.active,
            "claimed_total": s.claimed_total,
            "share": s.claimed_total / claimed if claimed else None,
            "entitled": s.weight / active_weight if s.active and active_weight else 0.0,
        }
        for s in shares
    ]
    if as_json:
        print_json(rows)
        return
    if not rows:
        typer.echo(f"no tenant has share state on {queue} yet (every tenant weighs 1)")
        return
    table = Table("tenant", "weight", "cap", "running", "active", "claimed", "share", "entitled", title=queue)
    for r in rows:
        cap = r["effective_cap"]
        shown_cap = "-" if cap is None else (str(cap) if r["cap"] else f"{cap} (queue)")
        table.add_row(
            r["tenant"],
            _number(r["weight"]),
            shown_cap,
            str(r["running"]),
            "yes" if r["active"] else "no",
            str(r["claimed_total"]),
            _percent(r["share"]),
            _percent(r["entitled"]),
        )
    print_table(table)


@tenant_app.command("show")
def tenant_show(
    queue: str = QueueArgument,
    tenant: str = TenantArgument,
    config: str | None = ConfigOption,
    as_json: bool = JsonOption,
) -> None:
    """One tenant of a queue: weight, cap, share state and its jobs by state."""
    from fairsched.config import sync as configsync
    from fairsched.engine import enqueue
    from fairsched.observe.exporter import ExporterSettings
    from fairsched.observe.status import tenant_jobs

    enqueue.check_label("tenant", tenant, enqueue.MAX_TENANT_CHARS)
    with open_client(config) as client, client.connection() as conn:
        stored = configsync.queue_settings(conn, queue)
        share = next((s for s in client.tenant_shares(queue) if s.tenant == tenant), None)
        jobs = tenant_jobs(conn, queue, tenant, count_limit=ExporterSettings().count_limit)
    shown: dict[str, Any] = {
        "queue": queue,
        "tenant": tenant,
        "weight": share.weight if share else 1.0,
        "cap": share.cap if share else None,
        "queue_tenant_cap": stored.tenant_cap,
        "active": share.active if share else False,
        "claimed_total": share.claimed_total if share else 0,
        "charged_total": share.charged_total if share else 0.0,
        "runtime_estimate_seconds": share.runtime_estimate if share else None,
        **jobs,
    }
    if as_json:
        print_json(shown)
        return
    table = Table("field", "value", show_header=False)
    for key, value in shown.items():
        table.add_row(
            key, "-" if value is None else _number(value) if isinstance(value, float) else str(value)
        )
    print_table(table)


@tenant_app.command("weight", context_settings=LOOSE)
def tenant_weight(
    queue: str = QueueArgument,
    tenant: str = TenantArgument,
    weight: str = typer.Argument(..., help="positive number, at most 1000000"),
    config: str | None = ConfigOption,
) -> None:
    """Set a tenant's weight on a queue; claims follow it within seconds, backlog included."""
    from fairsched.config import sync as configsync

    value = _positive_number("weight", weight)
    with open_client(config) as client, client.connection() as conn:
        note = configsync.tenant_set(conn, queue, tenant, weight=value)
    typer.echo(f"{queue}/{tenant}: weight {_number(value)}{note}")


@tenant_app.command("cap", context_settings=LOOSE)
def tenant_cap(
    queue: str = QueueArgument,
    tenant: str = TenantArgument,
    cap: str = typer.Argument(..., help="most running jobs (a positive whole number), or none"),
    config: str | None = ConfigOption,
) -> None:
    """Set or remove (``none``) a tenant's cap of running jobs on a queue."""
    from fairsched.config import sync as configsync

    value = 0 if cap.strip().lower() == "none" else _whole_number("cap", cap)
    with open_client(config) as client, client.connection() as conn:
        note = configsync.tenant_set(conn, queue, tenant, cap=value)
    typer.echo(f"{queue}/{tenant}: cap {value or 'none'}{note}")


def _positive_number(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InvalidInput(f"{name} {text[:40]!r} is not a number") from None
    if not 0 < value <= 1_000_000:
        raise InvalidInput(f"{name} must be a number in (0, 1000000], got {text[:40]!r}")
    return value


def _whole_number(name: str, text: str) -> int:
    stripped = text.strip()
    if not stripped.isdigit() or len(stripped) > 9 or int(stripped) < 1:
        raise InvalidInput(f"{name} must be a positive whole number or none, got {text[:40]!r}")
    return int(stripped)


def _number(value: float) -> str:
    return f"{value:g}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


# -- live tuning: a queue's policies ------------------------------------------------------

APPLIES_AT_ENQUEUE = {"max_attempts", "aging_interval_seconds", "notify"}
"""Settings read when a job is enqueued: they apply to jobs enqueued after the change."""


@policy_app.command("show")
def policy_show(
    queue: str = QueueArgument, config: str | None = ConfigOption, as_json: bool = JsonOption
) -> None:
    """A queue's policy stack, its parameters, leases, retries and tenant settings."""
    from fairsched.config import sync as configsync

    with open_client(config) as client, client.connection() as conn:
        stored = configsync.queue_settings(conn, queue)
    values = {field: getattr(stored, field) for field in configsync.STORED_FIELDS}
    tenants = {t: s.model_dump() for t, s in sorted(stored.tenants.items())}
    if as_json:
        print_json({"queue": queue, **values, "tenants": tenants})
        return
    table = Table("setting", "value", title=queue, show_header=False)
    for key, value in values.items():
        table.add_row(key, _setting(value))
    for name, share in tenants.items():
        cap = share["cap"] if share["cap"] is not None else "none"
        table.add_row(f"tenants.{name}", f"weight {_number(share['weight'])}, cap {cap}")
    print_table(table)


def _setting(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, dict):
        return json.dumps(value) if value else "-"
    return str(value)


@policy_app.command("set", context_settings=LOOSE)
def policy_set(
    queue: str = QueueArgument,
    policies: str | None = typer.Option(None, "--policies", help="the stack, e.g. weighted,aging,serial"),
    aging_interval: float | None = typer.Option(None, "--aging-interval", help="aging: seconds per level"),
    serial_gap: str | None = typer.Option(None, "--serial-gap", help="serial: strict or lowest"),
    serial_poison: str | None = typer.Option(None, "--serial-poison", help="serial: block or skip"),
    charge: str | None = typer.Option(None, "--charge", help="weighted: count or runtime"),
    tenant_cap: str | None = typer.Option(
        None, "--tenant-cap", help="weighted: default cap per tenant, or none"
    ),
    lease: float | None = typer.Option(None, "--lease", help="lease seconds per claim and renewal"),
    max_runtime: float | None = typer.Option(None, "--max-runtime", help="seconds; no renewal past it"),
    max_attempts: int | None = typer.Option(None, "--max-attempts", help="attempts before dead"),
    unknown_max_attempts: int | None = typer.Option(
        None, "--unknown-max-attempts", help="attempts for failures of unknown kind"
    ),
    backoff_base: float | None = typer.Option(None, "--backoff-base", help="first retry delay ceiling (s)"),
    backoff_max: float | None = typer.Option(None, "--backoff-max", help="longest retry delay (s)"),
    notify: bool | None = typer.Option(None, "--notify/--no-notify", help="pg_notify workers on enqueue"),
    config: str | None = ConfigOption,
) -> None:
    """Change a queue's policies and settings; running workers follow within seconds.

    Claims read the stack (cached one second per process), lease, runtime, cap and
    charge; failures read attempts and backoff; max attempts and the aging
    interval are fixed per job at enqueue, so they apply to jobs enqueued next.
    """
    from fairsched.config import sync as configsync

    changes: dict[str, Any] = {
        "policies": [p.strip() for p in policies.split(",") if p.strip()] if policies is not None else None,
        "aging_interval_seconds": aging_interval,
        "serial_gap": serial_gap,
        "serial_poison": serial_poison,
        "charge": charge,
        "tenant_cap": None if tenant_cap is None else _optional_cap(tenant_cap),
        "lease_seconds": lease,
        "max_runtime_seconds": max_runtime,
        "max_attempts": max_attempts,
        "unknown_max_attempts": unknown_max_attempts,
        "backoff_base_seconds": backoff_base,
        "backoff_max_seconds": backoff_max,
        "notify": notify,
    }
    given = {k: v for k, v in changes.items() if v is not None}
    if tenant_cap is not None:
        given["tenant_cap"] = changes["tenant_cap"] or None
    if not given:
        raise typer.BadParameter("give at least one setting to change, e.g. --lease 60")
    with open_client(config) as client, client.connection() as conn:
        before, after = configsync.queue_settings_set(conn, queue, given)
    changed = list(configsync.changed_fields(before, after))
    if not changed:
        typer.echo(f"{queue}: nothing changed")
        return
    for field, old, new in changed:
        note = " (jobs enqueued from now on)" if field in APPLIES_AT_ENQUEUE else ""
        typer.echo(f"{queue}.{field}: {_setting(old)} -> {_setting(new)}{note}")


def _optional_cap(text: str) -> int:
    """``--tenant-cap``: a positive whole number, or 0 for ``none``."""
    return 0 if text.strip().lower() == "none" else _whole_number("--tenant-cap", text)


# -- aggregates --------------------------------------------------------------------------


@aggregate_app.command("list")
def aggregate_list(
    queue: str | None = typer.Option(None, "--queue", help="only this queue"),
    config: str | None = ConfigOption,
    as_json: bool = JsonOption,
) -> None:
    """Aggregates blocked by a dead job (poison mode block), longest-blocked first."""
    with open_client(config) as client:
        blocked = client.aggregates_blocked(queue=queue)
    if as_json:
        print_json([vars(b) for b in blocked])
        return
    if not blocked:
        typer.echo("no blocked aggregates")
        return
    table = Table("queue", "tenant", "aggregate", "dead job", "blocked since")
    for b in blocked:
        table.add_row(b.queue_name, b.tenant, b.aggregate_key, str(b.blocked_job_id), _when(b.since))
    print_table(table)


@aggregate_app.command("unblock")
def aggregate_unblock(
    queue: str = QueueArgument,
    tenant: str = TenantArgument,
    key: str = typer.Argument(..., help="aggregate key"),
    config: str | None = ConfigOption,
) -> None:
    """Run the aggregate's dead head again (same id, fresh attempts); the rest follows it."""
    with open_client(config) as client:
        job_id = client.aggregate_unblock(queue, tenant, key, by="cli")
    typer.echo(f"aggregate {key} unblocked: job {job_id} pending again")


@aggregate_app.command("skip")
def aggregate_skip(
    queue: str = QueueArgument,
    tenant: str = TenantArgument,
    key: str = typer.Argument(..., help="aggregate key"),
    config: str | None = ConfigOption,
) -> None:
    """Discard the aggregate's dead head and let its next job run."""
    with open_client(config) as client:
        job_id = client.aggregate_skip(queue, tenant, key, by="cli")
    typer.echo(f"aggregate {key}: job {job_id} discarded, the next one may run")


# -- watching -----------------------------------------------------------------------------


@app.command()
def status(config: str | None = ConfigOption, as_json: bool = JsonOption) -> None:
    """Queues and tenants now: claimable, running, oldest claimable age, shares vs entitled,
    dead jobs, starving tenants and blocked aggregates."""
    from fairsched.observe import status as status_mod
    from fairsched.observe.exporter import ExporterSettings

    settings = load_settings(config)
    with open_client(None, settings) as client, client.connection() as conn:
        report = status_mod.read_status(conn, settings, ExporterSettings())
    if as_json:
        print_json(report.as_dict())
    else:
        console().print(status_view(report, {}))


@app.command()
def top(
    interval: float = typer.Option(2.0, "--interval", min=0.1, help="seconds between refreshes"),
    iterations: int | None = typer.Option(None, "--iterations", min=1, help="stop after this many"),
    once: bool = typer.Option(False, "--once", help="one refresh, then exit"),
    config: str | None = ConfigOption,
) -> None:
    """``status``, refreshing in the terminal; shares over the last interval. Ctrl-C ends it."""
    import time

    from rich.live import Live

    from fairsched.observe import status as status_mod
    from fairsched.observe.exporter import ExporterSettings

    settings = load_settings(config)
    limits = ExporterSettings()
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
                view = status_view(report, status_mod.interval_shares(previous, report), interval)
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


def status_view(report: Any, recent: dict[tuple[str, str], float], interval: float | None = None) -> Any:
    """The status tables: queues, then each queue's tenants, then blocked aggregates."""
    from rich.console import Group

    when = report.now.isoformat(sep=" ", timespec="seconds")
    queues = Table(
        "queue",
        "policies",
        "claimable",
        "running",
        "oldest claimable",
        "dead",
        "blocked",
        "starving",
        title=f"fairsched status at {when}",
    )
    parts: list[Any] = [queues]
    for q in report.queues:
        queues.add_row(
            q.name,
            ",".join(q.policies),
            str(q.claimable),
            str(q.running),
            _seconds(q.oldest_claimable_age_seconds),
            str(q.dead),
            str(q.blocked_aggregates),
            str(q.starving_tenants),
        )
        if not q.tenants:
            continue
        share_title = f"share (last {interval:g}s)" if interval is not None else "share"
        tenants = Table(
            "tenant", "weight", "running", "oldest claimable", share_title, "entitled", title=q.name
        )
        for t in q.tenants:
            share = recent.get((q.name, t.tenant)) if interval is not None else t.share
            tenants.add_row(
                t.tenant,
                "-" if t.weight is None else _number(t.weight),
                str(t.running),
                _seconds(t.oldest_claimable_age_seconds),
                _percent(share),
                _percent(t.entitled),
            )
        parts.append(tenants)
    if report.blocked:
        blocked = Table("queue", "tenant", "aggregate", "dead job", "since", title="blocked aggregates")
        for b in report.blocked:
            blocked.add_row(b.queue_name, b.tenant, b.aggregate_key, str(b.blocked_job_id), _when(b.since))
        parts.append(blocked)
    return Group(*parts)


def _seconds(value: float) -> str:
    return f"{value:.1f}s" if value else "-"


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
    from fairsched.config.capacity import Split, parse_weighted
    from fairsched.worker.process import load_app, parse_queue_slots, run_worker

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
    from fairsched.observe.exporter import serve

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
    from fairsched import simulate as sim
    from fairsched.config import sync as configsync
    from fairsched.db.embedded import embedded_dsn
    from fairsched.observe.status import parse_span

    if (scenario is None) == (from_queue is None):
        raise typer.BadParameter("give a SCENARIO file or --from-queue QUEUE (not both)")
    settings = load_settings(config)
    admin_dsn = settings.database_url or embedded_dsn(settings.data_dir)
    if scenario is not None:
        loaded = sim.load_scenario(scenario)
        current = sim.scenario_plan(loaded, slots=slots)
        if starving_after is not None:
            current = sim.Plan(
                current.queue, current.slots, current.horizon, starving_after, current.arrivals
            )
    else:
        assert from_queue is not None
        with open_client(None, settings) as client, client.connection() as conn:
            now = database_now(conn)
            setting = configsync.queue_settings(conn, from_queue)
            current = sim.history_plan(
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
        queue, proposed_slots = sim.propose(current.queue, current.slots, changes, propose)
        plans["proposed"] = sim.Plan(
            queue, proposed_slots, current.horizon, current.starving_after, current.arrivals
        )
    outcomes = sim.simulate(admin_dsn, plans)
    if as_json:
        print_json({name: outcome.as_dict() for name, outcome in outcomes.items()})
        return
    console().print(simulation_view(outcomes, plans))


def simulation_view(outcomes: dict[str, Any], plans: dict[str, Any]) -> Any:
    """Per tenant: weight, share, p50/p99 wait and starvation, one column group per setting."""
    from rich.console import Group

    names = list(outcomes)
    first = plans[names[0]]
    lines = [
        f"{len(first.arrivals)} jobs over {first.horizon:g}s (virtual); starving: claimable > "
        f"{first.starving_after:g}s"
    ]
    for name in names:
        plan = plans[name]
        lines.append(f"{name}: policies {','.join(plan.queue.policies)}, {plan.slots} slots")
    table = Table("tenant", title="simulated")
    for name in names:
        for column in ("weight", "share", "p50 wait", "p99 wait", "starved"):
            table.add_column(f"{column}\n{name}", justify="right")
    tenants = sorted({t for o in outcomes.values() for t in o.tenants})
    for tenant in tenants:
        row = [tenant]
        for name in names:
            figures = outcomes[name].tenants[tenant]
            weight = plans[name].queue.tenants.get(tenant)
            row += [
                _number(weight.weight if weight else 1.0),
                _percent(figures.share),
                f"{figures.p50_wait:.2f}s",
                f"{figures.p99_wait:.2f}s",
                f"{figures.starved_seconds:.1f}s ({figures.late} jobs)",
            ]
        table.add_row(*row)
    return Group(*lines, table)


from fairsched.cli.bench import bench  # noqa: E402 (it imports the helpers above)

app.command()(bench)


def main() -> None:
    """Entry point of the console script."""
    app()


if __name__ == "__main__":
    main()
