"""fairsched behind PgBouncer in transaction pooling (Debian's pgbouncer, in front of an own server).

Claims, heartbeats, completions and enqueues work through PgBouncer when psycopg
prepared statements are off. LISTEN does not work through transaction pooling
(the LISTEN outlives its transaction, on a server connection PgBouncer hands to
someone else): wake-ups are lost and workers drain by polling. Migrations hold a
session advisory lock and must run on a direct connection.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fault_support import OwnServer, PgBouncer, own_server, pgbouncer

from bench.soak import Soak
from fairsched import Client, JobSpec, Settings, load_settings

NO_PREPARE = "off"
"""Prepared statements off, as PgBouncer's transaction pooling needs."""


@pytest.fixture(scope="module")
def server() -> Iterator[OwnServer]:
    with own_server() as s:
        yield s


@pytest.fixture(scope="module")
def bouncer(server: OwnServer) -> Iterator[PgBouncer]:
    with pgbouncer("127.0.0.1", server.port) as b:
        yield b


@pytest.fixture
def dbname(server: OwnServer) -> str:
    dsn = server.create_database()
    return psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]  # type: ignore[return-value]


def test_pgbouncer_runs_in_transaction_pooling(bouncer: PgBouncer) -> None:
    with psycopg.connect(bouncer.dsn("pgbouncer"), autocommit=True, prepare_threshold=None) as admin:
        config = {row[0]: row[1] for row in admin.execute("SHOW CONFIG").fetchall()}
    assert config["pool_mode"] == "transaction"


def test_claim_renew_complete_fail_recover_through_pgbouncer(
    server: OwnServer, bouncer: PgBouncer, dbname: str
) -> None:
    settings = Settings(prepare_threshold=None)
    with Client(bouncer.dsn(dbname), settings=settings, pool_size=4) as client:
        client.declare_queue("q")
        ids = client.enqueue_many("q", [JobSpec({"n": i}, tenant=f"t{i % 3}") for i in range(60)])
        done: set[int] = set()
        for _ in range(20):  # every statement runs far more often than psycopg's default threshold
            leases = client.claim("q", owner="w", limit=3)
            for lease in leases:
                assert client.heartbeat(lease, progress=1)
            done |= client.complete_many(leases)
            assert client.complete_many(leases) == set(), "a second completion is fenced off"
        assert client.claim("q", owner="w") == []
        assert done == set(ids)
        assert client.recover().total == 0
    with psycopg.connect(server.dsn(dbname), autocommit=True) as db:
        row = db.execute("SELECT count(*) FROM fairsched.jobs WHERE status = 'succeeded'").fetchone()
    assert row == (60,)


def test_listen_through_pgbouncer_receives_nothing(
    server: OwnServer, bouncer: PgBouncer, dbname: str
) -> None:
    with (
        psycopg.connect(bouncer.dsn(dbname), autocommit=True, prepare_threshold=None) as listener,
        psycopg.connect(server.dsn(dbname), autocommit=True) as direct,
    ):
        listener.execute("LISTEN fairsched_jobs")
        for _ in range(3):
            direct.execute("SELECT pg_notify('fairsched_jobs', 'q')")
        received = list(listener.notifies(timeout=1.0, stop_after=1))
    assert received == [], "transaction pooling cannot carry LISTEN: workers rely on polling"


def test_workers_behind_pgbouncer_drain_by_polling_through_kills(
    server: OwnServer, bouncer: PgBouncer, dbname: str, tmp_path: Path
) -> None:
    soak = Soak(
        server.dsn(dbname),
        worker_dsn=bouncer.dsn(dbname),
        producer_dsn=bouncer.dsn(dbname),
        worker_env={"FAIRSCHED_PREPARE_THRESHOLD": NO_PREPARE, "FAIRSCHED_POLL_INTERVAL_SECONDS": "0.3"},
        workers=2,
        slots=4,
        rate=40,
        lease_seconds=2.0,
        log_dir=tmp_path,
    )
    with soak:
        soak.run_for(3.0)
        soak.kill(0)
        soak.run_for(3.0)
        soak.kill(1)
        soak.run_for(2.0)
    result = soak.result
    assert result is not None
    print(f"\n[workers behind PgBouncer, transaction pooling]\n{result.summary()}")
    report = result.report
    assert (report.lost, report.not_succeeded, report.stale_accepted, report.premature) == (0, 0, 0, 0)
    assert result.ok


def test_prepared_statements_can_be_switched_off_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAIRSCHED_CONFIG", raising=False)
    for value in ("null", "off"):
        monkeypatch.setenv("FAIRSCHED_PREPARE_THRESHOLD", value)
        assert load_settings().prepare_threshold is None
