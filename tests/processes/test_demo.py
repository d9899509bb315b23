"""``fairsched demo``: real worker processes run the whole workload in a database of its own,
and nothing is left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Collection, Iterator
from pathlib import Path

import psycopg
import pytest
from cli_support import REPO, cli
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from fairsched.demoapp import FLOOD_TENANT, QUEUE, DemoPlan, workload

DEAD = {"globex": 1, "initech": 1}
"""The demo's permanent failure (globex) and the job that exhausts its unknown-error budget (initech)."""


@pytest.fixture
def demo_db(fresh_db: str, server_dsn: str) -> Iterator[str]:
    """DSN of the database the demo makes beside ``fresh_db`` (its name plus ``_demo``);
    dropped after the test."""
    name = conninfo_to_dict(fresh_db)["dbname"] + "_demo"
    try:
        yield make_conninfo(fresh_db, dbname=name)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def run_demo(dsn: str, *args: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """``fairsched demo ARGS`` as its own process; returns the result and the process id."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSCHED_")}
    env["FAIRSCHED_DATABASE_URL"] = dsn
    proc = subprocess.Popen(
        [sys.executable, "-m", "fairsched", "demo", *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=240)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.pid


def table_rows(output: str, tenants: Collection[str]) -> dict[str, list[str]]:
    """The report table's rows of ``tenants``, as cells."""
    rows = {}
    for line in output.splitlines():
        cells = line.split()
        if len(cells) == 9 and cells[0] in tenants:
            rows[cells[0]] = cells
    return rows


def assert_nothing_left_running(dsn: str, demo_pid: int) -> None:
    """No worker of that demo run is alive, and none holds a connection."""
    owner = f"demo-{demo_pid}-"
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            assert owner.encode() not in cmdline.read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name IN ('fairsched-worker', 'fairsched-listener')"
        ).fetchone()
    assert row == (0,)


def test_demo_quick_runs_every_tenant_to_the_end(fresh_db: str, demo_db: str) -> None:
    result, pid = run_demo(fresh_db, "--quick")
    assert result.returncode == 0, result.stderr + result.stdout

    expected = Counter(job.tenant for job in workload(DemoPlan.make(quick=True)))
    rows = table_rows(result.stdout, expected)
    assert set(rows) == set(expected), result.stdout
    for tenant, jobs in expected.items():
        dead = DEAD.get(tenant, 0)
        assert rows[tenant][:4] == [tenant, str(jobs), str(jobs - dead), str(dead)], result.stdout
    words = " ".join(result.stdout.split())
    assert "stale completions rejected: 0" in words
    assert "one at a time: yes" in words
    # The weighted policy keeps the flood near its entitled sixth while others wait.
    flood_share = float(rows[FLOOD_TENANT][5].rstrip("%"))
    assert flood_share < 50, result.stdout

    with psycopg.connect(demo_db) as conn:
        statuses = dict(
            conn.execute(
                "SELECT status, count(*) FROM fairsched.jobs WHERE queue_name = %s GROUP BY status", (QUEUE,)
            ).fetchall()
        )
    assert statuses == {"succeeded": sum(expected.values()) - 2, "dead": 2}
    assert_nothing_left_running(demo_db, pid)


def test_demo_leaves_the_users_database_alone(fresh_db: str, demo_db: str, tmp_path: Path) -> None:
    config = tmp_path / "fairsched.toml"
    config.write_text('[queues.emails]\npolicies = ["weighted"]\n')
    assert cli(fresh_db, "config", "apply", str(config)).exit_code == 0

    result, _ = run_demo(fresh_db, "--quick")
    assert result.returncode == 0, result.stderr + result.stdout

    diff = cli(fresh_db, "config", "diff", str(config), "--exit-code")
    assert diff.exit_code == 0, diff.output
    with psycopg.connect(fresh_db) as conn:
        assert conn.execute("SELECT name FROM fairsched.queues ORDER BY name").fetchall() == [("emails",)]
        assert conn.execute("SELECT count(*) FROM fairsched.jobs").fetchone() == (0,)
    with psycopg.connect(demo_db) as conn:
        assert conn.execute("SELECT name FROM fairsched.queues").fetchall() == [(QUEUE,)]


def test_demo_json_report_and_a_second_run_on_the_same_database(fresh_db: str, demo_db: str) -> None:
    for _ in range(2):
        result, pid = run_demo(fresh_db, "--jobs", "60", "--workers", "1", "--slots", "2", "--json")
        assert result.returncode == 0, result.stderr + result.stdout
    report = json.loads(result.stdout)
    tenants = {row["tenant"]: row for row in report["tenants"]}
    assert sum(row["jobs"] for row in tenants.values()) == 60
    assert {name: row["dead"] for name, row in tenants.items() if row["dead"]} == DEAD
    assert all(row["succeeded"] + row["dead"] == row["jobs"] for row in tenants.values())
    assert sum(row["retries"] for row in tenants.values()) > 0
    assert tenants[FLOOD_TENANT]["jobs"] == 42
    assert report["aggregate_seqs"] == [1, 2, 3, 4, 5]
    assert report["aggregate_one_at_a_time"] is True

    with psycopg.connect(demo_db) as conn:
        dead = conn.execute(
            "SELECT payload->>'poison', payload->>'bug' FROM fairsched.jobs WHERE id = ANY(%s) ORDER BY id",
            (report["dead_ids"],),
        ).fetchall()
    assert sorted(dead, key=str) == sorted([(None, "true"), ("true", None)], key=str)
    assert_nothing_left_running(demo_db, pid)


def test_demo_refuses_bad_options(fresh_db: str) -> None:
    result, _ = run_demo(fresh_db, "--jobs", "5")
    assert result.returncode == 1
    assert result.stderr.strip() == "error: the demo needs at least 21 jobs, one worker and one slot"
    assert run_demo(fresh_db, "--workers", "0")[0].returncode == 2
