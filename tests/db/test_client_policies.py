"""Policy operations through the Client: tenant shares and blocked aggregates."""

from __future__ import annotations

import time

import psycopg
import pytest

from fairsched import Client, JobSpec, PermanentError, QueueSettings
from fairsched.engine.enqueue import jobs_enqueue
from fairsched.engine.stackfunctions import stack_functions_install
from fairsched.errors import DatabaseError, InvalidInput, JobNotFound


def test_tenant_share_is_set_and_listed(client: Client) -> None:
    client.declare_queue("w", QueueSettings(policies=["weighted"]))
    client.enqueue("w", {}, tenant="acme")
    client.set_tenant_share("w", "acme", weight=3, cap=2)
    [share] = client.tenant_shares("w")
    assert (share.tenant, share.weight, share.cap) == ("acme", 3.0, 2)
    client.set_tenant_share("w", "acme", cap=0)
    assert client.tenant_shares("w")[0].cap is None


@pytest.mark.parametrize(("tenant", "weight"), [("acme", 0), ("acme", -1), ("", 1), ("x" * 300, 1)])
def test_bad_tenant_share_is_refused(client: Client, tenant: str, weight: float) -> None:
    client.declare_queue("w", QueueSettings(policies=["weighted"]))
    with pytest.raises(InvalidInput):
        client.set_tenant_share("w", tenant, weight=weight)
    assert client.tenant_shares("w") == []


def test_blocked_aggregate_is_listed_and_unblocked(client: Client) -> None:
    client.declare_queue("s", QueueSettings(policies=["serial"], backoff_max_seconds=0))
    first = client.enqueue("s", {}, tenant="t", aggregate_key="order-1", aggregate_seq=1)
    client.enqueue("s", {}, tenant="t", aggregate_key="order-1", aggregate_seq=2)
    [lease] = client.claim("s", owner="w")
    client.fail(lease, PermanentError("poisoned"))
    assert client.claim("s", owner="w") == []
    [blocked] = client.aggregates_blocked(queue="s")
    assert blocked.aggregate_key == "order-1"
    assert client.aggregate_unblock("s", "t", "order-1") == first
    [again] = client.claim("s", owner="w")
    assert again.id == first
    with pytest.raises(JobNotFound):
        client.aggregate_skip("s", "t", "order-1")


def test_a_tenant_whose_delayed_job_came_due_rejoins_the_selection_at_the_sweep(
    client: Client, db: psycopg.Connection
) -> None:
    """A weighted claim that finds a tenant with nothing due takes it out of the selection;
    the sweeper's pass (the policy's ``sweep``) brings it back once its job is due, and
    nothing else does."""
    client.declare_queue("w", QueueSettings(policies=["weighted"]))
    due = db.execute("SELECT now() + interval '1 second'").fetchone()[0]  # type: ignore[index]
    job_id = client.enqueue("w", {}, tenant="a", run_at=due)
    assert client.claim("w", owner="x") == []
    active = "SELECT active FROM fairsched.tenant_shares WHERE queue_name = 'w' AND tenant = 'a'"
    assert db.execute(active).fetchone() == (False,)
    while db.execute("SELECT now() <= %s", (due,)).fetchone() == (True,):
        time.sleep(0.1)
    assert client.claim("w", owner="x") == []  # due, but out of the selection
    client.recover()
    assert db.execute(active).fetchone() == (True,)
    [lease] = client.claim("w", owner="x")
    assert lease.id == job_id


def test_an_enqueue_after_another_process_changed_the_stack_goes_in_the_new_way(
    client: Client, db: psycopg.Connection
) -> None:
    """A process reads a queue's stack at most once a second: an enqueue in between calls
    the old stack's function, which the queue refuses; outside a transaction of the
    caller's, the stack is read again and the batch goes in the new stack's way (here:
    with the aging key of its priority, at the default interval)."""
    client.declare_queue("changing", QueueSettings(policies=["fifo"]))
    client.enqueue("changing", {}, tenant="t")  # the fifo stack is cached now
    stack_functions_install(db, ("fifo", "aging"))
    db.execute("UPDATE fairsched.queues SET policies = '{fifo,aging}' WHERE name = 'changing'")
    urgent = client.enqueue("changing", {}, tenant="t", priority=5)
    row = db.execute(
        "SELECT extract(epoch FROM created_at) - aging_key FROM fairsched.jobs WHERE id = %s", (urgent,)
    ).fetchone()
    assert row is not None and row[0] == pytest.approx(5 * 60)  # the default interval
    with db.transaction(), pytest.raises(DatabaseError, match="does not have the policy stack"):
        db.execute("UPDATE fairsched.queues SET policies = '{fifo}' WHERE name = 'changing'")
        jobs_enqueue(db, "changing", [JobSpec({}, tenant="t")], max_payload_bytes=1024)
