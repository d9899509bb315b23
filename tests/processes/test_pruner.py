"""The pruner inside a real worker process: it prunes on its interval while the worker works."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator

import psycopg
import pytest
from apps.probe import create_probe_tables
from worker_support import Workers, statuses, wait_for, wait_listening

from fairsched import Client, JobSpec, QueueSettings, Settings
from fairsched.errors import ConfigError
from fairsched.worker.pruner import INTERVAL_SECONDS, interval_from


@pytest.fixture
def client(fresh_db: str, db: psycopg.Connection) -> Iterator[Client]:
    create_probe_tables(db)
    with Client(fresh_db, settings=Settings()) as c:
        c.declare_queue("probe", QueueSettings(lease_seconds=5, finished_retention_seconds=3600))
        yield c


def finished_at_past(db: psycopg.Connection, count: int, hours: float) -> list[int]:
    """Succeeded jobs that finished ``hours`` ago (database time)."""
    rows = db.execute(
        "INSERT INTO fairsched.jobs (queue_name, tenant, payload, status, max_attempts, attempt_count,"
        " lease_token, lease_owner, started_at, finished_at)"
        " SELECT 'probe', 't', '{}', 'succeeded', 3, 1, 1, 'w', now(),"
        "        now() - make_interval(secs => %s * 3600)"
        "   FROM generate_series(1, %s)"
        " RETURNING id",
        (hours, count),
    ).fetchall()
    return [row[0] for row in rows]


def left(db: psycopg.Connection, ids: list[int]) -> int:
    row = db.execute("SELECT count(*) FROM fairsched.jobs WHERE id = ANY (%s)", (ids,)).fetchone()
    assert row is not None
    return int(row[0])


def test_a_worker_prunes_on_its_interval(client: Client, workers: Workers, db: psycopg.Connection) -> None:
    old, recent = finished_at_past(db, 25, hours=2), finished_at_past(db, 5, hours=0.5)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    worker = workers.start(
        {"probe": 2},
        settings={"FAIRSCHED_PRUNE_INTERVAL_SECONDS": "0.3"},
        extra_args=("--metrics-port", str(port)),
    )
    wait_listening(db, 1)

    wait_for(lambda: left(db, old) == 0, "the worker's pruner removed the jobs past retention")
    assert left(db, recent) == 5

    # It keeps pruning as the worker works: the jobs it ran go once they are an hour old.
    client.enqueue_many("probe", [JobSpec({}, "t") for _ in range(10)])
    wait_for(lambda: statuses(db).get("succeeded") == 15, "the new jobs ran")
    with db.transaction():  # step time: the trigger that keeps succeeded rows unchanged is off
        db.execute("SET LOCAL session_replication_role = replica")
        db.execute("UPDATE fairsched.jobs SET finished_at = finished_at - interval '2 hours'")
    wait_for(lambda: statuses(db) == {}, "the worker's pruner removed the rest")

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    assert 'fairsched_pruned_rows_total{kind="finished",queue="probe"} 40.0' in text
    assert worker.stop() == 0


def test_the_interval_comes_from_the_environment_and_is_bounded() -> None:
    assert interval_from({}) == INTERVAL_SECONDS == 60.0
    assert interval_from({"FAIRSCHED_PRUNE_INTERVAL_SECONDS": "2.5"}) == 2.5
    for bad in ("0", "-1", "nan", "inf", "soon", "100000"):
        with pytest.raises(ConfigError, match="FAIRSCHED_PRUNE_INTERVAL_SECONDS"):
            interval_from({"FAIRSCHED_PRUNE_INTERVAL_SECONDS": bad})
