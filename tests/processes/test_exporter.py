"""The exporter against a real database: values, zeros, bounded tenants, plans, and the real process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fairsched_policies.ratelimit import THROTTLE
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from worker_support import free_port

from fairsched import Client, FailureKind, JobSpec, QueueSettings, Settings
from fairsched.db.sql import QUERIES
from fairsched.observe.exporter import ClusterCollector
from fairsched.observe.snapshot import ExporterSettings, read_snapshot
from fairsched.policy.owned import level_query, level_signature
from fairsched.settings import TenantSettings

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(dsn: str, settings: Settings | None = None, **limits: Any) -> Samples:
    """One scrape of a fresh collector, as {(name, sorted labels): value}."""
    collector = ClusterCollector(dsn, settings or Settings(), ExporterSettings(**limits))
    registry = CollectorRegistry()
    registry.register(collector)
    try:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect()
            for s in family.samples
        }
    finally:
        collector.close()


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def tenants_of(samples: Samples, name: str, queue: str) -> set[str]:
    return {dict(labels)["tenant"] for (n, labels) in samples if n == name and dict(labels)["queue"] == queue}


def db_now(db: psycopg.Connection) -> datetime:
    row = db.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


@pytest.fixture
def states(client: Client, db: psycopg.Connection) -> Client:
    """Queue ``q`` with jobs in every state; queue ``empty`` declared and empty.

    q: tenant a claimable for 300 s, tenant b claimable now, tenant c delayed an hour,
    two running (one lease near expiry, one long), one running with an expired lease,
    one dead since 600 s.
    """
    client.declare_queue("empty", QueueSettings())
    now = db_now(db)
    client.enqueue("q", {}, tenant="a", run_at=now - timedelta(seconds=300))
    client.enqueue("q", {}, tenant="b")
    client.enqueue("q", {}, tenant="c", run_at=now + timedelta(hours=1))
    for tenant in ("r1", "r2", "r3", "d"):
        client.enqueue("q", {}, tenant=tenant, priority=10)
    short, long_, expired, doomed = client.claim("q", owner="w", limit=4)
    assert [short.tenant, long_.tenant, expired.tenant, doomed.tenant] == ["r1", "r2", "r3", "d"]
    move_lease = "UPDATE fairsched.jobs SET lease_expires_at = now() + %s WHERE id = %s"
    db.execute(move_lease, [timedelta(seconds=2), short.id])
    db.execute(move_lease, [timedelta(seconds=-1), expired.id])
    assert client.fail(doomed, "bad payload", kind=FailureKind.PERMANENT)
    db.execute("UPDATE fairsched.jobs SET finished_at = now() - interval '600 s' WHERE id = %s", [doomed.id])
    return client


def test_values_from_jobs_in_every_state(states: Client, fresh_db: str) -> None:
    s = scrape(fresh_db, starving_after_seconds=60)
    oldest = value(s, "fairsched_queue_oldest_claimable_age_seconds", queue="q")
    assert 300 <= oldest < 3600, "the oldest claimable job is tenant a's, not the delayed one"
    assert value(s, "fairsched_queue_claimable_jobs", queue="q") == 2
    assert value(s, "fairsched_queue_running_jobs", queue="q") == 3
    assert value(s, "fairsched_queue_leases_near_expiry", queue="q") == 1
    assert value(s, "fairsched_queue_leases_expired", queue="q") == 1
    assert value(s, "fairsched_queue_dead_jobs", queue="q") == 1
    assert 600 <= value(s, "fairsched_queue_oldest_dead_age_seconds", queue="q") < 3600
    assert value(s, "fairsched_queue_starving_tenants", queue="q") == 1
    assert 300 <= value(s, "fairsched_tenant_oldest_claimable_age_seconds", queue="q", tenant="a") < 3600
    assert value(s, "fairsched_tenant_oldest_claimable_age_seconds", queue="q", tenant="b") < 60
    assert "c" not in tenants_of(s, "fairsched_tenant_oldest_claimable_age_seconds", "q")
    assert value(s, "fairsched_tenant_running_jobs", queue="q", tenant="r2") == 1
    assert value(s, "fairsched_exporter_scrape_success") == 1


def test_declared_empty_queue_reports_zeros(states: Client, fresh_db: str) -> None:
    s = scrape(fresh_db)
    for name in (
        "fairsched_queue_oldest_claimable_age_seconds",
        "fairsched_queue_claimable_jobs",
        "fairsched_queue_running_jobs",
        "fairsched_queue_leases_near_expiry",
        "fairsched_queue_leases_expired",
        "fairsched_queue_dead_jobs",
        "fairsched_queue_oldest_dead_age_seconds",
        "fairsched_queue_starving_tenants",
    ):
        assert value(s, name, queue="empty") == 0, name
    for name in ("fairsched_tenant_oldest_claimable_age_seconds", "fairsched_tenant_running_jobs"):
        assert value(s, name, queue="empty", tenant="other") == 0


def test_tenants_are_bounded_to_top_n_and_declared(
    client: Client, db: psycopg.Connection, fresh_db: str
) -> None:
    """60 tenants, top 5: the 5 oldest by name, the declared one, the rest under "other"."""
    now = db_now(db)
    for i in range(60):
        client.enqueue("q", {}, tenant=f"t{i:02d}", run_at=now - timedelta(seconds=1000 - i))
    settings = Settings(tenants={"declared": TenantSettings(weight=3)})
    s = scrape(fresh_db, settings, top_tenants=5)
    name = "fairsched_tenant_oldest_claimable_age_seconds"
    assert tenants_of(s, name, "q") == {"t00", "t01", "t02", "t03", "t04", "declared", "other"}
    assert value(s, name, queue="q", tenant="declared") == 0
    assert value(s, name, queue="q", tenant="other") >= 1000 - 5
    assert value(s, name, queue="q", tenant="other") < value(s, name, queue="q", tenant="t04")
    entitled = "fairsched_tenant_entitled_share_ratio"
    assert value(s, entitled, queue="q", tenant="t00") == pytest.approx(1 / 60)
    assert value(s, entitled, queue="q", tenant="other") == pytest.approx(55 / 60)
    shares = sum(v for (n, labels), v in s.items() if n == entitled and dict(labels)["queue"] == "q")
    assert shares == pytest.approx(1.0)


def test_counts_stop_at_the_count_limit(client: Client, fresh_db: str) -> None:
    client.enqueue_many("q", [_spec(f"t{i}") for i in range(30)])
    assert value(scrape(fresh_db, count_limit=10), "fairsched_queue_claimable_jobs", queue="q") == 10
    assert value(scrape(fresh_db), "fairsched_queue_claimable_jobs", queue="q") == 30


def test_unreachable_database_reports_scrape_failure() -> None:
    dsn = f"postgresql://postgres@127.0.0.1:{free_port()}/none?connect_timeout=1"
    s = scrape(dsn, statement_timeout_seconds=1)
    assert value(s, "fairsched_exporter_scrape_success") == 0
    assert not [n for n, _ in s if n.startswith("fairsched_queue_")]


def _spec(tenant: str) -> JobSpec:
    return JobSpec(payload={}, tenant=tenant)


# -- plans: indexes only, and a cost that does not grow with the backlog -------------------------

LIMITS = ExporterSettings(count_limit=200)
NOT_PLANNED = {"exporter_transaction_setup", "exporter_transaction_limits", "exporter_now"}


def scrape_buffers(conn: psycopg.Connection) -> tuple[int, list[str]]:
    """Shared buffers touched by every exporter statement, and the plan lines."""
    params = {
        "max_levels": LIMITS.max_priority_levels,
        "count_limit": LIMITS.count_limit,
        "max_tenant_levels": LIMITS.max_tenant_levels,
        "near_seconds": LIMITS.near_expiry_seconds,
        "queues": ["q"] * 20,
        "tenants": [f"t{i}" for i in range(20)],
        "policies": ["ratelimit"],
        "functions": [level_signature(THROTTLE)],
    }
    total, lines = 0, []
    names = [n for n in QUERIES if n.startswith("exporter_") and n not in NOT_PLANNED]
    assert names
    for name in names:
        query = level_query(QUERIES[name], THROTTLE).as_string(None)  # ratelimit's level, as a scrape runs it
        rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) " + query, params)
        plan = [r[0] for r in rows]
        lines += plan
        top = next((line for line in plan if "Buffers: shared" in line), "")
        total += sum(int(n) for n in re.findall(r"(?:hit|read)=(\d+)", top))
    return total, lines


def fill(db: psycopg.Connection, jobs: int, start: int) -> None:
    """``jobs`` claimable jobs of 3 priorities over 500 tenants, plus running and dead ones."""
    db.execute(
        """INSERT INTO fairsched.jobs (queue_name, tenant, payload, priority, available_at, max_attempts)
           SELECT 'q', 't' || (g %% 500), '{}', (g %% 3) * 5, now() - make_interval(secs => g), 3
             FROM generate_series(%(start)s, %(start)s + %(jobs)s - 1) g""",
        {"start": start, "jobs": jobs},
    )
    db.execute("VACUUM ANALYZE fairsched.jobs")


@pytest.mark.slow
def test_scrape_uses_indexes_and_costs_the_same_at_20x_backlog(
    client: Client, db: psycopg.Connection
) -> None:
    fill(db, 5_000, 0)
    small, _ = scrape_buffers(db)
    fill(db, 95_000, 5_000)
    large, plan = scrape_buffers(db)
    assert not [line for line in plan if "Seq Scan on jobs" in line], "\n".join(plan)
    assert "jobs_claimable_idx" in "\n".join(plan)
    assert large <= small * 1.5, f"buffers per scrape grew from {small} to {large} with a 20x backlog"
    snapshot = read_snapshot(db, LIMITS)
    assert snapshot.queues["q"].claimable == 3 * LIMITS.count_limit


# -- the real process ------------------------------------------------------------------------------


@pytest.fixture
def exporter_process(states: Client, fresh_db: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    env = {**os.environ, "FAIRSCHED_DATABASE_URL": fresh_db, "FAIRSCHED_EXPORTER__TOP_TENANTS": "2"}
    env.pop("FAIRSCHED_CONFIG", None)
    cli = Path(sys.executable).parent / "fairsched"
    proc = subprocess.Popen(
        [str(cli), "exporter", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def fetch_metrics(port: int, proc: subprocess.Popen[bytes]) -> str:
    """GET /metrics, retrying while the process starts listening."""
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                return response.read().decode()  # type: ignore[no-any-return]
        except (urllib.error.URLError, ConnectionError):
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            time.sleep(0.1)
    raise AssertionError("exporter never answered on /metrics")


def test_exporter_process_serves_metrics_and_stops_on_sigterm(
    exporter_process: tuple[subprocess.Popen[bytes], int],
) -> None:
    proc, port = exporter_process
    text = fetch_metrics(port, proc)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert value(samples, "fairsched_exporter_scrape_success") == 1
    assert value(samples, "fairsched_queue_oldest_claimable_age_seconds", queue="q") >= 300
    assert value(samples, "fairsched_queue_claimable_jobs", queue="empty") == 0
    assert value(samples, "fairsched_queue_dead_jobs", queue="q") == 1
    assert len(tenants_of(samples, "fairsched_tenant_oldest_claimable_age_seconds", "q")) == 3
    assert [n for n, _ in samples if n == "fairsched_build_info"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def test_weighted_shares_claims_and_aggregates(client: Client, db: psycopg.Connection, fresh_db: str) -> None:
    """Entitled shares from the weighted policy's state, its claim counters, blocked and gap-waiting
    aggregates (state rows written directly, as the policies keep them)."""
    for tenant in ("a", "b", "c"):
        client.enqueue("q", {}, tenant=tenant)
    db.execute(
        """INSERT INTO fairsched.tenant_shares (queue_name, tenant, weight, active, claimed_total)
           VALUES ('q', 'a', 1, true, 10), ('q', 'b', 3, true, 30), ('q', 'c', 4, false, 7)"""
    )
    db.execute(
        """INSERT INTO fairsched.aggregates (queue_name, tenant, aggregate_key, next_seq, blocked_job_id,
                                             gap_since)
           VALUES ('q', 'a', 'order-1', 2, 41, NULL), ('q', 'a', 'order-2', 1, 42, NULL),
                  ('q', 'b', 'order-3', 5, NULL, now() - interval '120 s'),
                  ('q', 'b', 'order-4', 1, NULL, NULL)"""
    )
    s = scrape(fresh_db, top_tenants=2)
    entitled = "fairsched_tenant_entitled_share_ratio"
    labeled = tenants_of(s, entitled, "q")
    assert labeled == {"a", "b", "other"}
    assert value(s, entitled, queue="q", tenant="a") == pytest.approx(0.25)
    assert value(s, entitled, queue="q", tenant="b") == pytest.approx(0.75)
    assert value(s, entitled, queue="q", tenant="other") == pytest.approx(0.0)
    assert value(s, "fairsched_tenant_weight", queue="q", tenant="b") == 3
    assert value(s, "fairsched_tenant_claimed_jobs_total", queue="q", tenant="a") == 10
    assert value(s, "fairsched_queue_active_tenants", queue="q") == 2
    assert value(s, "fairsched_queue_blocked_aggregates", queue="q") == 2
    assert value(s, "fairsched_queue_gap_waiting_aggregates", queue="q") == 1
    assert 120 <= value(s, "fairsched_queue_oldest_gap_wait_seconds", queue="q") < 3600


def test_equal_split_without_weighted_state(client: Client, fresh_db: str) -> None:
    for tenant in ("a", "b", "c", "d"):
        client.enqueue("q", {}, tenant=tenant)
    s = scrape(fresh_db, top_tenants=1)
    entitled = "fairsched_tenant_entitled_share_ratio"
    assert value(s, entitled, queue="q", tenant="a") == pytest.approx(0.25)
    assert value(s, entitled, queue="q", tenant="other") == pytest.approx(0.75)
