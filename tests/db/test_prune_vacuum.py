"""After large deletes a prune vacuums the jobs table, when its role may."""

from __future__ import annotations

import time

import psycopg
from psycopg import sql

from fairsched import Client, QueueSettings
from fairsched.engine.prune import VACUUM_MIN_ROWS, jobs_vacuum
from fairsched.worker.pruner import Pruner


def vacuums(db: psycopg.Connection) -> int:
    """Vacuums of the jobs table so far, as the statistics have them now."""
    db.execute("SELECT pg_stat_clear_snapshot()")
    row = db.execute("SELECT pg_stat_get_vacuum_count('fairsched.jobs'::regclass)").fetchone()
    return int(row[0]) if row else 0


def finished_long_ago(db: psycopg.Connection, count: int) -> None:
    db.execute(
        "INSERT INTO fairsched.jobs (queue_name, tenant, payload, status, max_attempts, attempt_count,"
        " lease_token, lease_owner, started_at, finished_at)"
        " SELECT 'q', 't', '{}', 'succeeded', 3, 1, 1, 'w', now(), now() - interval '2 hours'"
        "   FROM generate_series(1, %s)",
        (count,),
    )


def wait_for_vacuums(db: psycopg.Connection, at_least: int) -> int:
    deadline = time.monotonic() + 10
    while (seen := vacuums(db)) < at_least and time.monotonic() < deadline:
        time.sleep(0.1)
    return seen


def test_a_prune_that_deleted_enough_vacuums_the_jobs_table(client: Client, db: psycopg.Connection) -> None:
    client.declare_queue("q", QueueSettings(finished_retention_seconds=3600))
    before = vacuums(db)
    finished_long_ago(db, VACUUM_MIN_ROWS // 2)
    pruner = Pruner(client)
    pruner.prune()
    assert db.execute("SELECT count(*) FROM fairsched.jobs").fetchone() == (0,)
    time.sleep(0.5)
    assert vacuums(db) == before, "half the rows it takes: no vacuum yet"
    finished_long_ago(db, VACUUM_MIN_ROWS // 2)
    pruner.prune()
    assert wait_for_vacuums(db, before + 1) == before + 1


def test_a_role_that_may_not_vacuum_leaves_it_to_autovacuum(db: psycopg.Connection) -> None:
    with psycopg.connect(db.info.dsn, autocommit=True) as conn:
        assert jobs_vacuum(conn, VACUUM_MIN_ROWS - 1) is False
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier("fairsched_worker")))
        assert jobs_vacuum(conn, 10 * VACUUM_MIN_ROWS) is None
