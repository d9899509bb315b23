"""Periodic jobs: fairsched schedule list, run."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import typer
from rich.table import Table

from fairsched.cli.root import ConfigOption, JsonOption, database_now, open_client, print_json, print_table
from fairsched.schedules.store import StoredSchedule

app = typer.Typer(
    help="Periodic jobs ([[schedules]] in the config file): list them with their next runs, run one now.",
    no_args_is_help=True,
)


def next_runs(schedule: StoredSchedule, now: datetime, count: int) -> list[datetime]:
    """The ticks a schedule enqueues next: the one due now (the latest passed, when the due
    one was missed) then those after it; none while it is disabled."""
    if not schedule.settings.enabled or schedule.next_tick is None or count == 0:
        return []
    cron = schedule.settings.parsed()
    if schedule.next_tick > now:
        return [schedule.next_tick, *cron.upcoming(schedule.next_tick, count - 1)]
    due = cron.latest_at_or_before(now) or schedule.next_tick
    return [max(due, schedule.next_tick), *cron.upcoming(now, count - 1)]


def _local(schedule: StoredSchedule, moment: datetime | None) -> str:
    if moment is None:
        return "-"
    zone = schedule.settings.parsed().zone
    return moment.astimezone(zone).isoformat(sep=" ", timespec="seconds")


def _state(schedule: StoredSchedule, now: datetime) -> str:
    if not schedule.settings.enabled:
        return "disabled"
    if schedule.next_tick is None:
        return "no tick within 50 years"
    return "due" if schedule.next_tick <= now else "waiting"


def _entry(schedule: StoredSchedule, now: datetime, count: int) -> dict[str, Any]:
    return schedule.settings.model_dump() | {
        "state": _state(schedule, now),
        "last_tick": schedule.last_tick,
        "last_job_id": schedule.last_job_id,
        "next_runs": next_runs(schedule, now, count),
    }


@app.command("list")
def schedule_list(
    runs: int = typer.Option(3, "--runs", min=0, max=50, help="how many next runs to show per schedule"),
    config: str | None = ConfigOption,
    as_json: bool = JsonOption,
) -> None:
    """Every schedule: its cron expression and time zone, queue, tenant, the last tick
    enqueued and the next runs (in the schedule's time zone; database time decides)."""
    from fairsched.schedules.store import schedules_read

    with open_client(config) as client, client.connection() as conn:
        schedules = schedules_read(conn)
        now = database_now(conn)
    if as_json:
        print_json([_entry(s, now, runs) for _name, s in sorted(schedules.items())])
        return
    if not schedules:
        typer.echo("no schedules (declare them as [[schedules]] and run fairsched config apply)")
        return
    table = Table("name", "cron", "time zone", "queue", "tenant", "state", "last tick", "next runs")
    for _name, schedule in sorted(schedules.items()):
        s = schedule.settings
        table.add_row(
            s.name,
            s.cron,
            s.timezone,
            s.queue,
            s.tenant,
            _state(schedule, now),
            _local(schedule, schedule.last_tick),
            "\n".join(_local(schedule, t) for t in next_runs(schedule, now, runs)) or "-",
        )
    print_table(table)


@app.command("run")
def schedule_run(
    name: str = typer.Argument(..., help="schedule name"),
    config: str | None = ConfigOption,
) -> None:
    """Enqueue one job of a schedule now, besides its ticks (which stay as they are)."""
    from fairsched.schedules.store import schedule_run as run_now

    with open_client(config) as client, client.connection() as conn:
        job_id = run_now(conn, name, max_payload_bytes=client.settings.max_payload_bytes)
    typer.echo(f"schedule {name}: enqueued job {job_id}")
