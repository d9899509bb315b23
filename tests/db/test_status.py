"""``fairsched status`` and ``fairsched top`` against a real queue: figures, shares, JSON."""

from __future__ import annotations

import json

import psycopg
from cli_support import cli
from policies_support import declare, fill

from fairsched import Client


def busy_queue(client: Client, db: psycopg.Connection) -> None:
    """Queue w (weighted, a:1 b:3) with claims, running jobs, a dead job and a blocked aggregate."""
    declare(client, "w", ["weighted", "serial"], tenants={"a": {"weight": 1}, "b": {"weight": 3}})
    fill(client, "w", "a", 20)
    fill(client, "w", "b", 20)
    client.complete_many(client.claim("w", owner="t", limit=8))
    client.claim("w", owner="t", limit=4)
    db.execute(
        "UPDATE fairsched.jobs SET available_at = now() - interval '2 minutes' WHERE status = 'pending'"
    )
    client.enqueue("w", {}, tenant="c", aggregate_key="k", aggregate_seq=1)
    client.enqueue("w", {}, tenant="c", aggregate_key="k", aggregate_seq=2)
    leases = client.claim("w", owner="t", limit=10)
    head = next(lease for lease in leases if lease.tenant == "c")
    assert client.fail(head, "poison", kind="permanent")


def test_status_json_has_queues_tenants_shares_dead_and_blocked(
    client: Client, fresh_db: str, db: psycopg.Connection
) -> None:
    busy_queue(client, db)
    result = cli(fresh_db, "status", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    queues = {q["name"]: q for q in report["queues"]}
    assert set(queues) == {"q", "w"}
    w = queues["w"]
    assert w["policies"] == ["weighted", "serial"]
    assert (w["dead"], w["blocked_aggregates"]) == (1, 1)
    running = db.execute("SELECT count(*) FROM fairsched.jobs WHERE status = 'running'").fetchone()
    claimable = db.execute("SELECT count(*) FROM fairsched.jobs WHERE status = 'pending'").fetchone()
    assert running is not None and claimable is not None
    assert (w["running"], w["claimable"]) == (running[0], claimable[0])
    assert w["oldest_claimable_age_seconds"] >= 120 and w["starving_tenants"] == 2
    tenants = {t["tenant"]: t for t in w["tenants"]}
    assert tenants["a"]["weight"] == 1.0 and tenants["b"]["weight"] == 3.0
    claimed = dict(db.execute("SELECT tenant, claimed_total FROM fairsched.tenant_shares").fetchall())
    total = sum(claimed.values())
    assert tenants["b"]["share"] == claimed["b"] / total
    assert tenants["b"]["entitled"] == 0.75 and tenants["a"]["entitled"] == 0.25
    assert [b["aggregate_key"] for b in report["blocked"]] == ["k"]
    assert queues["q"]["claimable"] == 0 and queues["q"]["tenants"] == []

    table = cli(fresh_db, "status")
    assert table.exit_code == 0
    assert "blocked aggregates" in table.stdout and "weighted,serial" in table.stdout


def test_top_refreshes_with_shares_over_the_interval(
    client: Client, fresh_db: str, db: psycopg.Connection
) -> None:
    busy_queue(client, db)
    once = cli(fresh_db, "top", "--once")
    assert once.exit_code == 0, once.output
    assert once.stdout.count("fairsched status at") == 1

    frames = cli(fresh_db, "top", "--iterations", "3", "--interval", "0.1")
    assert frames.exit_code == 0, frames.output
    assert frames.stdout.count("fairsched status at") == 3
    assert "share (last 0.1s)" in frames.stdout


def test_status_on_an_empty_database_lists_declared_queues(client: Client, fresh_db: str) -> None:
    report = json.loads(cli(fresh_db, "status", "--json").stdout)
    assert [q["name"] for q in report["queues"]] == ["q"]
    assert report["blocked"] == []


def test_interval_shares_are_claims_between_two_reads(
    client: Client, fresh_db: str, db: psycopg.Connection
) -> None:
    from fairsched.observe.snapshot import ExporterSettings
    from fairsched.observe.status import interval_shares, read_status
    from fairsched.settings import Settings

    declare(client, "w", ["weighted"], tenants={"a": {"weight": 1}, "b": {"weight": 3}})
    fill(client, "w", "a", 50)
    fill(client, "w", "b", 50)
    client.complete_many(client.claim("w", owner="t", limit=4))
    first = read_status(db, Settings(), ExporterSettings())
    assert interval_shares(None, first) == {}
    client.complete_many(client.claim("w", owner="t", limit=8))
    second = read_status(db, Settings(), ExporterSettings())
    assert interval_shares(first, second) == {("w", "a"): 0.25, ("w", "b"): 0.75}


def test_top_once_shows_the_share_of_claims(client: Client, fresh_db: str, db: psycopg.Connection) -> None:
    """One snapshot has no interval: --once shows the share since the share rows exist, as status does."""
    busy_queue(client, db)
    once = cli(fresh_db, "top", "--once")
    assert once.exit_code == 0, once.output
    claimed = dict(db.execute("SELECT tenant, claimed_total FROM fairsched.tenant_shares").fetchall())
    share_b = f"{100 * claimed['b'] / sum(claimed.values()):.1f}%"
    row_b = next(line for line in once.stdout.splitlines() if line.split("│")[1:2] == [f" {'b':<6} "])
    assert share_b in row_b, once.stdout
    assert "share (last" not in once.stdout
