"""Least-privilege roles (migrations/001_baseline.sql) and secrets kept out of logs, errors and metrics.

Each role is assumed on its own client (``options=-c role=...``, as ``SET ROLE``)
and runs the real Client operations: its own work succeeds, the others' work
fails with a fairsched error naming the missing privilege and changes nothing.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from apps.probe import create_probe_tables
from fault_support import db_snapshot, free_port
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from schema_support import engine_release
from typer.testing import CliRunner
from worker_support import running_workers, wait_for

from fairsched import Client, JobSpec, PermanentError, QueueSettings, Settings
from fairsched.cli.main import app as cli_app
from fairsched.db.connection import connect
from fairsched.db.migrate import migrate, migrations_dir
from fairsched.db.sql import QUERIES
from fairsched.errors import DatabaseError, DatabaseUnavailable

ROLES = ("fairsched_producer", "fairsched_worker", "fairsched_admin")
QUEUES = {
    "fifo": ["fifo"],
    "weighted": ["weighted"],
    "serial": ["serial"],
    "composed": ["weighted", "aging", "serial"],
}
FAST = {"backoff_base_seconds": 0.0, "backoff_max_seconds": 0.0, "max_attempts": 2}


def as_role(dsn: str, role: str) -> Client:
    return Client(make_conninfo(dsn, options=f"-c role={role}"), settings=Settings(), pool_size=2)


@pytest.fixture
def owner(fresh_db: str) -> Iterator[Client]:
    """The migrator's client (table owner), with one queue per policy stack."""
    with Client(fresh_db) as client:
        for name, stack in QUEUES.items():
            client.declare_queue(name, QueueSettings(policies=stack, **FAST))
        yield client


@pytest.fixture
def producer(fresh_db: str, owner: Client) -> Iterator[Client]:
    with as_role(fresh_db, "fairsched_producer") as client:
        yield client


@pytest.fixture
def worker(fresh_db: str, owner: Client) -> Iterator[Client]:
    with as_role(fresh_db, "fairsched_worker") as client:
        yield client


@pytest.fixture
def admin(fresh_db: str, owner: Client) -> Iterator[Client]:
    with as_role(fresh_db, "fairsched_admin") as client:
        yield client


def denied(db: psycopg.Connection, call: Callable[[], object]) -> None:
    """``call`` fails with a fairsched error about a privilege, and writes nothing."""
    before = db_snapshot(db)
    with pytest.raises(DatabaseError, match="permission denied"):
        call()
    assert db_snapshot(db) == before


def denied_sql(
    db: psycopg.Connection, conn: psycopg.Connection, statement: str, params: object = None
) -> None:
    """Raw SQL outside the role's grants is refused by PostgreSQL, and writes nothing."""
    before = db_snapshot(db)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(statement, params)  # type: ignore[arg-type]
    assert db_snapshot(db) == before


def specs(n: int, start: int = 0) -> list[JobSpec]:
    return [
        JobSpec({"n": i}, tenant="acme", aggregate_key="order-1", aggregate_seq=i) for i in range(start, n)
    ]


def test_roles_exist_and_cannot_log_in(db: psycopg.Connection) -> None:
    rows = db.execute(
        "SELECT rolname, rolcanlogin, rolsuper FROM pg_roles WHERE rolname = ANY(%s) ORDER BY rolname",
        (list(ROLES),),
    ).fetchall()
    assert rows == [(role, False, False) for role in sorted(ROLES)]


def test_roles_blocks_can_run_again(db: psycopg.Connection) -> None:
    """The blocks a superuser runs again, in order, when the migrator could not create the
    roles: 001's grants, then 008's narrowing of them to functions, then 012's of the
    worker's reads to columns without lease tokens."""
    baseline = (migrations_dir() / "001_baseline.sql").read_text()
    blocks = [baseline[baseline.index("-- == Roles and privileges ==") :]]
    for name in ("008_roles.sql", "012_worker_columns.sql"):
        text = (migrations_dir() / name).read_text()
        blocks.append(text[text.rindex("DO $$") :])
    grants = (
        "SELECT (SELECT count(*) FROM information_schema.role_table_grants),"
        " (SELECT count(*) FROM information_schema.role_column_grants),"
        " has_column_privilege('fairsched_worker', 'fairsched.jobs', 'lease_token', 'SELECT')"
    )
    before = db.execute(grants).fetchone()
    assert before is not None and before[2] is False
    for _ in range(2):
        for block in blocks:
            db.execute(block)
    assert db.execute(grants).fetchone() == before


def test_tokens_written_before_012_move_to_a_random_start_and_running_leases_hold(
    empty_db: str, tmp_path: Path
) -> None:
    """Jobs enqueued before 012 count their tokens from 0, which a worker could guess: 012
    moves the tokens of pending, waiting and dead jobs up by a random start (their attempts
    stay in token order), and leaves running leases (their workers hold the tokens) and
    succeeded jobs as they were. (Today's client writes the rows: the release has every
    migration but 012, which none of the others depends on.)"""
    release = engine_release(tmp_path / "release_without_012", without="012_worker_columns")
    with psycopg.connect(empty_db, autocommit=True) as conn:
        migrate(conn, release, policies={})
    with Client(empty_db, pool_size=2) as client:
        client.declare_queue("q", QueueSettings(**FAST))
        fresh = client.enqueue_many("q", [JobSpec({}, tenant="acme") for _ in range(5)])[-1]
        done, retried, dead, running = client.claim("q", owner="w", limit=4)
        assert client.complete(done) and client.fail(retried, "x") and client.fail(dead, PermanentError("x"))
        with psycopg.connect(empty_db, autocommit=True) as conn:
            assert migrate(conn)[0] == "012_worker_columns"
            tokens = dict(conn.execute("SELECT id, lease_token FROM fairsched.jobs").fetchall())
        assert (tokens[done.id], tokens[running.id]) == (1, 1)
        assert min(tokens[fresh], tokens[retried.id] - 1, tokens[dead.id] - 1) > 2**20
        assert client.complete(running)
        again = client.claim("q", owner="w", limit=2)
        assert {(x.id, x.token) for x in again} == {(i, tokens[i] + 1) for i in (fresh, retried.id)}
        assert client.complete_many(again) == {x.id for x in again}
        history = [h["detail"]["outcome"] for h in client.job_show(retried.id)["history"]]
        assert history == ["retrying", "succeeded"]


def test_an_upgrade_to_stack_enqueue_installs_every_stored_stacks_functions(
    empty_db: str, tmp_path: Path
) -> None:
    """Before 014 a queue's stack had only claim functions; ``migrate`` installs its
    enqueue and completion too, so that a producer (which may not install them) enqueues
    at once after the upgrade, and a weighted queue's completion releases the share."""
    release = engine_release(tmp_path / "release_before_014", "013_default_claim_head")
    with psycopg.connect(empty_db, autocommit=True) as conn:
        migrate(conn, release)
        conn.execute("INSERT INTO fairsched.queues (name, policies) VALUES ('w', '{weighted,aging}')")
    with Client(empty_db, pool_size=2) as client:
        assert client.migrate()[0] == "014_stack_enqueue_complete"
        with psycopg.connect(empty_db, autocommit=True) as conn:
            conn.execute("CREATE ROLE upgrade_producer LOGIN IN ROLE fairsched_producer")
            conn.execute("INSERT INTO fairsched.producer_tenants VALUES ('upgrade_producer', '', false)")
        try:
            with Client(make_conninfo(empty_db, user="upgrade_producer"), pool_size=1) as producer:
                job_id = producer.enqueue("w", {}, tenant="acme", priority=3)
            [lease] = client.claim("w", owner="w1")
            assert lease.id == job_id and client.complete(lease)
            with psycopg.connect(empty_db) as conn:
                share = conn.execute(
                    "SELECT t.claimed_total, (SELECT sum(r.released) FROM fairsched.tenant_releases AS r"
                    " WHERE r.queue_name = 'w' AND r.tenant = t.tenant)"
                    " FROM fairsched.tenant_shares AS t WHERE t.queue_name = 'w'"
                ).fetchone()
        finally:
            with psycopg.connect(empty_db, autocommit=True) as conn:
                conn.execute("DROP OWNED BY upgrade_producer")
                conn.execute("DROP ROLE upgrade_producer")
    assert share == (1, 1)


@pytest.mark.parametrize("queue", list(QUEUES))
def test_producer_enqueues_and_does_nothing_else(
    queue: str, producer: Client, owner: Client, db: psycopg.Connection
) -> None:
    ids = producer.enqueue_many(queue, specs(3))
    assert producer.enqueue_many(queue, specs(6, 3)) and len(ids) == 3
    keyed = producer.enqueue(queue, {"n": 9}, tenant="globex", idempotency_key="k1")
    assert producer.enqueue(queue, {"n": 9}, tenant="globex", idempotency_key="k1") == keyed
    [lease] = owner.claim(queue, owner="w", limit=1)
    denied(db, lambda: producer.claim(queue, owner="p"))
    denied(db, lambda: producer.heartbeat(lease, progress=1))
    denied(db, lambda: producer.complete(lease))
    denied(db, lambda: producer.fail(lease, "x"))
    denied(db, lambda: producer.release(lease))
    denied(db, lambda: producer.recover())
    denied(db, lambda: producer.statistics_refresh())
    denied(db, lambda: producer.declare_queue(queue, QueueSettings(lease_seconds=1)))
    denied(db, lambda: producer.job_show(lease.id))
    denied(db, lambda: producer.dead_list())
    assert owner.fail(lease, PermanentError("poison"))
    denied(db, lambda: producer.dead_replay(lease.id))
    denied(db, lambda: producer.dead_discard(lease.id))
    denied(db, lambda: producer.cancel(ids[0]))
    with producer.connection() as conn:
        denied_sql(db, conn, "SELECT payload FROM fairsched.jobs LIMIT 1")
        denied_sql(db, conn, "UPDATE fairsched.tenant_shares SET weight = 1000")
        denied_sql(db, conn, "DELETE FROM fairsched.jobs")


@pytest.mark.parametrize("queue", list(QUEUES))
def test_worker_runs_leases_and_cannot_enqueue_or_configure(
    queue: str, producer: Client, worker: Client, db: psycopg.Connection
) -> None:
    producer.enqueue_many(queue, specs(4))
    outcomes = []
    for step in range(4):
        [lease] = worker.claim(queue, owner="w1", limit=1)
        assert worker.heartbeat(lease, progress=step)
        if step == 0:
            assert worker.release(lease)
            continue
        outcomes.append(worker.fail(lease, PermanentError("bad")) if step == 3 else worker.complete(lease))
    assert outcomes == [True, True, True]
    assert worker.recover().total == 0
    assert worker.statistics_refresh() is False  # allowed; four jobs are not a backlog to analyze for
    denied(db, lambda: worker.enqueue(queue, {}, tenant="acme"))
    denied(db, lambda: worker.enqueue_many(queue, specs(12, 10)))
    denied(db, lambda: worker.declare_queue(queue, QueueSettings(lease_seconds=1)))
    with worker.connection() as conn:
        weight = {"queue": queue, "tenant": "acme", "weight": 1000.0, "cap": None, "by": "w"}
        denied_sql(db, conn, QUERIES["tenant_share_set"], weight)
        denied_sql(db, conn, "UPDATE fairsched.tenant_shares SET weight = 1000")
        denied_sql(db, conn, "UPDATE fairsched.queues SET lease_seconds = 1")
        denied_sql(db, conn, "DELETE FROM fairsched.jobs")
        denied_sql(db, conn, "DELETE FROM fairsched.attempt_log")
        denied_sql(db, conn, "UPDATE fairsched.attempt_log SET outcome = 'succeeded'")
        denied_sql(db, conn, "UPDATE fairsched.jobs SET lease_owner = 'forged' WHERE status = 'succeeded'")


def test_a_worker_analyzes_a_hidden_backlog_through_the_owners_function(
    producer: Client, worker: Client, db: psycopg.Connection
) -> None:
    """Only the jobs table's owner may ANALYZE it; the worker's statistics refresh runs
    as the owner (``SECURITY DEFINER``)."""
    producer.enqueue_many("fifo", [JobSpec({}, tenant=f"t{n % 7}") for n in range(1200)])
    assert worker.statistics_refresh() is True
    analyzed = "SELECT count(*) FROM pg_stats WHERE schemaname = 'fairsched' AND tablename = 'jobs'"
    assert db.execute(analyzed).fetchone() != (0,)


def test_admin_configures_and_resolves_dead_jobs(
    admin: Client, producer: Client, db: psycopg.Connection
) -> None:
    admin.declare_queue("extra", QueueSettings(policies=["weighted"]))
    with admin.connection() as conn:
        conn.execute(
            QUERIES["tenant_share_set"],
            {"queue": "weighted", "tenant": "acme", "weight": 5.0, "cap": 2, "by": "admin"},
        )
    job_id = producer.enqueue("fifo", {"n": 1}, tenant="acme")
    [lease] = admin.claim("fifo", owner="a")
    assert admin.fail(lease, PermanentError("poison"))
    assert [job.id for job in admin.dead_list()] == [job_id]
    assert admin.job_show(job_id)["payload"] == {"n": 1}
    admin.dead_replay(job_id)
    [lease] = admin.claim("fifo", owner="a")
    assert admin.fail(lease, PermanentError("poison again"))
    admin.dead_discard(job_id)
    queued = producer.enqueue("fifo", {"n": 2}, tenant="acme")
    assert admin.cancel(queued, by="admin") == "cancelled"
    row = db.execute("SELECT weight, cap FROM fairsched.tenant_shares WHERE tenant = 'acme'").fetchone()
    assert row == (5.0, 2)


# -- secrets ------------------------------------------------------------------------

PASSWORD = "pw-S3cr3t-9f2c"
MARKER = "payload-secret-7d41"


def with_password(dsn: str) -> str:
    """The same DSN carrying a password (trust auth ignores it; it must never be shown)."""
    return make_conninfo(dsn, password=PASSWORD)


def test_no_payload_or_password_in_worker_logs_errors_or_metrics(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    create_probe_tables(db)
    dsn = with_password(fresh_db)
    with Client(dsn) as client:
        client.declare_queue("probe", QueueSettings(**FAST))
        ids = client.enqueue_many(
            "probe",
            [JobSpec({"fail": "unknown", "secret": MARKER}, tenant="acme") for _ in range(2)]
            + [JobSpec({"secret": MARKER, "record": True}, tenant="acme")],
        )
    port = free_port()
    with running_workers(dsn, tmp_path) as workers:
        w = workers.start({"probe": 2}, extra_args=("--metrics-port", str(port)))
        wait_for(
            lambda: (
                db.execute(
                    "SELECT count(*) FROM fairsched.jobs"
                    " WHERE id = ANY(%s) AND status IN ('dead', 'succeeded')",
                    (ids,),
                ).fetchone()
                == (3,)
            ),
            "jobs finished",
        )
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        w.stop()
        log = w.output()
    assert "fairsched_" in metrics and "job " in log
    for text, where in ((log, "worker log"), (metrics, "metrics")):
        assert MARKER not in text, f"payload content in the {where}"
        assert PASSWORD not in text, f"DSN password in the {where}"
    dead = db.execute("SELECT last_error FROM fairsched.jobs WHERE status = 'dead'").fetchall()
    assert dead and all(MARKER not in (row[0] or "") for row in dead)


def test_no_password_in_connection_errors_or_cli_output(fresh_db: str) -> None:
    params = conninfo_to_dict(fresh_db)
    unreachable = make_conninfo(fresh_db, port=str(free_port()), password=PASSWORD, connect_timeout="2")
    with pytest.raises(DatabaseUnavailable) as caught:
        connect(unreachable)
    assert PASSWORD not in str(caught.value) and MARKER not in str(caught.value)
    url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{free_port()}/{params['dbname']}"
    runner = CliRunner()
    for dsn, args in (
        (url, ["enqueue", "--queue", "q", "--tenant", "t", "--payload", f'{{"s": "{MARKER}"}}']),
        (
            with_password(fresh_db),
            ["enqueue", "--queue", "nope", "--tenant", "t", "--payload", f'{{"s": "{MARKER}"}}'],
        ),
        (
            with_password(fresh_db),
            ["enqueue", "--queue", "q", "--tenant", "t", "--payload", f'{{"s": "{MARKER}"'],
        ),
    ):
        result = runner.invoke(cli_app, args, env={"FAIRSCHED_DATABASE_URL": dsn, "FAIRSCHED_CONFIG": None})
        assert result.exit_code == 1, result.output
        output = result.stdout + result.stderr
        assert PASSWORD not in output and MARKER not in output, output
        assert re.match(r"error: \S", result.stderr)
