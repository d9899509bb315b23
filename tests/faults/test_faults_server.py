"""Database-side faults under load: a PostgreSQL crash and restart, connections terminated
mid-claim, mid-heartbeat and mid-complete, every LISTEN connection dropped.

Real worker processes run the soak handler (every execution recorded in the
ledger); each test prints the checker's figures and asserts its counts. The
restart test owns its server (initdb in a temp dir, own port): the shared
server is never stopped.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fault_support import OwnServer, own_server
from worker_support import wait_for

from bench.soak import Soak, SoakResult

WORKER_APP = "fairsched-worker"
LISTENER_APP = "fairsched-listener"
# Text that identifies each worker statement in pg_stat_activity.query (which keeps
# only the first track_activity_query_size bytes, 1024 by default): the call of the
# function that runs it (migrations/008_roles.sql).
CLAIM_MARK = '%"fairsched"."stack\\_claim\\_%'
RENEW_MARK = "%fairsched.lease\\_renew(%"
COMPLETE_MARK = "%fairsched.leases\\_complete(%"


@pytest.fixture(scope="module")
def server() -> Iterator[OwnServer]:
    with own_server() as s:
        yield s


def show(name: str, result: SoakResult, **extra: int) -> None:
    more = "".join(f"\n{key}: {value}" for key, value in extra.items())
    print(f"\n[{name}]\n{result.summary()}{more}")


def assert_clean(result: SoakResult) -> None:
    report = result.report
    assert (report.lost, report.not_succeeded, report.unexpected, report.stale_accepted) == (0, 0, 0, 0)
    assert report.premature == 0
    assert report.longest_overlap_seconds <= report.lease_seconds
    assert result.unexpected_exits == 0
    assert result.ok


def test_postgres_crash_and_restart_under_load(server: OwnServer, tmp_path: Path) -> None:
    dsn = server.create_database()
    restarts = 0
    soak = Soak(dsn, workers=3, slots=4, rate=40, lease_seconds=2.0, log_dir=tmp_path)
    with soak:
        soak.run_for(3.0)
        for down in (0.5, 3.0):
            server.restart_immediate(down_seconds=down)
            restarts += 1
            soak.run_for(4.0)
    result = soak.result
    assert result is not None
    show("PostgreSQL immediate stop + restart x2", result, restarts=restarts)
    with psycopg.connect(dsn, autocommit=True) as db:
        row = db.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = %s",
            (WORKER_APP,),
        ).fetchone()
    assert row is not None and row[0] == 0, "workers stopped and closed their pools"
    assert restarts == 2
    assert result.jobs_processed > 0
    assert_clean(result)


def blocked_backends(admin: psycopg.Connection, mark: str) -> list[int]:
    """Worker backends of this database waiting on a lock while running a statement like ``mark``."""
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = %s"
        " AND wait_event_type = 'Lock' AND query LIKE %s",
        (WORKER_APP, mark),
    ).fetchall()
    return [row[0] for row in rows]


def heartbeat_coming(admin: psycopg.Connection) -> bool:
    """A job claimed within the last 0.4 s (3 s leases) works more than 1.6 s: its first
    heartbeat, due a third of the lease after the claim and sent within the heartbeat
    thread's next half-second tick, comes while the table is held."""
    row = admin.execute(
        "SELECT count(*) FROM fairsched.jobs WHERE status = 'running'"
        " AND (payload->>'work')::float8 > 1.6 AND started_at > now() - interval '0.4 s'"
    ).fetchone()
    return row is not None and row[0] > 0


def terminate_mid_statement(dsn: str, admin: psycopg.Connection, mark: str) -> int:
    """Hold the job table so worker statements queue up, terminate the backends stuck in a
    statement like ``mark``, let go. Returns how many were terminated.

    A heartbeat is sent only for a job running long enough, so that phase first waits
    for one."""
    if mark == RENEW_MARK:
        wait_for(lambda: heartbeat_coming(admin), "a job whose heartbeat is due soon")
    with psycopg.connect(dsn) as locker:
        locker.execute("SET lock_timeout = '10s'")
        locker.execute("LOCK TABLE fairsched.jobs IN EXCLUSIVE MODE")
        pids = wait_for(lambda: blocked_backends(admin, mark), f"a worker blocked in {mark}", timeout=30)
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        locker.rollback()
    return len(pids)


def test_connections_terminated_mid_claim_heartbeat_and_complete(fresh_db: str, tmp_path: Path) -> None:
    soak = Soak(
        fresh_db, workers=2, slots=4, rate=15, lease_seconds=3.0, work_seconds=(0.3, 2.0), log_dir=tmp_path
    )
    terminated = {"claim": 0, "heartbeat": 0, "complete": 0}
    with soak, psycopg.connect(fresh_db, autocommit=True) as admin:
        soak.run_for(2.0)
        for _ in range(3):
            phases = (("claim", CLAIM_MARK), ("heartbeat", RENEW_MARK), ("complete", COMPLETE_MARK))
            for phase, mark in phases:
                terminated[phase] += terminate_mid_statement(fresh_db, admin, mark)
                soak.run_for(0.5)
        soak.run_for(2.0)
    result = soak.result
    assert result is not None
    figures = {f"terminated_{phase}": count for phase, count in terminated.items()}
    show("pg_terminate_backend mid-statement", result, **figures)
    assert all(count >= 3 for count in terminated.values()), terminated
    assert_clean(result)


def test_every_listener_dropped_polling_still_drains(fresh_db: str, tmp_path: Path) -> None:
    soak = Soak(fresh_db, workers=2, slots=4, rate=40, lease_seconds=2.0, log_dir=tmp_path)
    dropped = 0
    stop = threading.Event()

    def drop_listeners() -> None:
        nonlocal dropped
        with psycopg.connect(fresh_db, autocommit=True) as admin:
            while not stop.wait(0.1):
                rows = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND application_name = %s",
                    (LISTENER_APP,),
                ).fetchall()
                dropped += len(rows)

    dropper = threading.Thread(target=drop_listeners)
    soak.start()
    try:
        soak.run_for(1.5)
        dropper.start()
        soak.run_for(6.0)
        # Listeners stay down while the queue drains: only polling is left.
        result = soak.finish()
    finally:
        soak.close()
        stop.set()
        if dropper.is_alive():
            dropper.join()
    show("every LISTEN connection dropped", result, listeners_dropped=dropped)
    assert dropped >= 2 * 2, "each worker's listener was dropped, and again after it reconnected"
    assert_clean(result)
