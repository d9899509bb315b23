"""Schedules in real worker processes: three workers, a clock crossing five ticks, five
jobs; workers down across ticks, then back: the latest missed tick, once.

The clock of record is the database's (docs/schedules.md), and that clock cannot be
stepped: the schedules tick every second (cron's optional seconds field) at moments the
test picks, so that real time crosses exactly those ticks while the workers run. Every
worker wakes at each tick and races for it. The ticks are 2 seconds apart: a worker late
by more than the gap would rightly enqueue only the latest of them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from apps.probe import create_probe_tables
from cli_support import cli
from worker_support import Workers, statuses, wait_for, wait_listening

from fairsched import Client, QueueSettings, Settings
from fairsched.schedules.ticks import tick_key


@pytest.fixture
def client(fresh_db: str, db: psycopg.Connection) -> Client:
    create_probe_tables(db)
    with Client(fresh_db, settings=Settings()) as c:
        c.declare_queue("probe", QueueSettings(lease_seconds=5))
        return c


def db_now(db: psycopg.Connection) -> datetime:
    row = db.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def ticks_ahead(db: psycopg.Connection, offsets: list[int], lead: int = 4) -> list[datetime]:
    """Whole seconds ``lead + offset`` from now (database time), moved to the next minute
    when they would not all fall in this one (one cron expression names them)."""
    start = db_now(db).replace(microsecond=0) + timedelta(seconds=lead)
    if start.second + max(offsets) > 59:
        start = start.replace(second=0) + timedelta(minutes=1)
    return [start + timedelta(seconds=o) for o in offsets]


def cron_of(ticks: list[datetime]) -> str:
    """A UTC cron expression (seconds first) whose only ticks this year are ``ticks``."""
    t = ticks[0]
    seconds = ",".join(str(tick.second) for tick in ticks)
    return f"{seconds} {t.minute} {t.hour} {t.day} {t.month} *"


def apply_schedule(dsn: str, tmp_path: Path, ticks: list[datetime]) -> None:
    path = tmp_path / "fairsched.toml"
    path.write_text(
        f'[queues.probe]\nlease_seconds = 5\n\n[[schedules]]\nname = "every"\ncron = "{cron_of(ticks)}"\n'
        'queue = "probe"\ntenant = "acme"\npayload = {}\n',
        "utf-8",
    )
    result = cli(dsn, "config", "apply", str(path))
    assert result.exit_code == 0, result.output


def scheduled_keys(db: psycopg.Connection) -> list[str]:
    rows = db.execute(
        "SELECT idempotency_key FROM fairsched.jobs WHERE idempotency_key LIKE 'schedule:every:%' ORDER BY id"
    ).fetchall()
    return [row[0] for row in rows]


def wait_past(db: psycopg.Connection, moment: datetime) -> None:
    """Until the database's clock is past ``moment`` by more than a worker's longest sleep
    between passes (every worker has had a pass after it)."""
    wait_for(lambda: db_now(db) > moment + timedelta(seconds=3), "time past the last tick", timeout=90)


def test_three_workers_and_five_ticks_make_five_jobs(
    client: Client, workers: Workers, db: psycopg.Connection, fresh_db: str, tmp_path: Path
) -> None:
    for _ in range(3):
        workers.start({"probe": 2})
    wait_listening(db, 3)
    ticks = ticks_ahead(db, [0, 2, 4, 6, 8], lead=5)
    apply_schedule(fresh_db, tmp_path, ticks)

    wait_past(db, ticks[-1])
    assert scheduled_keys(db) == [tick_key("every", t) for t in ticks]
    wait_for(lambda: statuses(db) == {"succeeded": 5}, "the jobs ran")
    # Each tick was enqueued by one worker (a worker that lost the race logs nothing).
    enqueued_by = [
        w.owner for w in workers.started for line in w.output().splitlines() if "schedule every: tick" in line
    ]
    print("ticks enqueued per worker:", {owner: enqueued_by.count(owner) for owner in set(enqueued_by)})
    assert len(enqueued_by) == 5
    for worker in workers.started:
        assert worker.stop() == 0


def test_after_downtime_the_latest_missed_tick_runs_once(
    client: Client, workers: Workers, db: psycopg.Connection, fresh_db: str, tmp_path: Path
) -> None:
    # Applied while no worker runs: ticks 0, 1 and 2 pass unseen; tick 16 comes after the
    # workers are back.
    ticks = ticks_ahead(db, [0, 1, 2, 16], lead=3)
    apply_schedule(fresh_db, tmp_path, ticks)
    wait_for(lambda: db_now(db) > ticks[2] + timedelta(seconds=0.5), "the missed ticks passed")
    assert scheduled_keys(db) == []
    for _ in range(3):
        workers.start({"probe": 2})
    wait_for(lambda: len(scheduled_keys(db)) == 1, "the catch-up tick")
    assert db_now(db) < ticks[3], "the workers took too long to start for this test's window"

    wait_past(db, ticks[3])
    assert scheduled_keys(db) == [tick_key("every", ticks[2]), tick_key("every", ticks[3])]
    for worker in workers.started:
        assert worker.stop() == 0
