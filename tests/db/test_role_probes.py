"""Role probes: what a hostile producer or worker tries with plain SQL is refused and
changes nothing (docs/security.md, one test per row of its table).

Each probe runs as the role: the worker as ``SET ROLE fairsched_worker``, the producer as
a login role that is a member of ``fairsched_producer`` with a grant for tenant
``acme`` only (the tenant grant is checked on the login role). Each compares every
fairsched table before and after (``db_snapshot``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from cli_support import cli, one_error_line
from fault_support import db_snapshot
from psycopg import sql
from psycopg.conninfo import make_conninfo

from fairsched import Client, JobSpec, PermanentError, QueueSettings
from fairsched.config.producers import tenant_grant
from fairsched.engine.stackfunctions import claim_function, enqueue_function
from fairsched.errors import DatabaseError
from fairsched.schedules.ticks import schedule_tick

FAST = {"backoff_base_seconds": 0.0, "backoff_max_seconds": 0.0, "max_attempts": 3}


@pytest.fixture
def owner(fresh_db: str) -> Iterator[Client]:
    with Client(fresh_db) as client:
        client.declare_queue("fifo", QueueSettings(policies=["fifo"], **FAST))
        client.declare_queue("weighted", QueueSettings(policies=["weighted"], tenant_cap=1, **FAST))
        client.declare_queue("serial", QueueSettings(policies=["serial"], **FAST))
        yield client


@pytest.fixture
def worker(fresh_db: str, owner: Client) -> Iterator[psycopg.Connection]:
    with psycopg.connect(
        make_conninfo(fresh_db, options="-c role=fairsched_worker"), autocommit=True
    ) as conn:
        yield conn


@pytest.fixture
def producer_role(fresh_db: str, db: psycopg.Connection) -> Iterator[str]:
    """A login role, member of fairsched_producer, that may enqueue for tenant acme only."""
    role = f"fairsched_probe_{uuid.uuid4().hex[:10]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE fairsched_producer").format(sql.Identifier(role)))
    try:
        assert tenant_grant(db, role, "acme")
        yield role
    finally:
        db.execute("DELETE FROM fairsched.producer_tenants WHERE role_name = %s", [role])
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def producer(fresh_db: str, owner: Client, producer_role: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(make_conninfo(fresh_db, user=producer_role), autocommit=True) as conn:
        yield conn


def refused(
    db: psycopg.Connection,
    conn: psycopg.Connection,
    statement: str | sql.Composable,
    params: object = None,
    error: type[psycopg.Error] = psycopg.errors.InsufficientPrivilege,
) -> None:
    """``statement`` fails for lack of a privilege (or with ``error``), and no fairsched
    table changed."""
    before = db_snapshot(db)
    with pytest.raises(error):
        conn.execute(statement, params)  # type: ignore[arg-type]
    assert db_snapshot(db) == before


def job(db: psycopg.Connection, job_id: int) -> tuple[object, ...]:
    row = db.execute(
        "SELECT status, tenant, queue_name, payload, lease_owner, lease_token, lease_expires_at"
        " FROM fairsched.jobs WHERE id = %s",
        [job_id],
    ).fetchone()
    assert row is not None
    return tuple(row)


# -- the worker -------------------------------------------------------------------------


def test_worker_cannot_move_or_rewrite_a_succeeded_job(
    owner: Client, worker: psycopg.Connection, db: psycopg.Connection
) -> None:
    job_id = owner.enqueue("fifo", {"n": 1}, tenant="acme")
    [lease] = owner.claim("fifo", owner="w")
    assert owner.complete(lease)
    refused(
        db,
        worker,
        "UPDATE fairsched.jobs SET tenant = 'globex', queue_name = 'weighted', payload = '{}' WHERE id = %s",
        [job_id],
    )


def test_worker_cannot_finish_another_workers_job(
    owner: Client, worker: psycopg.Connection, db: psycopg.Connection
) -> None:
    owner.enqueue("fifo", {}, tenant="acme")
    [lease] = owner.claim("fifo", owner="w-other")
    refused(db, worker, "UPDATE fairsched.jobs SET status = 'succeeded' WHERE id = %s", [lease.id])
    refused(db, worker, "DELETE FROM fairsched.jobs WHERE id = %s", [lease.id])
    # Through the functions, a forged owner or token finishes nothing: the attempt is
    # recorded as a rejected stale completion, and the job is untouched.
    before = job(db, lease.id)
    for statement, params in (
        ("SELECT * FROM fairsched.leases_complete('w-forged', %s, %s)", [[lease.id], [lease.token]]),
        ("SELECT * FROM fairsched.leases_complete('w-other', %s, %s)", [[lease.id], [lease.token + 1]]),
        (
            "SELECT * FROM fairsched.leases_fail('w-forged', %s, %s, '{permanent}', '{x}', '{x}')",
            [[lease.id], [lease.token]],
        ),
        ("SELECT * FROM fairsched.lease_release(%s, 'w-forged', %s)", [lease.id, lease.token]),
        ("SELECT * FROM fairsched.lease_renew(%s, 'w-forged', %s, '1', 3600)", [lease.id, lease.token]),
    ):
        assert worker.execute(statement, params).fetchall() == []
    assert job(db, lease.id) == before
    stale = "SELECT count(*) FROM fairsched.job_events WHERE kind = 'stale_completion_rejected'"
    assert db.execute(stale).fetchone() == (4,)  # the heartbeat is not a completion


def test_worker_cannot_read_a_lease_token(
    owner: Client, worker: psycopg.Connection, db: psycopg.Connection, fresh_db: str
) -> None:
    """Not from the jobs, the attempt record or the events (a rejected stale completion
    records the token presented); the views `job show` reads give a worker NULL where a
    token is, and the reader (the dashboard's role) the tokens."""
    owner.enqueue_many("fifo", [JobSpec({}, tenant="acme") for _ in range(3)])
    done, failed, running = owner.claim("fifo", owner="w-other", limit=3)
    assert owner.complete(done) and owner.fail(failed, "x")
    db.execute("SELECT fairsched.leases_complete('w-forged', %s, %s)", [[running.id], [running.token]])
    for statement in (
        "SELECT lease_token FROM fairsched.jobs",
        "SELECT * FROM fairsched.jobs",
        "SELECT id FROM fairsched.jobs WHERE lease_token > 0",
        "SELECT lease_token FROM fairsched.attempt_log",
        "SELECT detail FROM fairsched.job_events",
    ):
        refused(db, worker, statement)
    views = (
        "SELECT lease_token FROM fairsched.lease_tokens",
        "SELECT lease_token FROM fairsched.attempts",
        "SELECT (detail ->> 'token')::bigint FROM fairsched.job_history",
    )
    tokens = {done.token, failed.token, running.token}
    with psycopg.connect(make_conninfo(fresh_db, options="-c role=fairsched_reader")) as reader:
        for statement in views:
            assert {row[0] for row in worker.execute(statement)} == {None}, statement
            assert {row[0] for row in reader.execute(statement)} <= tokens | {None}, statement
        assert {row[0] for row in reader.execute(views[0])} == tokens
    with Client(make_conninfo(fresh_db, options="-c role=fairsched_worker")) as as_worker:
        shown = as_worker.job_show(running.id)
    assert shown["lease_owner"] == "w-other" and shown["lease_token"] is None
    assert [h["detail"] for h in shown["history"]] == [{"op": "complete", "owner": "w-forged"}]


def test_worker_that_knows_the_owner_cannot_guess_the_token(
    owner: Client, worker: psycopg.Connection, db: psycopg.Connection
) -> None:
    """The owner is no secret (a worker reads it, and how often the job was claimed); a
    job's token starts at random, so ten thousand guesses hold no lease (a heartbeat says
    whether a guess holds and audits nothing) and finish nothing."""
    job_id = owner.enqueue("fifo", {}, tenant="acme")
    owner.claim("fifo", owner="w-other")
    seen = "SELECT lease_owner, attempt_count FROM fairsched.jobs WHERE id = %s"
    assert worker.execute(seen, [job_id]).fetchone() == ("w-other", 1)
    before, row = db_snapshot(db), job(db, job_id)
    guesses = (
        "SELECT t FROM generate_series(0, 10000) AS t,"
        " LATERAL fairsched.lease_renew(%s, 'w-other', t, NULL, 3600) AS held"
    )
    assert worker.execute(guesses, [job_id]).fetchall() == []
    assert db_snapshot(db) == before
    for token in range(4):
        complete = "SELECT * FROM fairsched.leases_complete('w-other', %s, %s)"
        assert worker.execute(complete, [[job_id], [token]]).fetchall() == []
    assert job(db, job_id) == row


def test_worker_cannot_forge_attempt_rows_so_recovery_still_runs(
    owner: Client, worker: psycopg.Connection, db: psycopg.Connection
) -> None:
    owner.enqueue("fifo", {}, tenant="globex")
    [lease] = owner.claim("fifo", owner="w", lease_seconds=0.001)
    refused(
        db,
        worker,
        "INSERT INTO fairsched.attempt_log (job_id, attempt, lease_token, lease_owner, claimed_at, outcome)"
        " VALUES (%s, %s, %s, 'forged', now(), 'expired')",
        [lease.id, lease.attempt, lease.token],
    )
    refused(
        db,
        worker,
        "INSERT INTO fairsched.job_events (job_id, kind, detail) VALUES (%s, 'x', '{}')",
        [lease.id],
    )
    rows = worker.execute("SELECT * FROM fairsched.recovery_sweep(NULL, 100)").fetchall()
    assert rows == [(lease.id, "fifo", "pending")]


def test_worker_cannot_forge_share_releases_to_pass_a_cap(
    owner: Client, worker: psycopg.Connection, db: psycopg.Connection
) -> None:
    owner.enqueue_many("weighted", [JobSpec({}, tenant="acme") for _ in range(3)])
    [held] = owner.claim("weighted", owner="w", limit=3)  # cap 1: one job
    refused(
        db,
        worker,
        "SELECT fairsched.tenant_shares_finish(%s, '{weighted}', '{acme}')",
        [[held.id]],
    )
    refused(db, worker, "SELECT fairsched.tenant_shares_finish(%s::bigint[])", [[held.id]])
    refused(
        db,
        worker,
        "INSERT INTO fairsched.tenant_releases (queue_name, tenant, shard, released)"
        " VALUES ('weighted', 'acme', 0, 5)",
    )
    refused(db, worker, "UPDATE fairsched.tenant_shares SET running = 0")
    # The settle function releases only what left running, once: a running job and a
    # second call change nothing.
    before = db_snapshot(db)
    worker.execute("SELECT fairsched.tenant_shares_settle(%s)", [[held.id]])
    assert db_snapshot(db) == before
    assert owner.fail(held, PermanentError("x"))
    before = db_snapshot(db)
    worker.execute("SELECT fairsched.tenant_shares_settle(%s)", [[held.id]])
    assert db_snapshot(db) == before
    assert len(owner.claim("weighted", owner="w", limit=3)) == 1, "the cap holds"


def test_worker_cannot_install_or_misuse_a_claim(
    owner: Client, worker: psycopg.Connection, db: psycopg.Connection
) -> None:
    owner.enqueue("weighted", {}, tenant="acme")
    fifo = claim_function(("fifo",), single=False)
    weighted = claim_function(("weighted",), single=False)
    refused(
        db,
        worker,
        "SELECT fairsched.stack_function_install('stack_claim_0000000000000000', 'claim', '{fifo}',"
        " '{\"SELECT * FROM fairsched.jobs\"}')",
    )
    refused(db, worker, "CREATE FUNCTION fairsched.mine() RETURNS int LANGUAGE sql RETURN 1")
    # The fifo claim run on the weighted queue would bypass its shares and cap: refused.
    params = {"queue": "weighted", "owner": "w", "limit": 5, "lease_seconds": None}
    refused(db, worker, fifo.call.as_string(worker), params)
    assert len(worker.execute(weighted.call, params).fetchall()) == 1


# -- the producer -------------------------------------------------------------------------


def test_producer_cannot_rewind_its_virtual_time_or_deactivate_another_tenant(
    owner: Client, producer: psycopg.Connection, db: psycopg.Connection
) -> None:
    owner.enqueue_many("weighted", [JobSpec({}, tenant=t) for t in ("acme", "globex")])
    refused(db, producer, "UPDATE fairsched.tenant_shares SET pass = -1e300 WHERE tenant = 'acme'")
    refused(db, producer, "UPDATE fairsched.tenant_shares SET active = false WHERE tenant = 'globex'")
    refused(db, producer, "DELETE FROM fairsched.tenant_shares WHERE tenant = 'globex'")
    refused(db, producer, "SELECT fairsched.tenant_shares_finish('{1}', '{weighted}', '{acme}')")


def test_producer_cannot_precreate_another_tenants_aggregate(
    owner: Client, producer: psycopg.Connection, producer_role: str, db: psycopg.Connection
) -> None:
    refused(
        db,
        producer,
        "INSERT INTO fairsched.aggregates (queue_name, tenant, aggregate_key, next_seq)"
        " VALUES ('serial', 'globex', 'order-1', 4611686018427387904)",
    )
    before = db_snapshot(db)
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match=f"role {producer_role} .* tenant globex"):
        producer.execute(
            "SELECT * FROM fairsched.aggregates_lock('serial', '{globex}', '{order-1}',"
            " '{4611686018427387904}')"
        )
    assert db_snapshot(db) == before
    assert owner.enqueue("serial", {}, tenant="globex", aggregate_key="order-1", aggregate_seq=1)


def test_producer_cannot_finish_or_start_a_job(
    owner: Client, producer: psycopg.Connection, db: psycopg.Connection
) -> None:
    job_id = owner.enqueue("fifo", {}, tenant="globex")
    refused(db, producer, "UPDATE fairsched.jobs SET status = 'succeeded' WHERE id = %s", [job_id])
    refused(db, producer, "UPDATE fairsched.jobs SET status = 'running' WHERE id = %s", [job_id])
    refused(
        db,
        producer,
        "INSERT INTO fairsched.jobs (queue_name, tenant, payload, max_attempts, status)"
        " VALUES ('fifo', 'acme', '{}', 1, 'running')",
    )
    refused(db, producer, "SELECT * FROM fairsched.recovery_sweep(NULL, 10)")


def test_producer_enqueues_only_for_its_granted_tenants(
    owner: Client, producer: psycopg.Connection, producer_role: str, db: psycopg.Connection, fresh_db: str
) -> None:
    with Client(make_conninfo(fresh_db, user=producer_role)) as client:
        assert client.enqueue("fifo", {}, tenant="acme")
        before = db_snapshot(db)
        with pytest.raises(
            DatabaseError, match=f"permission denied: role {producer_role} may not enqueue for tenant globex"
        ):
            client.enqueue_many("fifo", [JobSpec({}, tenant="acme"), JobSpec({}, tenant="globex")])
        assert db_snapshot(db) == before
    refused(db, producer, raw_enqueue(("fifo",), "fifo", "globex"))
    # A prefix grant: every tenant starting with it.
    assert tenant_grant(db, producer_role, "team-*")
    assert producer.execute(raw_enqueue(("fifo",), "fifo", "team-7")).fetchone()


def raw_enqueue(stack: tuple[str, ...], queue: str, tenant: str, key: str | None = None) -> sql.Composed:
    """A call of a stack's enqueue function with one job, as a producer could write it."""
    return sql.SQL(
        "SELECT * FROM fairsched.{}({}, ARRAY[{}], ARRAY['{{}}'::jsonb], '{{0}}', ARRAY[{}]::text[],"
        " ARRAY[{}]::bigint[], '{{NULL}}', '{{NULL}}', '{{NULL}}', true, NULL)"
    ).format(
        sql.Identifier(enqueue_function(stack).name),
        queue,
        tenant,
        key,
        None if key is None else 1,
    )


def test_a_producer_with_no_grant_enqueues_for_no_tenant(
    owner: Client, producer: psycopg.Connection, producer_role: str, db: psycopg.Connection
) -> None:
    db.execute("DELETE FROM fairsched.producer_tenants WHERE role_name = %s", [producer_role])
    refused(db, producer, raw_enqueue(("fifo",), "fifo", "acme"))


def test_a_producer_inserts_only_the_way_the_queues_stack_asks(
    owner: Client, producer: psycopg.Connection, db: psycopg.Connection
) -> None:
    """The serial queue holds jobs of an aggregate back: the fifo stack's insert, which
    would make them claimable at once, is refused for it, and so is the engine's batch
    insert the stack functions superseded."""
    refused(db, producer, raw_enqueue(("fifo",), "serial", "acme", key="order-1"))
    refused(
        db,
        producer,
        "SELECT * FROM fairsched.jobs_enqueue('serial', '{acme}', ARRAY['{}'::jsonb], '{0}', '{order-1}',"
        " '{1}', '{NULL}', '{NULL}', '{NULL}', false, false, NULL)",
        error=psycopg.errors.FeatureNotSupported,
    )
    first = owner.enqueue("serial", {}, tenant="acme", aggregate_key="order-1", aggregate_seq=1)
    second = owner.enqueue("serial", {}, tenant="acme", aggregate_key="order-1", aggregate_seq=2)
    assert [job(db, first)[0], job(db, second)[0]] == ["pending", "waiting"]


# -- the grants' command line ------------------------------------------------------------


def test_role_commands_grant_list_and_revoke_tenants(
    fresh_db: str, producer_role: str, db: psycopg.Connection
) -> None:
    assert cli(fresh_db, "role", "grant-tenant", producer_role, "team-*").exit_code == 0
    assert "already granted" in cli(fresh_db, "role", "grant-tenant", producer_role, "team-*").stdout
    listed = json.loads(cli(fresh_db, "role", "list", "--json").stdout)
    assert [(g["role"], g["tenant"]) for g in listed] == [(producer_role, "acme"), (producer_role, "team-*")]
    assert cli(fresh_db, "role", "revoke-tenant", producer_role, "team-*").exit_code == 0
    before = db_snapshot(db)
    for args, message in (
        (("revoke-tenant", producer_role, "team-*"), f"{producer_role} has no grant team-*"),
        (("grant-tenant", "no_such_role_7f3", "acme"), "no role 'no_such_role_7f3'"),
        (("grant-tenant", producer_role, "bad\x01tenant"), "control or unassigned characters"),
        (("grant-tenant", producer_role, "x" * 129), "the limit is 128"),
    ):
        result = cli(fresh_db, "role", *args)
        assert result.exit_code == 1 and message in one_error_line(result), result.output
    assert db_snapshot(db) == before


# -- the schedule duty --------------------------------------------------------------------


def test_a_worker_runs_the_schedule_duty_through_functions_and_cannot_forge_a_tick(
    owner: Client, worker: psycopg.Connection, producer_role: str, fresh_db: str, db: psycopg.Connection
) -> None:
    """A worker's login role that is also a producer granted the schedule's tenant enqueues
    a due tick and moves it on; a move that names another job than the tick's is refused."""
    db.execute(
        "INSERT INTO fairsched.schedules (name, cron, timezone, queue_name, tenant, next_tick)"
        " VALUES ('nightly', '0 2 * * *', 'UTC', 'fifo', 'acme', now() - interval '1 hour')"
    )
    db.execute(sql.SQL("GRANT fairsched_worker TO {}").format(sql.Identifier(producer_role)))
    with psycopg.connect(make_conninfo(fresh_db, user=producer_role), autocommit=True) as duty:
        ticked = schedule_tick(duty, "nightly", max_payload_bytes=1024)
    assert ticked is not None
    row = db.execute("SELECT last_job_id, next_tick > now() FROM fairsched.schedules").fetchone()
    assert row == (ticked.job_id, True)
    other = owner.enqueue("fifo", {}, tenant="acme")
    db.execute("UPDATE fairsched.schedules SET next_tick = now() - interval '1 hour'")
    refused(
        db,
        worker,
        "SELECT fairsched.schedule_tick_advance('nightly', now() - interval '1 hour', %s,"
        " now() + interval '1 day')",
        [other],
    )
    refused(db, worker, "UPDATE fairsched.schedules SET next_tick = now() + interval '10 years'")
