"""Schedules in the database: config apply, the tick pass (exactly once, the catch-up rule,
a pruned tick stays done), schedule list/run, and bad input refused with nothing changed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cli_support import cli, one_error_line
from prometheus_client import REGISTRY
from psycopg.conninfo import make_conninfo

from fairsched import Client
from fairsched.schedules.ticks import schedules_enqueue_due, tick_key
from fairsched.worker.scheduler import MAX_SLEEP_SECONDS, Scheduler

CONFIG = """
[queues.reports]

[[schedules]]
name = "nightly"
cron = "0 3 * * *"
timezone = "Europe/Berlin"
queue = "reports"
tenant = "acme"
payload = {kind = "nightly", days = 1}
jitter = 30

[[schedules]]
name = "minutely"
cron = "* * * * *"
queue = "reports"
tenant = "globex"
priority = 5
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fairsched.toml"
    path.write_text(text, "utf-8")
    return path


def apply(dsn: str, tmp_path: Path, text: str = CONFIG, *args: str) -> None:
    result = cli(dsn, "config", "apply", str(write(tmp_path, text)), *args)
    assert result.exit_code == 0, result.output


def schedule(db: psycopg.Connection, name: str) -> dict[str, Any]:
    with db.cursor(row_factory=psycopg.rows.dict_row) as cur:
        row = cur.execute("SELECT * FROM fairsched.schedules WHERE name = %s", (name,)).fetchone()
    assert row is not None
    return row


def now(db: psycopg.Connection) -> datetime:
    row = db.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def jobs(db: psycopg.Connection) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT tenant, priority, payload, idempotency_key FROM fairsched.jobs ORDER BY id"
    ).fetchall()


def miss(db: psycopg.Connection, name: str, minutes: int) -> datetime:
    """Put a minutely schedule's next tick ``minutes`` in the past, as a downtime leaves it."""
    db.execute(
        "UPDATE fairsched.schedules SET next_tick = date_trunc('minute', now()) - make_interval(mins => %s)"
        " WHERE name = %s",
        (minutes, name),
    )
    return schedule(db, name)["next_tick"]  # type: ignore[no-any-return]


def test_apply_writes_schedules_starting_at_their_first_tick_after_it(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    apply(fresh_db, tmp_path)
    nightly, minutely = schedule(db, "nightly"), schedule(db, "minutely")
    at = now(db)
    assert (nightly["queue_name"], nightly["tenant"], nightly["payload"]) == (
        "reports",
        "acme",
        {"kind": "nightly", "days": 1},
    )
    assert (nightly["timezone"], nightly["jitter_seconds"], nightly["enabled"]) == ("Europe/Berlin", 30, True)
    assert nightly["next_tick"] > at - timedelta(seconds=5) and nightly["last_tick"] is None
    assert minutely["next_tick"] - at <= timedelta(minutes=1) and minutely["next_tick"].second == 0
    # Nothing is due yet: a pass enqueues nothing.
    assert schedules_enqueue_due(db, max_payload_bytes=65536) == []

    # The file and the database agree, and the export reads back.
    diff = cli(fresh_db, "config", "diff", str(tmp_path / "fairsched.toml"))
    assert diff.exit_code == 0 and "the database matches" in diff.output, diff.output
    exported = cli(fresh_db, "config", "export")
    assert "[[schedules]]" in exported.output and 'cron = "0 3 * * *"' in exported.output
    write(tmp_path, exported.output)
    again = cli(fresh_db, "config", "diff", str(tmp_path / "fairsched.toml"))
    assert "the database matches" in again.output, again.output


def test_after_downtime_the_latest_missed_tick_is_enqueued_once(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    apply(fresh_db, tmp_path)
    missed_from = miss(db, "minutely", 10)
    ticked = schedules_enqueue_due(db, max_payload_bytes=65536)
    assert len(ticked) == 1
    latest = ticked[0].tick
    assert ticked[0].skipped_since == missed_from
    assert latest == schedule(db, "minutely")["last_tick"] and latest.second == 0
    assert latest <= now(db) < latest + timedelta(minutes=1)
    assert schedule(db, "minutely")["next_tick"] == latest + timedelta(minutes=1)
    assert jobs(db) == [("globex", 5, {}, tick_key("minutely", latest))]
    # Passes until the next tick enqueue nothing, however many.
    for _ in range(3):
        assert schedules_enqueue_due(db, max_payload_bytes=65536) == []

    # Retention deletes the tick's job: the tick is not enqueued again.
    db.execute("DELETE FROM fairsched.jobs")
    assert schedules_enqueue_due(db, max_payload_bytes=65536) == []
    assert jobs(db) == []


def test_jitter_delays_the_job_within_its_range(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    apply(fresh_db, tmp_path)
    db.execute("UPDATE fairsched.schedules SET next_tick = now() - interval '1 day' WHERE name = 'nightly'")
    before = now(db)
    [ticked] = schedules_enqueue_due(db, max_payload_bytes=65536)
    row = db.execute(
        "SELECT available_at, created_at FROM fairsched.jobs WHERE id = %s", (ticked.job_id,)
    ).fetchone()
    assert row is not None
    available_at, created_at = row
    assert before <= created_at <= available_at <= created_at + timedelta(seconds=30)


def test_a_tick_another_process_holds_is_skipped_and_enqueued_once(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    apply(fresh_db, tmp_path)
    miss(db, "minutely", 0)
    with psycopg.connect(fresh_db, autocommit=True) as other:
        with other.transaction():
            first = schedules_enqueue_due(other, max_payload_bytes=65536)
            assert len(first) == 1
            # Not committed yet: this process skips the locked schedule.
            assert schedules_enqueue_due(db, max_payload_bytes=65536) == []
        assert schedules_enqueue_due(db, max_payload_bytes=65536) == []
    assert [j[3] for j in jobs(db)] == [tick_key("minutely", first[0].tick)]


def test_schedule_run_enqueues_one_now_and_leaves_the_ticks(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    apply(fresh_db, tmp_path)
    before = schedule(db, "nightly")
    for _ in range(2):
        result = cli(fresh_db, "schedule", "run", "nightly")
        assert result.exit_code == 0, result.output
        assert result.output.startswith("schedule nightly: enqueued job ")
    rows = jobs(db)
    assert [r[:3] for r in rows] == [("acme", 0, {"kind": "nightly", "days": 1})] * 2
    assert all(r[3].startswith("schedule:nightly:run:") for r in rows) and rows[0][3] != rows[1][3]
    after = schedule(db, "nightly")
    assert (after["next_tick"], after["last_tick"]) == (before["next_tick"], before["last_tick"])

    missing = cli(fresh_db, "schedule", "run", "weekly")
    assert missing.exit_code == 1
    assert one_error_line(missing) == "error: no schedule named 'weekly' (fairsched schedule list shows them)"


def test_schedule_list_shows_the_last_tick_and_next_runs(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    apply(fresh_db, tmp_path)
    miss(db, "minutely", 3)
    schedules_enqueue_due(db, max_payload_bytes=65536)
    listed = cli(fresh_db, "schedule", "list", "--json", "--runs", "4")
    assert listed.exit_code == 0, listed.output
    entries = {e["name"]: e for e in json.loads(listed.output)}
    minutely, nightly = entries["minutely"], entries["nightly"]
    last = datetime.fromisoformat(minutely["last_tick"])
    runs = [datetime.fromisoformat(t) for t in minutely["next_runs"]]
    assert runs == [last + timedelta(minutes=i) for i in range(1, 5)]
    assert minutely["state"] == "waiting" and nightly["last_tick"] is None
    # 03:00 in Berlin: 02:00 UTC in winter, 01:00 in summer.
    nightly_runs = [datetime.fromisoformat(t) for t in nightly["next_runs"]]
    assert len(nightly_runs) == 4 and {(t.hour, t.minute) for t in nightly_runs} <= {(2, 0), (1, 0)}

    table = cli(fresh_db, "schedule", "list")
    assert table.exit_code == 0
    for text in ("nightly", "0 3 * * *", "Europe/Berlin", "reports", "acme", "03:00:00+01:00"):
        assert text in table.output, table.output


def test_changes_keep_or_restart_the_ticks(fresh_db: str, db: psycopg.Connection, tmp_path: Path) -> None:
    apply(fresh_db, tmp_path)
    stale = miss(db, "minutely", 5)
    # A new payload keeps the tick state: the missed tick is still due.
    apply(fresh_db, tmp_path, CONFIG.replace("priority = 5", "priority = 6"))
    assert schedule(db, "minutely")["next_tick"] == stale
    # Disabled, then enabled again: it starts at its first tick after that apply.
    apply(fresh_db, tmp_path, CONFIG + "enabled = false\n")
    assert schedules_enqueue_due(db, max_payload_bytes=65536) == []
    apply(fresh_db, tmp_path)
    assert schedule(db, "minutely")["next_tick"] > now(db)
    # A new cron expression starts afresh as well.
    miss(db, "minutely", 5)
    apply(fresh_db, tmp_path, CONFIG.replace('cron = "* * * * *"', 'cron = "*/5 * * * *"'))
    assert schedule(db, "minutely")["next_tick"] > now(db)
    assert schedule(db, "minutely")["next_tick"].minute % 5 == 0


def test_prune_removes_schedules_absent_from_the_file(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    apply(fresh_db, tmp_path)
    only_nightly = CONFIG[: CONFIG.index('[[schedules]]\nname = "minutely"')]
    diff = cli(fresh_db, "config", "diff", str(write(tmp_path, only_nightly)))
    assert "schedules.minutely: file - | database declared" in diff.output, diff.output
    apply(fresh_db, tmp_path, only_nightly)
    assert db.execute("SELECT count(*) FROM fairsched.schedules").fetchone() == (2,)
    dry = cli(fresh_db, "config", "apply", str(tmp_path / "fairsched.toml"), "--prune", "--dry-run")
    assert "would remove schedules.minutely (* * * * * on reports)" in dry.output, dry.output
    apply(fresh_db, tmp_path, only_nightly, "--prune")
    assert db.execute("SELECT name FROM fairsched.schedules").fetchall() == [("nightly",)]


BAD = [
    (
        CONFIG.replace('queue = "reports"\ntenant = "acme"', 'queue = "nope"\ntenant = "acme"'),
        "schedules.nightly: queue nope is not declared: declare it under [queues.nope]; nothing changed",
    ),
    (
        CONFIG.replace('{kind = "nightly", days = 1}', '{blob = "' + "x" * 70_000 + '"}'),
        "schedules.nightly.payload: payload is 70011 bytes; the limit is 65536 bytes",
    ),
    (CONFIG.replace('"Europe/Berlin"', '"Europe/Atlantis"'), "unknown time zone 'Europe/Atlantis'"),
    (CONFIG.replace('"0 3 * * *"', '"0 3 * * * * *"'), "Wrong number of fields"),
    (
        CONFIG.replace("jitter = 30", "jitter = -1"),
        "schedules.0.jitter: Input should be greater than or equal",
    ),
    (CONFIG.replace('name = "minutely"', 'name = "nightly"'), "schedule nightly is declared twice"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_schedules_get_one_error_and_change_nothing(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path, text: str, message: str
) -> None:
    result = cli(fresh_db, "config", "apply", str(write(tmp_path, text)))
    assert result.exit_code == 1, result.output
    assert message in one_error_line(result)
    assert db.execute("SELECT count(*) FROM fairsched.schedules").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM fairsched.queues").fetchone() == (0,)


def test_prune_refuses_a_queue_a_schedule_of_the_file_needs(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    apply(fresh_db, tmp_path)
    moved = "[queues.other]\n" + CONFIG.replace("[queues.reports]\n", "")
    for dry in ((), ("--dry-run",)):
        result = cli(fresh_db, "config", "apply", str(write(tmp_path, moved)), "--prune", *dry)
        assert result.exit_code == 1
        assert "queue reports is absent from the file, so --prune would remove it" in one_error_line(result)
    assert db.execute("SELECT count(*) FROM fairsched.queues WHERE name = 'other'").fetchone() == (0,)


def test_the_database_refuses_out_of_range_values(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    apply(fresh_db, tmp_path)
    for column, value in (
        ("jitter_seconds", 3601),
        ("jitter_seconds", float("nan")),
        ("queue_name", "ghost"),
    ):
        with pytest.raises(psycopg.errors.IntegrityError):
            db.execute(
                psycopg.sql.SQL("UPDATE fairsched.schedules SET {} = %s WHERE name = 'nightly'").format(
                    psycopg.sql.Identifier(column)
                ),
                (value,),
            )
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute("UPDATE fairsched.schedules SET last_tick = next_tick WHERE name = 'nightly'")


@pytest.fixture
def jobs_login(fresh_db: str) -> Iterator[str]:
    """A role holding the worker's and the producer's grants, as a worker's login does for
    the schedule duty (roles are cluster-wide: a name of its own, dropped after)."""
    name = f"fairsched_test_jobs_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(fresh_db, autocommit=True) as admin:
        admin.execute(psycopg.sql.SQL("CREATE ROLE {} NOLOGIN").format(psycopg.sql.Identifier(name)))
        admin.execute(
            psycopg.sql.SQL("GRANT fairsched_worker, fairsched_producer TO {}").format(
                psycopg.sql.Identifier(name)
            )
        )
    try:
        yield name
    finally:
        with psycopg.connect(fresh_db, autocommit=True) as admin:
            admin.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(name)))


def test_the_duty_needs_a_role_that_may_enqueue(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path, jobs_login: str, caplog: pytest.LogCaptureFixture
) -> None:
    apply(fresh_db, tmp_path)
    miss(db, "minutely", 1)
    with Client(make_conninfo(fresh_db, options="-c role=fairsched_worker"), pool_size=2) as worker:
        scheduler = Scheduler(worker)
        scheduler.tick()
    assert scheduler.off and jobs(db) == []
    assert "schedule duty off in this worker: its role may not enqueue" in caplog.text
    assert "GRANT fairsched_producer TO <worker login>" in caplog.text

    counted = {"schedule": "minutely", "caught_up": "true"}
    before = REGISTRY.get_sample_value("fairsched_schedule_ticks_total", counted) or 0.0
    with Client(make_conninfo(fresh_db, options=f"-c role={jobs_login}"), pool_size=2) as both:
        scheduler = Scheduler(both)
        assert 0 < scheduler.tick() <= MAX_SLEEP_SECONDS
    assert not scheduler.off and len(jobs(db)) == 1
    # The tick a minute late was the latest of missed ones.
    assert REGISTRY.get_sample_value("fairsched_schedule_ticks_total", counted) == before + 1
