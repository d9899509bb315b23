"""``fairsched config apply --prune``: queues and tenant settings that left the file go,
a queue that still holds jobs stays, and a dry run changes nothing."""

from __future__ import annotations

from pathlib import Path

import psycopg
from cli_support import cli, one_error_line
from ops_support import config_state

from fairsched import Client, JobSpec, Settings

FULL = """
[queues.mail]
policies = ["weighted"]

[queues.mail.tenants.acme]
weight = 4

[queues.mail.tenants.globex]
weight = 2
cap = 3

[queues.old]
policies = ["fifo"]
"""

PRUNED = """
[queues.mail]
policies = ["weighted"]

[queues.mail.tenants.acme]
weight = 4
"""


def write(tmp_path: Path, text: str, name: str = "fairsched.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, "utf-8")
    return path


def applied(dsn: str, tmp_path: Path) -> Path:
    """The full file applied; returns the pruned file's path."""
    result = cli(dsn, "config", "apply", str(write(tmp_path, FULL, "full.toml")))
    assert result.exit_code == 0, result.output
    return write(tmp_path, PRUNED)


def queues(db: psycopg.Connection) -> list[str]:
    return [r[0] for r in db.execute("SELECT name FROM fairsched.queues ORDER BY name").fetchall()]


def shares(db: psycopg.Connection) -> list[tuple[object, ...]]:
    return db.execute(
        "SELECT queue_name, tenant, weight, cap FROM fairsched.tenant_shares ORDER BY 1, 2"
    ).fetchall()


def test_dry_run_lists_what_prune_removes_and_changes_nothing(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    path = applied(fresh_db, tmp_path)
    before = config_state(db)
    result = cli(fresh_db, "config", "apply", str(path), "--prune", "--dry-run")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "would remove queues.old" in lines
    assert "would remove queues.mail.tenants.globex (weight 2, cap 3)" in lines
    assert not any("acme" in line for line in lines)
    assert lines[-1] == "dry run: nothing changed"
    assert config_state(db) == before


def test_dry_run_needs_prune(fresh_db: str, tmp_path: Path) -> None:
    path = applied(fresh_db, tmp_path)
    assert cli(fresh_db, "config", "apply", str(path), "--dry-run").exit_code == 2


def test_prune_removes_a_queue_without_jobs_and_a_tenant_that_left(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    path = applied(fresh_db, tmp_path)
    db.execute("INSERT INTO fairsched.claim_heads (queue_name) VALUES ('old') ON CONFLICT DO NOTHING")
    # Without --prune nothing that left the file goes.
    assert cli(fresh_db, "config", "apply", str(path)).exit_code == 0
    assert queues(db) == ["mail", "old"]
    assert ("mail", "globex", 2.0, 3) in shares(db)

    result = cli(fresh_db, "config", "apply", str(path), "--prune")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "removed queues.old" in lines
    assert "removed queues.mail.tenants.globex (weight 2, cap 3)" in lines
    assert queues(db) == ["mail"]
    assert shares(db) == [("mail", "acme", 4.0, None)], "globex's idle row is gone"
    left = db.execute("SELECT count(*) FROM fairsched.claim_heads WHERE queue_name = 'old'").fetchone()
    assert left == (0,)
    diff = cli(fresh_db, "config", "diff", str(path), "--exit-code")
    assert diff.exit_code == 0, diff.output
    # Once more: nothing left to prune.
    again = cli(fresh_db, "config", "apply", str(path), "--prune")
    assert again.exit_code == 0 and "removed" not in again.stdout


def test_prune_resets_a_busy_tenant_to_the_defaults(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    """A tenant with pending work keeps its share row (its place in the weighted
    selection), only its weight and cap go back to the defaults."""
    path = applied(fresh_db, tmp_path)
    with Client(fresh_db, settings=Settings()) as client:
        client.enqueue("mail", {}, tenant="globex")
    result = cli(fresh_db, "config", "apply", str(path), "--prune")
    assert result.exit_code == 0, result.output
    assert "removed queues.mail.tenants.globex (weight 2, cap 3)" in result.stdout.splitlines()
    assert shares(db) == [("mail", "acme", 4.0, None), ("mail", "globex", 1.0, None)]
    active = db.execute("SELECT active FROM fairsched.tenant_shares WHERE tenant = 'globex'").fetchone()
    assert active == (True,)
    with Client(fresh_db, settings=Settings()) as client:
        assert [lease.tenant for lease in client.claim("mail", owner="w", limit=5)] == ["globex"]


def test_prune_refuses_a_queue_that_holds_jobs_even_with_force(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    path = applied(fresh_db, tmp_path)
    with Client(fresh_db, settings=Settings()) as client:
        client.enqueue_many("old", [JobSpec({"n": 1}, "t"), JobSpec({"n": 2}, "t")])
        dead = client.enqueue("old", {"n": 3}, tenant="t")
    db.execute("UPDATE fairsched.jobs SET status = 'dead', finished_at = now() WHERE id = %s", (dead,))
    before = config_state(db)
    for extra in ((), ("--force",), ("--dry-run",)):
        result = cli(fresh_db, "config", "apply", str(path), "--prune", *extra)
        assert result.exit_code == 1, result.output
        line = one_error_line(result)
        assert "queue old holds 3 jobs (1 dead, 2 pending)" in line, line
        assert "nothing changed" in line
        assert config_state(db) == before, extra


def test_force_removes_a_queue_whose_jobs_all_finished_and_keeps_their_rows(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    path = applied(fresh_db, tmp_path)
    with Client(fresh_db, settings=Settings()) as client:
        client.enqueue_many("old", [JobSpec({"n": 1}, "t"), JobSpec({"n": 2}, "t")])
        client.complete_many(client.claim("old", owner="w", limit=2))
    before = config_state(db)
    refused = cli(fresh_db, "config", "apply", str(path), "--prune")
    assert refused.exit_code == 1
    line = one_error_line(refused)
    assert "queue old holds 2 jobs (2 succeeded)" in line and "--force" in line, line
    assert config_state(db) == before

    forced = cli(fresh_db, "config", "apply", str(path), "--prune", "--force")
    assert forced.exit_code == 0, forced.output
    assert "removed queues.old (2 finished jobs kept)" in forced.stdout.splitlines()
    assert queues(db) == ["mail"]
    kept = db.execute("SELECT status, count(*) FROM fairsched.jobs GROUP BY status").fetchall()
    assert kept == [("succeeded", 2)]
