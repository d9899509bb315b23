"""The bounded operator queries still answer exactly: every tenant's oldest claimable age
(however many older jobs of others come first), ``tenant show``'s counts over all of a
tenant's priority levels, ``status``'s blocked aggregates, ``simulate --from-queue``'s
window. Their plans and costs: ``tests/db/test_operator_plans.py``."""

from __future__ import annotations

from datetime import datetime, timedelta

import psycopg

from fairsched import Client, FailureKind, JobSpec, QueueSettings, Settings
from fairsched.metrics import OTHER_TENANT
from fairsched.observe.exporter import ClusterCollector
from fairsched.observe.snapshot import ExporterSettings, read_snapshot
from fairsched.observe.status import tenant_jobs, tenant_share
from fairsched.settings import TenantSettings
from fairsched.simplan import history_plan


def db_now(db: psycopg.Connection) -> datetime:
    row = db.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def test_a_tenant_behind_10k_older_jobs_gets_its_exact_oldest_claimable_age(
    client: Client, db: psycopg.Connection, fresh_db: str
) -> None:
    db.execute(
        """INSERT INTO fairsched.jobs (queue_name, tenant, payload, priority, available_at, max_attempts)
           SELECT 'q', 'early' || (g % 50), '{}', g % 2,
                  now() - interval '1 hour' + make_interval(secs => g * 0.01), 3
             FROM generate_series(1, 10000) AS g"""
    )
    now = db_now(db)
    late_at = now - timedelta(seconds=1234.5)
    client.enqueue("q", {}, tenant="late", run_at=late_at)
    client.enqueue("q", {}, tenant="late", run_at=now - timedelta(seconds=10), priority=7)
    client.enqueue("q", {}, tenant="delayed-only", run_at=now + timedelta(hours=1))
    with psycopg.connect(fresh_db) as conn:
        snapshot = read_snapshot(conn, ExporterSettings(top_tenants=3))
    queue = snapshot.queues["q"]
    assert len(queue.tenants) == 51 and "delayed-only" not in queue.tenants
    assert queue.tenants["late"].oldest_available_at == late_at
    assert set(queue.labeled) == {"early1", "early2", "early3", OTHER_TENANT}

    settings = Settings(tenants={"late": TenantSettings()})
    collector = ClusterCollector(fresh_db, settings, ExporterSettings(top_tenants=3))
    try:
        families = {f.name: f for f in collector.collect()}
    finally:
        collector.close()
    ages = {
        s.labels["tenant"]: s.value
        for s in families["fairsched_tenant_oldest_claimable_age_seconds"].samples
        if s.labels["queue"] == "q"
    }
    assert set(ages) == {"early1", "early2", "early3", "late", OTHER_TENANT}
    assert 1234.5 <= ages["late"] < 1234.5 + 60
    starving = families["fairsched_queue_starving_tenants"].samples
    assert [s.value for s in starving if s.labels["queue"] == "q"] == [51]


def test_tenant_show_counts_every_priority_level_and_state(client: Client, db: psycopg.Connection) -> None:
    now = db_now(db)
    for priority in (-3, 0, 4):
        client.enqueue_many("q", [JobSpec({}, "acme", priority) for _ in range(3)])
        client.enqueue("q", {}, tenant="acme", priority=priority, run_at=now + timedelta(hours=1))
    client.enqueue("q", {}, tenant="acme", priority=9, run_at=now - timedelta(seconds=600))
    client.enqueue_many("q", [JobSpec({}, "other", 9) for _ in range(5)])
    running = client.claim("q", owner="w", limit=2)
    assert [lease.tenant for lease in running] == ["acme", "other"]
    doomed = client.claim("q", owner="w", limit=4)
    assert {lease.tenant for lease in doomed} == {"other"}
    for lease in doomed:
        assert client.fail(lease, "bad", kind=FailureKind.PERMANENT)
    jobs = tenant_jobs(db, "q", "acme", ExporterSettings())
    assert jobs["claimable"] == 9 and jobs["delayed"] == 3 and jobs["running"] == 1
    assert jobs["dead"] == 0 and jobs["waiting"] == 0  # the queue's 4 dead jobs are other's
    assert jobs["oldest_claimable_age_seconds"] >= 0
    capped = tenant_jobs(db, "q", "acme", ExporterSettings(count_limit=2))
    assert capped["claimable"] == 2 and capped["delayed"] == 2
    assert tenant_share(db, "q", "acme") is None


def test_tenant_show_reads_the_dead_jobs_and_share_row_of_its_tenant(
    client: Client, db: psycopg.Connection
) -> None:
    client.declare_queue("w", QueueSettings(policies=["weighted"]))
    client.enqueue_many("w", [JobSpec({}, t) for t in ("acme", "acme", "beta")])
    for lease in client.claim("w", owner="w", limit=3):
        assert client.fail(lease, "bad", kind=FailureKind.PERMANENT)
    assert tenant_jobs(db, "w", "acme", ExporterSettings())["dead"] == 2
    share = tenant_share(db, "w", "acme")
    assert share is not None and share["claimed_total"] == 2


def test_simulate_history_replays_exactly_the_window(client: Client, db: psycopg.Connection) -> None:
    client.enqueue_many("q", [JobSpec({}, "old") for _ in range(50)])
    db.execute("UPDATE fairsched.jobs SET created_at = now() - interval '2 hours'")
    since = db_now(db) - timedelta(hours=1)
    client.enqueue_many("q", [JobSpec({}, f"new{i % 3}") for i in range(20)])
    client.declare_queue("x", QueueSettings())
    client.enqueue_many("x", [JobSpec({}, "elsewhere") for _ in range(5)])
    plan = history_plan(db, "q", QueueSettings(), since=since, until=db_now(db), starving_after=30)
    assert len(plan.arrivals) == 20 and {a.tenant for a in plan.arrivals} == {"new0", "new1", "new2"}
    assert [a.at for a in plan.arrivals] == sorted(a.at for a in plan.arrivals)
    capped = history_plan(db, "q", QueueSettings(), since=since, until=db_now(db), starving_after=30, limit=7)
    assert len(capped.arrivals) == 7
