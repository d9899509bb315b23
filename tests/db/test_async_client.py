"""AsyncClient: every method against a real PostgreSQL, enqueue inside the caller's async
transaction (commit and rollback), foreign connections, and queues with policy hooks."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import psycopg
import psycopg2
import pytest
import pytest_asyncio

from fairsched import AsyncClient, Client, JobSpec, QueueSettings, Settings, asyncclient
from fairsched.engine.composer import compose_claim
from fairsched.errors import DatabaseUnavailable, InvalidInput, JobNotFound, UnknownQueue
from fairsched.policy.registry import registry

pytestmark = pytest.mark.asyncio

FAST = QueueSettings(lease_seconds=30, backoff_base_seconds=0.0, backoff_max_seconds=0.0, max_attempts=3)
PLUGIN = Path(__file__).resolve().parent.parent / "plugin_policy"


@pytest_asyncio.fixture
async def aclient(fresh_db: str) -> AsyncIterator[AsyncClient]:
    """An async client on a fresh database with queue ``q`` declared (no retry delay)."""
    async with AsyncClient(fresh_db, settings=Settings(max_payload_bytes=4096)) as c:
        await c.declare_queue("q", FAST)
        yield c


def status_of(db: psycopg.Connection, job_id: int) -> str | None:
    row = db.execute("SELECT status FROM fairsched.jobs WHERE id = %s", (job_id,)).fetchone()
    return None if row is None else str(row[0])


async def test_a_job_goes_from_enqueue_to_succeeded(aclient: AsyncClient, db: psycopg.Connection) -> None:
    job_id = await aclient.enqueue("q", {"n": "Zoë"}, tenant="acme", priority=2)
    [lease] = await aclient.claim("q", owner="w1")
    assert (lease.id, lease.payload, lease.tenant, lease.attempt) == (job_id, {"n": "Zoë"}, "acme", 1)
    assert await aclient.claim("q", owner="w2") == []
    assert await aclient.heartbeat(lease, {"done": 1}) is True
    assert await aclient.complete(lease) is True
    assert await aclient.complete(lease) is False
    shown = await aclient.job_show(job_id)
    assert shown["status"] == "succeeded"
    assert status_of(db, job_id) == "succeeded"


async def test_batches_failures_and_releases(aclient: AsyncClient, db: psycopg.Connection) -> None:
    ids = await aclient.enqueue_many("q", [JobSpec({"i": i}, "t") for i in range(5)])
    leases = await aclient.claim("q", owner="w", limit=5)
    assert sorted(lease.id for lease in leases) == sorted(ids)
    first, second, third, fourth, fifth = sorted(leases)
    assert await aclient.complete_many([first, second]) == {first.id, second.id}
    assert await aclient.fail(third, ValueError("boom")) is True
    assert status_of(db, third.id) == "pending"
    outcome = await aclient.fail_attempt(fourth, "no", kind="permanent", code="bad")
    assert (outcome.held, outcome.status) == (True, "dead")
    assert await aclient.release(fifth) is True
    [again, back] = sorted(await aclient.claim("q", owner="w", limit=5))
    assert {again.id, back.id} == {third.id, fifth.id}
    outcomes = await aclient.fail_many([(again, "x"), (back, RuntimeError("y"))])
    assert set(outcomes) == {third.id, fifth.id} and all(o.held for o in outcomes.values())


async def test_recovery_dead_jobs_and_maintenance(aclient: AsyncClient, db: psycopg.Connection) -> None:
    job_id = await aclient.enqueue("q", {}, tenant="t")
    [lease] = await aclient.claim("q", owner="w")
    db.execute("UPDATE fairsched.jobs SET lease_expires_at = now() - interval '1 s' WHERE id = %s", (job_id,))
    result = await aclient.recover()
    assert (result.retried, result.dead) == (1, 0)
    assert await aclient.complete(lease) is False
    [lease] = await aclient.claim("q", owner="w")
    await aclient.fail(lease, "poison", kind="permanent")
    [dead] = await aclient.dead_list(queue="q")
    assert dead.id == job_id
    await aclient.dead_replay(job_id)
    assert status_of(db, job_id) == "pending"
    [lease] = await aclient.claim("q", owner="w")
    await aclient.fail(lease, "poison", kind="permanent")
    await aclient.dead_discard(job_id, by="test")
    assert await aclient.dead_list(queue="q") == []
    with pytest.raises(JobNotFound):
        await aclient.dead_replay(job_id)
    pruned = await aclient.prune(dry_run=True)
    assert pruned.dry_run
    assert await aclient.heads_refresh() >= 0
    assert await aclient.statistics_refresh() in (True, False)
    assert await aclient.migrate() == []


async def test_serial_aggregates_block_unblock_and_skip(aclient: AsyncClient) -> None:
    await aclient.declare_queue("s", QueueSettings(policies=["serial"], serial_poison="block"))
    for seq in (1, 2):
        await aclient.enqueue("s", {}, tenant="t", aggregate_key="k", aggregate_seq=seq)
    [head] = await aclient.claim("s", owner="w", limit=5)
    await aclient.fail(head, "poison", kind="permanent")
    [blocked] = await aclient.aggregates_blocked(queue="s")
    assert (blocked.aggregate_key, blocked.blocked_job_id) == ("k", head.id)
    assert await aclient.aggregate_unblock("s", "t", "k") == head.id
    [again] = await aclient.claim("s", owner="w")
    await aclient.fail(again, "poison", kind="permanent")
    assert await aclient.aggregate_skip("s", "t", "k") == head.id
    [nxt] = await aclient.claim("s", owner="w")
    assert (nxt.aggregate_key, nxt.aggregate_seq) == ("k", 2)
    with pytest.raises(InvalidInput, match="sequence number 1"):
        await aclient.enqueue("s", {}, tenant="t", aggregate_key="k", aggregate_seq=1)


async def test_tenant_shares_rates_and_stacks(aclient: AsyncClient) -> None:
    await aclient.declare_queue("w", QueueSettings(policies=["weighted", "ratelimit"]))
    assert (await aclient.queue_stack("w")).names == ("weighted", "ratelimit")
    await aclient.set_tenant_share("w", "acme", weight=3, cap=2)
    await aclient.enqueue("w", {}, tenant="acme")
    [share] = await aclient.tenant_shares("w")
    assert (share.tenant, share.weight, share.cap) == ("acme", 3, 2)
    await aclient.set_queue_rate("w", "10/s")
    await aclient.set_tenant_rate("w", "acme", "1/h")
    assert len(await aclient.claim("w", owner="w", limit=5)) == 1
    await aclient.enqueue("w", {}, tenant="acme")
    assert await aclient.claim("w", owner="w") == []
    with pytest.raises(InvalidInput, match="weight"):
        await aclient.set_tenant_share("w", "acme", weight=-1)


async def test_settings_queues_are_applied(fresh_db: str) -> None:
    settings = Settings(database_url=fresh_db, queues={"mail": QueueSettings(lease_seconds=12)})
    async with AsyncClient.from_settings(settings) as client:
        await client.apply_settings()
        assert (await client.queue_stack("mail")).names == ("fifo",)


async def test_bad_input_and_unknown_queues_get_the_sync_clients_errors(aclient: AsyncClient) -> None:
    with pytest.raises(UnknownQueue):
        await aclient.enqueue("nope", {}, tenant="t")
    with pytest.raises(InvalidInput, match="limit must be between"):
        await aclient.claim("q", owner="w", limit=0)
    with pytest.raises(InvalidInput, match="tenant"):
        await aclient.enqueue("q", {}, tenant="")


async def test_concurrent_claims_share_out_the_jobs(aclient: AsyncClient) -> None:
    ids = await aclient.enqueue_many("q", [JobSpec({}, f"t{i % 3}") for i in range(40)])
    batches = await asyncio.gather(*(aclient.claim("q", owner=f"w{i}", limit=5) for i in range(10)))
    claimed = [lease.id for batch in batches for lease in batch]
    assert sorted(claimed) == sorted(ids)


async def test_enqueue_joins_the_callers_async_transaction(
    aclient: AsyncClient, fresh_db: str, db: psycopg.Connection
) -> None:
    async with await psycopg.AsyncConnection.connect(fresh_db) as conn:
        async with conn.transaction():
            kept = await aclient.enqueue("q", {"k": 1}, tenant="t", conn=conn)
            # not visible outside the transaction before it commits
            assert status_of(db, kept) is None
            assert await aclient.claim("q", owner="w") == []
        assert status_of(db, kept) == "pending"
        with pytest.raises(RuntimeError, match="changed my mind"):
            async with conn.transaction():
                gone = await aclient.enqueue("q", {"k": 2}, tenant="t", conn=conn)
                raise RuntimeError("changed my mind")
    assert status_of(db, gone) is None
    assert [lease.id for lease in await aclient.claim("q", owner="w", limit=5)] == [kept]


async def test_a_failed_enqueue_inside_the_transaction_is_rolled_back_with_it(
    aclient: AsyncClient, fresh_db: str, db: psycopg.Connection
) -> None:
    async with await psycopg.AsyncConnection.connect(fresh_db) as conn:
        with pytest.raises(UnknownQueue):
            async with conn.transaction():
                first = await aclient.enqueue("q", {}, tenant="t", conn=conn)
                await aclient.enqueue("nope", {}, tenant="t", conn=conn)
    assert status_of(db, first) is None


@pytest.fixture
def foreign(request: pytest.FixtureRequest, fresh_db: str) -> Iterator[object]:
    if request.param == "sqlite3":
        conn: object = sqlite3.connect(":memory:")
    elif request.param == "psycopg2":
        conn = psycopg2.connect(fresh_db)
    else:
        conn = psycopg.connect(fresh_db)
    yield conn
    conn.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("foreign", ["sqlite3", "psycopg2", "psycopg-sync"], indirect=True)
async def test_the_async_client_refuses_other_connections(
    aclient: AsyncClient, foreign: object, db: psycopg.Connection
) -> None:
    with pytest.raises(InvalidInput, match=r"conn must be a psycopg 3 psycopg\.AsyncConnection"):
        await aclient.enqueue("q", {}, tenant="t", conn=foreign)  # type: ignore[arg-type]
    assert db.execute("SELECT count(*) FROM fairsched.jobs").fetchone() == (0,)


@pytest.mark.parametrize("foreign", ["sqlite3", "psycopg2"], indirect=True)
async def test_the_sync_client_refuses_other_connections(
    fresh_db: str, foreign: object, db: psycopg.Connection
) -> None:
    with Client(fresh_db) as client:
        client.declare_queue("q")
        with pytest.raises(InvalidInput, match=r"conn must be a psycopg 3 psycopg\.Connection, got a"):
            client.enqueue("q", {}, tenant="t", conn=foreign)  # type: ignore[arg-type]
        async with await psycopg.AsyncConnection.connect(fresh_db) as aconn:
            with pytest.raises(InvalidInput, match=r"psycopg\.Connection, got a psycopg\.AsyncConnection"):
                client.enqueue("q", {}, tenant="t", conn=aconn)  # type: ignore[arg-type]
    assert db.execute("SELECT count(*) FROM fairsched.jobs").fetchone() == (0,)


@pytest.fixture
def hold_installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The ``hold`` policy of tests/plugin_policy (an ``on_finish`` hook), registered."""
    monkeypatch.syspath_prepend(str(PLUGIN))
    registry.cache_clear()
    compose_claim.cache_clear()
    yield
    registry.cache_clear()
    compose_claim.cache_clear()


async def test_a_policys_hooks_run_on_the_async_connection(
    hold_installed: None, aclient: AsyncClient, db: psycopg.Connection
) -> None:
    """A hook is given a view of the async connection, in the transition's transaction:
    its writes land with the transition's, and go with its rollback."""
    db.execute("CREATE TABLE public.hold_log (queue text, job_id bigint)")
    await aclient.declare_queue("held", QueueSettings(policies=["fifo", "hold"]))
    job_id = await aclient.enqueue("held", {}, tenant="t")
    await aclient.enqueue("held", {"hold": True}, tenant="t")
    [lease] = await aclient.claim("held", owner="w", limit=5)
    assert lease.id == job_id
    assert await aclient.complete(lease)
    assert db.execute("SELECT queue, job_id FROM public.hold_log").fetchall() == [("held", job_id)]
    db.execute("DROP TABLE public.hold_log")
    assert await aclient.claim("held", owner="w", limit=5) == []  # the held job stays
    job_id = await aclient.enqueue("held", {}, tenant="t")
    [lease] = await aclient.claim("held", owner="w")
    with pytest.raises(psycopg.errors.UndefinedTable, match="hold_log"):
        await aclient.complete(lease)  # the hook fails: the completion rolls back with it
    assert db.execute("SELECT status FROM fairsched.jobs WHERE id = %s", (job_id,)).fetchone() == ("running",)


async def test_the_event_loop_runs_on_while_an_enqueue_waits_for_a_lock(
    aclient: AsyncClient, fresh_db: str, db: psycopg.Connection
) -> None:
    """An enqueue waiting for a serial aggregate's lock leaves the loop free: the holder,
    on the same loop, commits and the enqueue goes on (a blocked loop would never get
    there: the enqueue would give up at its lock timeout)."""
    async with enqueue_waiting_on_a_lock(aclient, fresh_db) as waiting:
        assert not waiting.done()
    await waiting
    assert [lease.aggregate_seq for lease in await aclient.claim("s", owner="w", limit=5)] == [1]


WAITING_ON_A_LOCK = (
    "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
)


@asynccontextmanager
async def enqueue_waiting_on_a_lock(aclient: AsyncClient, fresh_db: str) -> AsyncIterator[asyncio.Task[int]]:
    """An enqueue of serial aggregate ``k``'s seq 2 on queue ``s``, waiting for the lock a
    transaction holds (it enqueued seq 1) until the block ends: the holder commits then."""
    await aclient.declare_queue("s", QueueSettings(policies=["serial"]))
    async with await psycopg.AsyncConnection.connect(fresh_db) as holder, holder.transaction():
        await aclient.enqueue("s", {}, tenant="t", aggregate_key="k", aggregate_seq=1, conn=holder)
        waiting = asyncio.create_task(
            aclient.enqueue("s", {}, tenant="t", aggregate_key="k", aggregate_seq=2)
        )
        async with await psycopg.AsyncConnection.connect(fresh_db, autocommit=True) as watcher:
            while not await (await watcher.execute(WAITING_ON_A_LOCK)).fetchone():
                await asyncio.sleep(0.01)
        yield waiting


async def test_the_pools_sessions_are_the_sync_clients(aclient: AsyncClient) -> None:
    """The main pool's sessions set the worker role's limits; the claim pool's are claim
    sessions (generic plans), as Client's pools."""
    async with (await aclient.pool()).connection() as conn:
        assert await (await conn.execute("SHOW lock_timeout")).fetchone() == ("5s",)
        assert await (await conn.execute("SHOW plan_cache_mode")).fetchone() == ("auto",)
    async with (await aclient.claim_pool()).connection() as conn:
        assert await (await conn.execute("SHOW plan_cache_mode")).fetchone() == ("force_generic_plan",)
        assert await (await conn.execute("SHOW idle_in_transaction_session_timeout")).fetchone() == ("10s",)


async def test_a_database_that_cannot_be_reached_is_named_with_the_servers_reason(
    fresh_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(asyncclient, "POOL_OPEN_TIMEOUT_SECONDS", 1.0)  # the pool gives up sooner
    missing = fresh_db.replace("dbname=", "dbname=nosuch_")
    client = AsyncClient(missing)
    with pytest.raises(DatabaseUnavailable, match="does not exist"):
        await client.enqueue("q", {}, tenant="t")
    await client.close()


async def test_a_cancelled_enqueue_changes_nothing_and_the_client_goes_on(
    aclient: AsyncClient, fresh_db: str, db: psycopg.Connection
) -> None:
    """Cancelling the task of an enqueue that waits for a lock ends it (the statement is
    cancelled on the server), writes nothing, and leaves the pool's connections usable."""
    async with enqueue_waiting_on_a_lock(aclient, fresh_db) as waiting:
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    assert db.execute("SELECT aggregate_seq FROM fairsched.jobs").fetchall() == [(1,)]
    await aclient.enqueue("s", {}, tenant="t", aggregate_key="k", aggregate_seq=2)
    [first] = await aclient.claim("s", owner="w", limit=5)
    assert first.aggregate_seq == 1 and await aclient.complete(first)
    [second] = await aclient.claim("s", owner="w", limit=5)
    assert second.aggregate_seq == 2


async def test_every_public_method_of_client_has_its_coroutine() -> None:
    public = {name for name in dir(Client) if not name.startswith("_") and callable(getattr(Client, name))}
    missing = {name for name in public if not hasattr(AsyncClient, name)}
    assert not missing, f"AsyncClient lacks {sorted(missing)}"


async def test_cancel_queued_and_running_jobs(aclient: AsyncClient, db: psycopg.Connection) -> None:
    queued, running, other = await aclient.enqueue_many(
        "q", [JobSpec({}, "acme"), JobSpec({}, "acme"), JobSpec({}, "globex")]
    )
    [lease] = await aclient.claim("q", owner="w1")
    assert lease.id == queued
    assert await aclient.cancel(running, by="async") == "cancelled"
    assert await aclient.cancel_requested([lease]) == set()
    result = await aclient.cancel_many([queued, other, 999_999], by="async")
    assert (result.requested, result.cancelled, result.not_found) == ([queued], [other], [999_999])
    assert await aclient.cancel_requested([lease]) == {queued}
    assert await aclient.fail(lease, "stopped")
    assert [status_of(db, job_id) for job_id in (queued, running, other)] == ["cancelled"] * 3
    by_tenant = await aclient.cancel_many(queue="q", tenant="acme")
    assert by_tenant.cancelled == [] and by_tenant.requested == []
