"""The fence of every lease transition, one compare at a time: token, owner, expiry.

A worker's owner is ``host:pid``: a worker that lost a lease and claimed the same job
again presents the same owner with an old token, so each compare must hold on its own.
Refused means refused and audited, with nothing changed. The engine's completion
(``fifo``) and a stack's own (``weighted``, which settles at completion) are both fenced.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from conftest import FAST_QUEUE
from worker_support import wait_for

from fairsched import Client, JobSpec, Settings
from fairsched.engine.claim import jobs_claim
from fairsched.engine.lease import Lease, lease_renew

TRANSITIONS: dict[str, Callable[[Client, Lease], bool]] = {
    "renew": lambda client, lease: client.heartbeat(lease, progress="late"),
    "complete": lambda client, lease: client.complete(lease),
    "fail": lambda client, lease: client.fail(lease, "late"),
    "release": lambda client, lease: client.release(lease),
}
"""Each fenced transition, presenting a lease; whether it held."""

AUDITED = {"complete", "fail", "release"}
"""The transitions whose refusal is recorded as a rejected stale completion."""

CASES = [
    pytest.param(transition, stack, id=f"{transition}-{stack}")
    for transition in TRANSITIONS
    for stack in ("fifo", "weighted")
]

ROW = """SELECT status, lease_owner, lease_token, lease_expires_at, attempt_count, progress, available_at
  FROM fairsched.jobs WHERE id = %s"""


@pytest.fixture
def fenced(fresh_db: str, request: pytest.FixtureRequest) -> Iterator[Client]:
    """A client with queue ``q`` on the stack the test case names."""
    stack = request.node.callspec.params["stack"]
    with Client(fresh_db, settings=Settings()) as client:
        client.declare_queue("q", FAST_QUEUE.model_copy(update={"policies": [stack]}))
        yield client


def row(db: psycopg.Connection, job_id: int) -> tuple[Any, ...]:
    found = db.execute(ROW, (job_id,)).fetchone()
    assert found is not None
    return tuple(found)


def stale_events(db: psycopg.Connection, job_id: int) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT detail->>'op', (detail->>'token')::bigint, detail->>'owner' FROM fairsched.job_events"
        " WHERE job_id = %s AND kind = 'stale_completion_rejected' ORDER BY id",
        (job_id,),
    ).fetchall()


def assert_refused(
    client: Client, db: psycopg.Connection, transition: str, presented: Lease, holder: Lease
) -> None:
    """``presented`` is refused, audited when the transition is, and the job is as it was:
    still ``holder``'s lease, which still completes."""
    before = row(db, holder.id)
    assert TRANSITIONS[transition](client, presented) is False
    assert row(db, holder.id) == before
    expected = [(transition, presented.token, presented.owner)] if transition in AUDITED else []
    assert stale_events(db, holder.id) == expected
    if holder is not presented:
        assert client.complete(holder) is True


@pytest.mark.parametrize(("transition", "stack"), CASES)
def test_same_owner_with_an_old_token_is_refused(
    fenced: Client, db: psycopg.Connection, transition: str, stack: str
) -> None:
    """A worker lost its lease (expired, recovered) and claimed the same job again under
    the same owner: its first attempt's token no longer holds."""
    job_id = fenced.enqueue("q", {}, tenant="t")
    [old] = fenced.claim("q", owner="host:1")
    db.execute(
        "UPDATE fairsched.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s", (job_id,)
    )
    assert fenced.recover().retried == 1
    [new] = fenced.claim("q", owner="host:1")
    assert (new.id, new.owner, new.token) == (job_id, old.owner, old.token + 1)
    assert_refused(fenced, db, transition, old, new)


@pytest.mark.parametrize(("transition", "stack"), CASES)
def test_the_right_token_from_another_owner_is_refused(
    fenced: Client, db: psycopg.Connection, transition: str, stack: str
) -> None:
    fenced.enqueue("q", {}, tenant="t")
    [lease] = fenced.claim("q", owner="host:1")
    assert_refused(fenced, db, transition, lease._replace(owner="host:2"), lease)


@pytest.mark.parametrize(("transition", "stack"), CASES)
def test_an_expired_lease_is_refused_before_any_sweep(
    fenced: Client, db: psycopg.Connection, transition: str, stack: str
) -> None:
    """Past its expiry in database time, and before recovery moved it, a lease is lost to
    its own holder too: it may not renew, complete, fail or release."""
    fenced.enqueue("q", {}, tenant="t")
    [lease] = fenced.claim("q", owner="host:1", lease_seconds=0.2)
    expired = "SELECT now() > lease_expires_at FROM fairsched.jobs WHERE id = %s"
    wait_for(lambda: db.execute(expired, (lease.id,)).fetchone() == (True,), "the lease past its expiry")
    assert_refused(fenced, db, transition, lease, lease)
    assert row(db, lease.id)[0] == "running"  # left to recovery


@pytest.mark.parametrize("stack", ["fifo", "weighted"])
def test_a_claim_and_a_renewal_use_the_transactions_database_time(
    fresh_db: str, db: psycopg.Connection, stack: str
) -> None:
    """Inside one transaction a lease starts at the transaction's ``now()`` and expires one
    lease later, as a renewal in it does: the database's time, not a clock read later or
    elsewhere."""
    with Client(fresh_db) as client:
        client.declare_queue("q", FAST_QUEUE.model_copy(update={"policies": [stack]}))
        client.enqueue("q", {}, tenant="t")
    with psycopg.connect(fresh_db) as conn:
        started = conn.execute("SELECT now()").fetchone()
        conn.execute("SELECT pg_sleep(0.2)")
        [lease] = jobs_claim(conn, "q", owner="host:1", lease_seconds=30)
        assert started is not None and lease.started_at == started[0]
        assert lease.expires_at == started[0] + timedelta(seconds=30)
        assert lease_renew(conn, lease._replace(lease_seconds=45), progress=1) == started[0] + timedelta(
            seconds=45
        )


@pytest.mark.parametrize("stack", ["fifo", "weighted"])
def test_a_claim_passes_over_a_locked_job_instead_of_waiting(
    fresh_db: str, db: psycopg.Connection, stack: str
) -> None:
    """Another transaction holds the first job's row: a claim takes the next ones at once
    (``SKIP LOCKED``). A claim that waited would meet its lock timeout."""
    with Client(fresh_db) as client:
        client.declare_queue("q", FAST_QUEUE.model_copy(update={"policies": [stack]}))
        first, *rest = client.enqueue_many("q", [JobSpec({}, tenant="t") for _ in range(3)])
    with psycopg.connect(fresh_db) as holder, psycopg.connect(fresh_db) as conn:
        holder.execute("SELECT FROM fairsched.jobs WHERE id = %s FOR UPDATE", (first,))
        conn.execute("SET lock_timeout = '2s'")
        leases = jobs_claim(conn, "q", owner="host:1", limit=3)
        assert sorted(lease.id for lease in leases) == rest


def test_a_tenant_cap_holds_against_a_concurrent_claim(fresh_db: str, db: psycopg.Connection) -> None:
    """Two claims for a tenant capped at one running job: the second read the tenant's share
    before the first committed, waits for the share row, and then finds the cap reached on
    the row's latest version: it claims nothing."""
    with Client(fresh_db) as client:
        client.declare_queue("w", FAST_QUEUE.model_copy(update={"policies": ["weighted"]}))
        client.set_tenant_share("w", "a", weight=1, cap=1)
        client.enqueue_many("w", [JobSpec({}, tenant="a") for _ in range(3)])
    with psycopg.connect(fresh_db) as first, psycopg.connect(fresh_db) as second:
        assert len(jobs_claim(first, "w", owner="host:1")) == 1
        claimed: list[list[Lease]] = []
        waiter = threading.Thread(target=lambda: claimed.append(jobs_claim(second, "w", owner="host:2")))
        waiter.start()
        waiting = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s"
        wait_for(lambda: db.execute(waiting, (second.info.backend_pid,)).fetchone() == (True,), "a lock wait")
        first.commit()
        waiter.join(timeout=30)
        second.commit()
    assert claimed == [[]]
    running = db.execute("SELECT count(*) FROM fairsched.jobs WHERE status = 'running'").fetchone()
    assert running == (1,)
