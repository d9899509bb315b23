"""The testing helpers for users (``fairsched.testing``) against a real PostgreSQL: run_job's
outcomes as a worker records them, assert_enqueued inside a transaction, drain, and the
pytest plugin's per-test databases (its subprocess runs are in ``tests/testing``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest

from fairsched import (
    App,
    Client,
    Job,
    JobSpec,
    LeaseLost,
    PermanentError,
    QueueSettings,
    RetryableError,
    Settings,
)
from fairsched.logs import job_in_scope
from fairsched.testing import RunError, RunStatus, assert_enqueued, drain, refute_enqueued, run_job

WAIT_SECONDS = 10.0
"""Longest a handler waits for its lease to be lost before the test gives up."""


def job_row(db: psycopg.Connection, job_id: int) -> dict[str, Any]:
    cur = db.execute(
        "SELECT status, attempt_count, lease_owner, last_error_code FROM fairsched.jobs WHERE id = %s",
        (job_id,),
    )
    row = cur.fetchone()
    assert row is not None and cur.description is not None
    return dict(zip([c.name for c in cur.description], row, strict=True))


def wait_lost(job: Job) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not job.lost and time.monotonic() < deadline:
        time.sleep(0.01)
    assert job.lost


def one_handler(fn: Any) -> App:
    """An app whose queue ``q`` runs ``fn``."""
    app = App()
    app.handler("q")(fn)
    return app


# -- run_job ---------------------------------------------------------------


def test_a_job_that_succeeds_is_recorded_with_its_progress(client: Client, db: psycopg.Connection) -> None:
    seen: list[Job] = []

    def handle(job: Job) -> None:
        seen.append(job)
        job.progress("fetched")
        job.progress()

    outcome = run_job(one_handler(handle), "q", {"n": 1}, tenant="acme", client=client)
    assert outcome.status == RunStatus.SUCCEEDED
    assert outcome.progress == ("fetched", 2)
    assert (outcome.error, outcome.error_kind, outcome.error_code) == (None, None, None)
    [job] = seen
    assert outcome.job is job and isinstance(job, Job)
    assert (job.payload, job.tenant, job.attempt, job.queue) == ({"n": 1}, "acme", 1, "q")
    assert job_row(db, outcome.job_id)["status"] == "succeeded"


def test_a_retryable_failure_is_scheduled_for_retry(client: Client, db: psycopg.Connection) -> None:
    def handle(job: Job) -> None:
        raise RetryableError("downstream timed out")

    outcome = run_job(one_handler(handle), "q", {}, tenant="acme", client=client)
    assert outcome.status == RunStatus.RETRY_SCHEDULED
    assert (outcome.error_kind, outcome.error_code) == ("retryable", "fairsched.errors.RetryableError")
    assert isinstance(outcome.error, RetryableError) and outcome.retry_at is not None
    row = job_row(db, outcome.job_id)
    assert (row["status"], row["last_error_code"]) == ("pending", outcome.error_code)


def test_a_retryable_failure_of_the_last_attempt_is_dead(client: Client) -> None:
    def handle(job: Job) -> None:
        raise TimeoutError("no answer")

    outcome = run_job(one_handler(handle), "q", {}, tenant="acme", client=client, max_attempts=1)
    assert (outcome.status, outcome.error_kind, outcome.error_code) == ("dead", "retryable", "TimeoutError")


def test_a_permanent_failure_is_dead_at_once(client: Client, db: psycopg.Connection) -> None:
    def handle(job: Job) -> None:
        raise PermanentError("unsupported payload version")

    outcome = run_job(one_handler(handle), "q", {"v": 9}, tenant="acme", client=client)
    assert (outcome.status, outcome.error_kind) == (RunStatus.DEAD, "permanent")
    assert outcome.retry_at is None
    assert job_row(db, outcome.job_id)["status"] == "dead"


def test_an_unknown_error_gets_the_small_budget(client: Client, db: psycopg.Connection) -> None:
    app = one_handler(lambda job: 1 / 0)
    first = run_job(app, "q", {}, tenant="acme", client=client)
    assert (first.status, first.error_kind) == ("retry_scheduled", "unknown")
    assert first.error_code == "ZeroDivisionError"
    # The queue allows 3 attempts and no backoff: drain runs the other two, the last one dead.
    rest = drain(client, app, "q")
    assert [(o.job.attempt, o.status) for o in rest] == [(2, "retry_scheduled"), (3, "dead")]
    assert job_row(db, first.job_id)["attempt_count"] == 3


def test_progress_keeps_the_lease_past_its_length(client: Client) -> None:
    def handle(job: Job) -> None:
        for step in range(15):
            time.sleep(0.1)
            job.progress(step)

    outcome = run_job(one_handler(handle), "q", {}, tenant="acme", client=client, lease_seconds=1.0)
    assert outcome.status == RunStatus.SUCCEEDED
    assert outcome.progress == tuple(range(15))


def test_a_stalled_handler_loses_its_lease_unrecorded(client: Client, db: psycopg.Connection) -> None:
    raised: list[BaseException] = []

    def handle(job: Job) -> None:
        wait_lost(job)  # no progress: the lease runs out
        try:
            job.progress("too late")
        except LeaseLost as e:
            raised.append(e)

    outcome = run_job(one_handler(handle), "q", {}, tenant="acme", client=client, lease_seconds=0.5)
    assert outcome.status == RunStatus.LEASE_LOST
    assert len(raised) == 1 and outcome.progress == ()
    assert job_row(db, outcome.job_id)["status"] == "running"  # left to recovery, as a worker leaves it


def test_a_lease_taken_over_is_signalled_to_the_handler(client: Client, db: psycopg.Connection) -> None:
    def handle(job: Job) -> None:
        db.execute(
            "UPDATE fairsched.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
            (job.id,),
        )
        assert client.recover().retried == 1
        [taken] = client.claim("q", owner="other-worker")
        assert taken.id == job.id
        job.progress("still here")  # its heartbeat is refused: the lease is someone else's
        wait_lost(job)

    outcome = run_job(one_handler(handle), "q", {}, tenant="acme", client=client, lease_seconds=0.6)
    assert outcome.status == RunStatus.LEASE_LOST
    row = job_row(db, outcome.job_id)
    assert (row["status"], row["lease_owner"], row["attempt_count"]) == ("running", "other-worker", 2)


def test_a_handler_that_raises_after_losing_its_lease_is_not_recorded(client: Client) -> None:
    def handle(job: Job) -> None:
        wait_lost(job)
        job.progress()  # raises LeaseLost

    outcome = run_job(one_handler(handle), "q", {}, tenant="acme", client=client, lease_seconds=0.3)
    assert outcome.status == RunStatus.LEASE_LOST
    assert isinstance(outcome.error, LeaseLost) and outcome.error_code == "fairsched.errors.LeaseLost"


def test_an_async_handler_runs_on_an_event_loop(client: Client) -> None:
    async def handle(job: Job) -> None:
        await asyncio.sleep(0)
        job.progress("awaited")

    outcome = run_job(one_handler(handle), "q", {}, tenant="acme", client=client)
    assert (outcome.status, outcome.progress) == (RunStatus.SUCCEEDED, ("awaited",))


def test_what_a_handler_logs_is_about_its_job_sync_and_async(client: Client) -> None:
    seen: list[object] = []

    def handle(job: Job) -> None:
        seen.append(job_in_scope() == job.lease)

    async def ahandle(job: Job) -> None:
        seen.append(job_in_scope() == job.lease)

    run_job(one_handler(handle), "q", {}, tenant="acme", client=client)
    run_job(one_handler(ahandle), "q", {}, tenant="acme", client=client)
    assert seen == [True, True]
    assert job_in_scope() is None


def test_a_base_exception_is_recorded_then_raised(client: Client, db: psycopg.Connection) -> None:
    def handle(job: Job) -> None:
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        run_job(one_handler(handle), "q", {}, tenant="acme", client=client)
    [(status, code)] = db.execute("SELECT status, last_error_code FROM fairsched.jobs").fetchall()
    assert (status, code) == ("pending", "SystemExit")


def test_run_job_takes_a_dsn(fresh_db: str) -> None:
    with Client(fresh_db) as setup:
        setup.declare_queue("q")
    outcome = run_job(one_handler(lambda job: None), "q", {}, tenant="acme", client=fresh_db)
    assert outcome.status == RunStatus.SUCCEEDED


def test_run_job_refuses_a_queue_with_other_pending_jobs(client: Client) -> None:
    client.enqueue("q", {}, tenant="acme")
    with pytest.raises(RunError, match=r"already has 1 claimable jobs.*drain"):
        run_job(one_handler(lambda job: None), "q", {}, tenant="acme", client=client)


def test_run_job_runs_beside_a_retry_due_later(client: Client) -> None:
    client.declare_queue("slow", QueueSettings(backoff_base_seconds=600, backoff_max_seconds=600))
    app = App()

    @app.handler("slow")
    def handle(job: Job) -> None:
        if job.payload.get("fail"):
            raise RetryableError("later")

    first = run_job(app, "slow", {"fail": True}, tenant="acme", client=client)
    assert first.status == RunStatus.RETRY_SCHEDULED
    assert run_job(app, "slow", {}, tenant="acme", client=client).status == RunStatus.SUCCEEDED
    assert drain(client, app) == []  # the retry is not due


def test_run_job_says_why_its_job_was_not_claimable(client: Client) -> None:
    app = one_handler(lambda job: None)
    run_job(app, "q", {}, tenant="acme", client=client, idempotency_key="k")
    with pytest.raises(RunError, match="not claimable: it is succeeded already"):
        run_job(app, "q", {}, tenant="acme", client=client, idempotency_key="k")


# -- assert_enqueued -------------------------------------------------------


def test_assert_enqueued_sees_an_uncommitted_enqueue(client: Client, fresh_db: str) -> None:
    with psycopg.connect(fresh_db) as conn:
        with conn.transaction(force_rollback=True):
            job_id = client.enqueue("q", {"to": "ann", "n": 1}, tenant="acme", conn=conn)
            [job] = assert_enqueued(conn=conn, queue="q", tenant="acme", payload={"to": "ann", "n": 1})
            assert (job.id, job.status, job.payload) == (job_id, "pending", {"to": "ann", "n": 1})
            assert_enqueued(conn=conn, payload_contains={"to": "ann"}, count=1)
            refute_enqueued(conn=client, queue="q")  # committed: nothing yet
        refute_enqueued(conn=conn)  # rolled back


def test_assert_enqueued_lists_what_was_enqueued_instead(client: Client) -> None:
    client.enqueue("q", {"to": "ann"}, tenant="acme")
    client.enqueue("q", {"blob": "x" * 3000}, tenant="bolt")
    with pytest.raises(AssertionError) as failed:
        assert_enqueued(conn=client, queue="q", tenant="acme", payload={"to": "bob"})
    message = str(failed.value)
    wanted = """queue='q', tenant='acme', payload={"to": "bob"}"""
    assert message.startswith(f"expected a job enqueued with {wanted}; none matches;")
    assert "enqueued instead (2, newest first)" in message
    assert 'tenant=\'bolt\' pending payload={"blob": "xxx' in message and "x" * 200 not in message
    assert 'tenant=\'acme\' pending payload={"to": "ann"}' in message


def test_assert_enqueued_on_an_empty_table_says_so(client: Client) -> None:
    with pytest.raises(AssertionError, match="no job is enqueued at all"):
        assert_enqueued(conn=client, queue="q")


def test_assert_enqueued_counts(client: Client) -> None:
    client.enqueue_many("q", [JobSpec({"n": n}, "acme") for n in range(25)])
    assert len(assert_enqueued(conn=client, tenant="acme", count=25)) == 25
    with pytest.raises(AssertionError, match=r"expected 2 jobs enqueued with tenant='acme'; found 25:") as e:
        assert_enqueued(conn=client, tenant="acme", count=2)
    assert "… and 5 more" in str(e.value)
    with pytest.raises(AssertionError, match=r"expected no job enqueued with payload=\{\"n\": 3\}; found 1:"):
        refute_enqueued(conn=client, payload={"n": 3})


# -- drain -----------------------------------------------------------------


def test_drain_runs_a_backlog_to_the_end(client: Client, db: psycopg.Connection) -> None:
    ran: list[tuple[str, int]] = []

    def handle(job: Job) -> None:
        ran.append((job.tenant, job.payload["n"]))
        if job.payload["n"] == 2:
            raise PermanentError("bad")

    for tenant in ("acme", "bolt", "cato"):
        client.enqueue_many("q", [JobSpec({"n": n}, tenant) for n in range(4)])
    outcomes = drain(client, one_handler(handle), "q")
    assert len(outcomes) == len(ran) == 12
    assert sorted(ran) == sorted((t, n) for t in ("acme", "bolt", "cato") for n in range(4))
    assert [o.status for o in outcomes].count(RunStatus.DEAD) == 3
    left = db.execute("SELECT count(*) FROM fairsched.jobs WHERE status IN ('pending', 'running')")
    assert left.fetchone() == (0,)
    assert drain(client, one_handler(handle), "q") == []


def test_drain_stops_at_its_limit(client: Client, db: psycopg.Connection) -> None:
    client.enqueue_many("q", [JobSpec({}, "acme") for _ in range(8)])
    with pytest.raises(RunError, match="drain ran 5 attempts and 'q' still has claimable jobs"):
        drain(client, one_handler(lambda job: None), max_runs=5)
    counts = dict(db.execute("SELECT status, count(*) FROM fairsched.jobs GROUP BY status").fetchall())
    assert counts == {"succeeded": 5, "pending": 3}  # the sixth claim was released


# -- the pytest plugin's fixtures, in this session -------------------------


@pytest.fixture
def fairsched_settings() -> Settings:
    return Settings(queues={"jobs": QueueSettings()})


@pytest.mark.parametrize("jobs", [1, 3])
def test_each_test_has_a_database_of_its_own(
    fairsched_client: Client, fairsched_conn: psycopg.Connection, jobs: int
) -> None:
    fairsched_client.enqueue_many("jobs", [JobSpec({}, "acme") for _ in range(jobs)])
    assert len(assert_enqueued(conn=fairsched_conn, queue="jobs")) == jobs
    assert fairsched_conn.info.dbname.startswith("fairsched_pt_")
    assert not fairsched_conn.autocommit
