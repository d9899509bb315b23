"""Cancellation through the API: queued jobs at once, running ones by request and the
fenced paths that end them, serial successors, a tenant's jobs, finished jobs refused,
bad input refused, and the race with a completion decided by the fence."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from policies_support import declare

from fairsched import Client
from fairsched.engine.cancel import CancelOutcome
from fairsched.engine.enqueue import JobSpec
from fairsched.engine.lease import FailureKind, Lease
from fairsched.errors import InvalidInput, JobCancelled, JobFinished, JobNotFound


def _status(db: psycopg.Connection, job_id: int) -> str:
    row = db.execute("SELECT status FROM fairsched.jobs WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    return str(row[0])


def _events(db: psycopg.Connection, job_id: int) -> list[tuple[str, Any]]:
    rows = db.execute(
        "SELECT kind, detail FROM fairsched.job_events WHERE job_id = %s ORDER BY id", [job_id]
    ).fetchall()
    return [(kind, detail) for kind, detail in rows]


def _outcomes(db: psycopg.Connection, job_id: int) -> list[str]:
    rows = db.execute(
        "SELECT outcome FROM fairsched.attempts WHERE job_id = %s ORDER BY lease_token", [job_id]
    ).fetchall()
    return [row[0] for row in rows]


def test_a_pending_job_is_cancelled_at_once_and_never_runs(client: Client, db: psycopg.Connection) -> None:
    declare(client, "q", ["fifo"])
    job_id = client.enqueue("q", {"n": 1}, tenant="t")
    other = client.enqueue("q", {"n": 2}, tenant="t")
    assert client.cancel(job_id, by="ops:ana") == CancelOutcome.CANCELLED
    assert _status(db, job_id) == "cancelled"
    assert _events(db, job_id) == [("cancelled", {"by": "ops:ana"})]
    finished = db.execute("SELECT finished_at FROM fairsched.jobs WHERE id = %s", [job_id]).fetchone()
    assert finished is not None and finished[0] is not None
    assert [lease.id for lease in client.claim("q", owner="w", limit=10)] == [other]


def test_cancelling_a_finished_or_unknown_job_is_refused_and_changes_nothing(
    client: Client, db: psycopg.Connection
) -> None:
    declare(client, "q", ["fifo"])
    done = client.enqueue("q", {}, tenant="t")
    (lease,) = client.claim("q", owner="w", limit=1)
    assert client.complete(lease)
    with pytest.raises(JobFinished, match=rf"job {done} already finished \(succeeded\)"):
        client.cancel(done)
    assert _status(db, done) == "succeeded" and _events(db, done) == []
    cancelled = client.enqueue("q", {}, tenant="t")
    client.cancel(cancelled)
    with pytest.raises(JobFinished, match=r"already finished \(cancelled\)"):
        client.cancel(cancelled)
    with pytest.raises(JobNotFound, match="no job with id 999999"):
        client.cancel(999_999)


@pytest.mark.parametrize(
    "bad",
    [[], [0], [-3], [True], [2**63], ["1"], [1.0], list(range(1, 10_002))],
    ids=["none", "zero", "negative", "bool", "too-big", "text", "float", "too-many"],
)
def test_bad_ids_are_refused_with_one_clear_error(client: Client, db: psycopg.Connection, bad: Any) -> None:
    declare(client, "q", ["fifo"])
    job_id = client.enqueue("q", {}, tenant="t")
    with pytest.raises(InvalidInput, match="job id"):
        client.cancel_many(bad)
    assert _status(db, job_id) == "pending"


def test_cancel_many_needs_ids_or_a_queue_and_tenant(client: Client, db: psycopg.Connection) -> None:
    declare(client, "q", ["fifo"])
    job_id = client.enqueue("q", {}, tenant="t")
    with pytest.raises(InvalidInput, match="not both"):
        client.cancel_many([job_id], queue="q", tenant="t")
    with pytest.raises(InvalidInput, match="needs ids, or both queue and tenant"):
        client.cancel_many(queue="q")
    with pytest.raises(InvalidInput, match="by must be a non-empty string"):
        client.cancel(job_id, by="")
    with pytest.raises(InvalidInput, match="invalid queue name"):
        client.cancel_many(queue="bad name", tenant="t")
    assert _status(db, job_id) == "pending"


def test_a_running_job_gets_a_request_and_a_failure_ends_it_cancelled(
    client: Client, db: psycopg.Connection
) -> None:
    declare(client, "q", ["fifo"], max_attempts=5)
    job_id = client.enqueue("q", {}, tenant="t")
    (lease,) = client.claim("q", owner="w", limit=1)
    assert client.cancel_requested([lease]) == set()
    assert client.cancel(job_id, by="api") == CancelOutcome.REQUESTED
    assert client.cancel(job_id, by="again") == CancelOutcome.REQUESTED  # a second request: no change
    assert _status(db, job_id) == "running"
    assert client.cancel_requested([lease]) == {job_id}
    # the handler stopped (JobCancelled is an unknown kind: it would be retried without the request)
    outcome = client.fail_attempt(lease, JobCancelled("stop"))
    assert outcome.held and outcome.status == "cancelled"
    assert _status(db, job_id) == "cancelled"
    assert _outcomes(db, job_id) == ["cancelled"]
    assert [kind for kind, _ in _events(db, job_id)] == ["cancel_requested"]
    assert client.claim("q", owner="w", limit=1) == []


def test_a_requested_job_released_or_expired_ends_cancelled_not_pending(
    client: Client, db: psycopg.Connection
) -> None:
    declare(client, "q", ["fifo"], max_attempts=5)
    released, expired = client.enqueue_many("q", [JobSpec({}, "t"), JobSpec({}, "t")])
    leases = {lease.id: lease for lease in client.claim("q", owner="w", limit=2)}
    client.cancel_many([released, expired])
    assert client.release(leases[released])
    assert _status(db, released) == "cancelled"
    db.execute("UPDATE fairsched.jobs SET lease_expires_at = now() - interval '1 s' WHERE id = %s", [expired])
    result = client.recover()
    assert result.cancelled == 1 and result.retried == 0
    assert _status(db, expired) == "cancelled"
    assert client.claim("q", owner="w", limit=5) == []


def test_a_completion_before_the_worker_stops_stands(client: Client, db: psycopg.Connection) -> None:
    declare(client, "q", ["fifo"])
    job_id = client.enqueue("q", {}, tenant="t")
    (lease,) = client.claim("q", owner="w", limit=1)
    client.cancel(job_id)
    assert client.complete(lease)
    assert _status(db, job_id) == "succeeded"
    assert not client.fail(lease, JobCancelled("too late"), kind=FailureKind.PERMANENT)
    assert _status(db, job_id) == "succeeded"


def _race(client: Client, job_id: int, lease: Lease) -> dict[str, Any]:
    """One thread completes ``lease``; another cancels the job and, told it runs, stops
    it the way a worker does (a failure on the same lease). What each got."""
    results: dict[str, Any] = {}
    start = threading.Barrier(2)

    def complete() -> None:
        start.wait()
        results["completed"] = client.complete(lease)

    def cancel() -> None:
        start.wait()
        try:
            results["cancel"] = client.cancel(job_id)
        except JobFinished:
            results["stopped"] = False
            return
        results["stopped"] = client.fail(lease, JobCancelled("stop"))

    threads = [threading.Thread(target=complete), threading.Thread(target=cancel)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_cancel_racing_completion_has_exactly_one_outcome(client: Client, db: psycopg.Connection) -> None:
    """The fence lets exactly one of the two transitions through, and the row says which."""
    declare(client, "q", ["fifo"], max_attempts=5)
    for _ in range(40):
        job_id = client.enqueue("q", {}, tenant="t")
        (lease,) = client.claim("q", owner="w", limit=1)
        results = _race(client, job_id, lease)
        assert results["completed"] != results["stopped"], results
        assert results.get("cancel", CancelOutcome.REQUESTED) == CancelOutcome.REQUESTED
        winner = "succeeded" if results["completed"] else "cancelled"
        assert _status(db, job_id) == winner
        assert _outcomes(db, job_id) == [winner]


@pytest.mark.parametrize("gap", ["strict", "lowest"])
def test_serial_successors_run_past_a_cancelled_job(client: Client, db: psycopg.Connection, gap: str) -> None:
    declare(client, "s", ["serial"], serial_gap=gap)
    ids = client.enqueue_many(
        "s", [JobSpec({}, "t", aggregate_key="k", aggregate_seq=seq) for seq in (1, 2, 3, 4)]
    )
    assert client.cancel(ids[1]) == CancelOutcome.CANCELLED  # waiting seq 2
    assert client.cancel(ids[0]) == CancelOutcome.CANCELLED  # the pending head: seq 3 may run
    order = []
    while leases := client.claim("s", owner="w", limit=5):
        assert len(leases) == 1
        order.append(leases[0].aggregate_seq)
        assert client.complete(leases[0])
    assert order == [3, 4]
    gap_since = db.execute("SELECT gap_since FROM fairsched.aggregates WHERE aggregate_key = 'k'").fetchone()
    assert gap_since == (None,)


def test_strict_still_waits_for_a_missing_number_before_a_cancelled_one(
    client: Client, db: psycopg.Connection
) -> None:
    declare(client, "s", ["serial"], serial_gap="strict")
    ids = client.enqueue_many("s", [JobSpec({}, "t", aggregate_key="k", aggregate_seq=s) for s in (1, 3, 4)])
    client.cancel(ids[1])  # seq 3; seq 2 never came
    (lease,) = client.claim("s", owner="w", limit=5)
    assert lease.aggregate_seq == 1 and client.complete(lease)
    assert client.claim("s", owner="w", limit=5) == []  # waits for 2
    client.enqueue("s", {}, tenant="t", aggregate_key="k", aggregate_seq=2)
    order = []
    while leases := client.claim("s", owner="w", limit=5):
        order.append(leases[0].aggregate_seq)
        assert client.complete(leases[0])
    assert order == [2, 4]


def test_cancelling_a_tenant_changes_its_unfinished_jobs_only(client: Client, db: psycopg.Connection) -> None:
    declare(client, "s", ["serial"])
    mine = client.enqueue_many(
        "s", [JobSpec({}, "a", aggregate_key="k", aggregate_seq=s) for s in (1, 2, 3)] + [JobSpec({}, "a")]
    )
    theirs = client.enqueue_many("s", [JobSpec({}, "b"), JobSpec({}, "b")])
    leases = client.claim("s", owner="w", limit=10)
    running_mine = [lease.id for lease in leases if lease.tenant == "a"]
    assert sorted(running_mine) == [mine[0], mine[3]]
    result = client.cancel_many(queue="s", tenant="a", by="cli")
    assert sorted(result.cancelled) == [mine[1], mine[2]]
    assert sorted(result.requested) == sorted(running_mine)
    assert {_status(db, job_id) for job_id in mine[1:3]} == {"cancelled"}
    assert {_status(db, job_id) for job_id in theirs} == {"running"}
    again = client.cancel_many(queue="s", tenant="a", by="cli")
    assert again.cancelled == [] and again.requested == []
