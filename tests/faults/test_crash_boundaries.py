"""The crash boundaries of the job lifecycle, with real worker processes and real signals.

Each test is named after the boundary it interrupts. Assertions are on database
state only; waiting is bounded polling. Boundaries 8 (a flood against the
fairness policy) and 10 (large-backlog plans) are tested with the policies.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from apps.probe import create_probe_tables
from worker_support import (
    Workers,
    job_row,
    listener_pids,
    statuses,
    wait_for,
    wait_listening,
)

from fairsched import Client, JobSpec, QueueSettings, Settings


def declare(client: Client, *, lease: float, **settings: Any) -> None:
    """Queue ``probe`` with ``lease`` seconds and no retry delay."""
    values: dict[str, Any] = {"backoff_base_seconds": 0.0, "backoff_max_seconds": 0.0, **settings}
    client.declare_queue("probe", QueueSettings(lease_seconds=lease, **values))


@pytest.fixture
def client(fresh_db: str, db: psycopg.Connection) -> Iterator[Client]:
    """A client on a fresh database with the probe tables."""
    create_probe_tables(db)
    with Client(fresh_db, settings=Settings()) as c:
        yield c


def events(db: psycopg.Connection, job_id: int, name: str) -> list[tuple[Any, ...]]:
    """``(attempt, pid, idempotency_key, at)`` of a probe event, in order."""
    return db.execute(
        "SELECT attempt, pid, idempotency_key, at FROM public.probe_events"
        " WHERE job_id = %s AND event = %s ORDER BY id",
        (job_id, name),
    ).fetchall()


def attempts(db: psycopg.Connection, job_id: int) -> list[tuple[Any, ...]]:
    """``(attempt, claim, owner, outcome)`` of every recorded attempt of a job; ``claim``
    is its token counted from the first recorded attempt's, 1 (tokens start at random)."""
    return db.execute(
        "SELECT attempt, lease_token - min(lease_token) OVER () + 1, lease_owner, outcome"
        " FROM fairsched.attempts WHERE job_id = %s ORDER BY lease_token",
        (job_id,),
    ).fetchall()


def first_token(db: psycopg.Connection, job_id: int) -> int:
    """The token of a job's first recorded attempt."""
    row = db.execute(
        "SELECT min(lease_token) FROM fairsched.attempts WHERE job_id = %s", (job_id,)
    ).fetchone()
    assert row is not None and row[0] is not None
    return int(row[0])


def stale_events(db: psycopg.Connection, job_id: int) -> list[dict[str, Any]]:
    rows = db.execute(
        "SELECT detail FROM fairsched.job_events WHERE job_id = %s AND kind = 'stale_completion_rejected'",
        (job_id,),
    ).fetchall()
    return [row[0] for row in rows]


def test_boundary1_concurrent_worker_processes_never_share_a_lease(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client, lease=30)
    started = [workers.start({"probe": 4}) for _ in range(3)]
    wait_listening(db, 3)
    n = 300
    ids = client.enqueue_many("probe", [JobSpec({"record": True, "sleep": 0.01}, "t") for _ in range(n)])
    wait_for(lambda: statuses(db).get("succeeded") == n, f"{n} jobs succeeded")

    runs = db.execute("SELECT job_id, attempt FROM public.probe_events WHERE event = 'start'").fetchall()
    assert sorted(job_id for job_id, _ in runs) == sorted(ids), "each job ran exactly once"
    leases = db.execute("SELECT job_id, lease_token, lease_owner, outcome FROM fairsched.attempts").fetchall()
    assert len({(job_id, token) for job_id, token, _, _ in leases}) == len(leases) == n
    assert {outcome for *_, outcome in leases} == {"succeeded"}
    owners = {owner for _, _, owner, _ in leases}
    assert owners <= {w.owner for w in started}
    assert len(owners) >= 2, "the claims were shared between processes"
    assert db.execute("SELECT max(attempt_count) FROM fairsched.jobs").fetchone() == (1,)
    assert db.execute("SELECT count(*) FROM fairsched.job_events").fetchone() == (0,)


def test_boundary2_kill9_mid_job_is_recovered_and_succeeds_exactly_once(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client, lease=1)
    ids = client.enqueue_many(
        "probe", [JobSpec({"record": True, "sleep": 60, "slow_attempts": 1}, "t") for _ in range(3)]
    )
    a = workers.start({"probe": 3})
    wait_for(lambda: all(events(db, i, "start") for i in ids), "worker A started all three jobs")
    a.send(signal.SIGKILL)
    assert a.wait() == -signal.SIGKILL
    assert statuses(db) == {"running": 3}, "the killed worker's leases are still held"

    b = workers.start({"probe": 3})
    wait_for(lambda: statuses(db) == {"succeeded": 3}, "worker B finished the recovered jobs")

    for job_id in ids:
        assert attempts(db, job_id) == [(1, 1, a.owner, "expired"), (2, 2, b.owner, "succeeded")]
        assert [row[0] for row in events(db, job_id, "end")] == [2], "one completed execution"
        row = job_row(db, job_id)
        assert (row["status"], row["attempt_count"], row["lease_owner"]) == ("succeeded", 2, b.owner)
    assert db.execute(
        "SELECT count(*) FROM fairsched.jobs WHERE id = ANY(%s) AND status = 'succeeded'", (ids,)
    ).fetchone() == (3,)
    assert b.stop() == 0


def test_boundary3_paused_worker_stale_completion_updates_zero_rows(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client, lease=3)
    job_id = client.enqueue("probe", {"record": True, "sleep": 2, "slow_attempts": 1}, tenant="t")
    a = workers.start({"probe": 1})
    wait_for(lambda: events(db, job_id, "start"), "worker A started the job")
    a.send(signal.SIGSTOP)
    row = job_row(db, job_id)
    assert (row["status"], row["attempt_count"], row["lease_owner"]) == ("running", 1, a.owner)

    b = workers.start({"probe": 1})
    wait_for(lambda: job_row(db, job_id)["status"] == "succeeded", "worker B completed the job")
    a.send(signal.SIGCONT)
    wait_for(lambda: stale_events(db, job_id), "A's late completion was rejected")
    assert a.stop() == 0
    assert b.stop() == 0

    first = first_token(db, job_id)
    assert stale_events(db, job_id) == [{"op": "complete", "token": first, "owner": a.owner}]
    assert [(attempt, pid) for attempt, pid, *_ in events(db, job_id, "end")] == [
        (2, b.pid),
        (1, a.pid),
    ], "A's handler did finish, after B's"
    row = job_row(db, job_id)
    assert (row["status"], row["attempt_count"], row["lease_owner"]) == ("succeeded", 2, b.owner)
    assert attempts(db, job_id) == [(1, 1, a.owner, "expired"), (2, 2, b.owner, "succeeded")]


def test_boundary4_crash_after_side_effect_retry_sees_same_idempotency_key(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client, lease=1)
    payload = {"record": True, "send": True, "sleep": 60, "slow_attempts": 1}
    keyed = client.enqueue("probe", payload, tenant="t", idempotency_key="order-42-confirmation")
    derived = client.enqueue("probe", payload, tenant="t")
    a = workers.start({"probe": 2})
    wait_for(lambda: events(db, keyed, "sent") and events(db, derived, "sent"), "side effects done")
    a.send(signal.SIGKILL)
    assert a.wait() == -signal.SIGKILL

    workers.start({"probe": 2})
    wait_for(lambda: statuses(db) == {"succeeded": 2}, "the retries completed")
    for job_id, key in ((keyed, "order-42-confirmation"), (derived, f"fairsched-job-{derived}")):
        runs = events(db, job_id, "start")
        assert [(attempt, k) for attempt, _, k, _ in runs] == [(1, key), (2, key)]
        sends = db.execute(
            "SELECT attempt FROM public.probe_sends WHERE idempotency_key = %s", (key,)
        ).fetchall()
        assert sends == [(1,)], "the retry's side effect was deduplicated by its key"


def test_boundary5_lost_heartbeats_bound_the_duplicate_window_by_the_lease(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    lease = 2.0
    declare(client, lease=lease)
    owners = {w.pid: w.owner for w in (workers.start({"probe": 1}), workers.start({"probe": 1}))}
    wait_listening(db, 2)
    payload = {"record": True, "steps": 20, "step_seconds": 0.05, "stall_after": 10, "slow_attempts": 1}
    job_id = client.enqueue("probe", payload, tenant="t")

    last_expiry: list[Any] = []

    def done() -> bool:
        row = job_row(db, job_id)
        if row["attempt_count"] == 1 and row["lease_expires_at"] is not None:
            last_expiry.append(row["lease_expires_at"])
        return row["status"] == "succeeded"

    wait_for(done, "the job was recovered and completed", interval=0.01)
    wait_for(lambda: events(db, job_id, "progress_raised"), "the stalled attempt saw its lease lost")
    assert all(w.stop() == 0 for w in workers.started)

    [(_, first_pid, _, stalled_at)] = events(db, job_id, "stalled")
    [(_, lost_pid, _, lost_at)] = events(db, job_id, "lost")
    [(_, second_pid, _, second_started_at)] = [e for e in events(db, job_id, "start") if e[0] == 2]
    assert lost_pid == first_pid
    assert last_expiry, "the lease was observed while the first attempt held it"
    expired_at = last_expiry[-1]
    assert second_started_at >= expired_at, "no second execution before the first lease ran out"
    assert lost_at >= expired_at, "the stalled attempt was not told its lease was lost too early"
    assert stale_events(db, job_id) == [
        {"op": "complete", "token": first_token(db, job_id), "owner": owners[first_pid]}
    ]
    assert attempts(db, job_id) == [
        (1, 1, owners[first_pid], "expired"),
        (2, 2, owners[second_pid], "succeeded"),
    ]

    overlap = max(0.0, (lost_at - second_started_at).total_seconds())
    print(
        f"\nboundary 5: lease {lease:.1f}s; the stalled attempt ran "
        f"{(lost_at - stalled_at).total_seconds():.3f}s unrenewed and saw its lease lost "
        f"{(lost_at - expired_at).total_seconds():.3f}s after expiry; the retry "
        f"({'another' if second_pid != first_pid else 'the same'} worker) started "
        f"{(second_started_at - expired_at).total_seconds():.3f}s after expiry; "
        f"executions overlapped {overlap:.3f}s"
    )


def test_boundary6_exhausted_retries_leave_a_dead_row_with_its_history(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client, lease=5, max_attempts=3, unknown_max_attempts=2)
    retryable = client.enqueue("probe", {"fail": "retryable"}, tenant="t")
    unknown = client.enqueue("probe", {"fail": "unknown"}, tenant="t")
    workers.start({"probe": 2})
    wait_for(lambda: statuses(db) == {"dead": 2}, "both jobs dead")

    for job_id, code, n in (
        (retryable, "fairsched.errors.RetryableError", 3),
        (unknown, "RuntimeError", 2),
    ):
        row = job_row(db, job_id)
        assert (row["status"], row["attempt_count"], row["last_error_code"]) == ("dead", n, code)
        outcomes = [outcome for *_, outcome in attempts(db, job_id)]
        assert outcomes == ["retrying"] * (n - 1) + ["dead"]
        shown = client.job_show(job_id)
        assert shown["status"] == "dead" and len(shown["history"]) == n
    assert {job.id for job in client.dead_list(queue="probe")} == {retryable, unknown}


def test_boundary7_a_locked_job_does_not_stop_the_others(
    client: Client, fresh_db: str, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client, lease=5)
    ids = client.enqueue_many("probe", [JobSpec({}, "t") for _ in range(20)])
    with psycopg.connect(fresh_db) as locker:
        locker.execute("SELECT id FROM fairsched.jobs WHERE id = %s FOR UPDATE", (ids[0],))
        workers.start({"probe": 4})
        wait_for(lambda: statuses(db).get("succeeded") == 19, "the 19 unlocked jobs succeeded")
        row = job_row(db, ids[0])
        assert (row["status"], row["attempt_count"]) == ("pending", 0)
        locker.rollback()
    wait_for(lambda: statuses(db) == {"succeeded": 20}, "the unlocked job succeeded too")


def test_boundary9_terminated_listeners_polling_still_drains(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client, lease=5)
    workers.start({"probe": 2}, settings={"FAIRSCHED_POLL_INTERVAL_SECONDS": "0.3"})
    workers.start({"probe": 2}, settings={"FAIRSCHED_POLL_INTERVAL_SECONDS": "0.3"})
    wait_listening(db, 2)
    old = listener_pids(db)
    killed = db.execute(
        "SELECT count(*) FROM unnest(%s::int[]) p WHERE pg_terminate_backend(p)", (list(old),)
    )
    assert killed.fetchone() == (2,)
    wait_for(lambda: len(listener_pids(db) - old) == 2, "both listeners reconnected")

    # No notification can wake the workers from here on: only their poll finds these jobs.
    declare(client, lease=5, notify=False)
    total = 0
    for batch in range(3):
        client.enqueue_many("probe", [JobSpec({"batch": batch}, "t") for _ in range(10)])
        total += 10
        wait_for(lambda n=total: statuses(db) == {"succeeded": n}, f"batch {batch} drained by polling")
