"""The lease lifecycle through the Client API, against a real PostgreSQL."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql
from psycopg.pq import Format

from fairsched import Client, FailureKind, JobSpec, PermanentError, QueueSettings
from fairsched.db.sql import QUERIES
from fairsched.engine.lease import Lease, lease_row
from fairsched.errors import InvalidInput, JobNotFound, PayloadTooLarge, UnknownQueue


def status_of(db: psycopg.Connection, job_id: int) -> str:
    row = db.execute("SELECT status FROM fairsched.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


def token_of(db: psycopg.Connection, job_id: int) -> int:
    row = db.execute("SELECT lease_token FROM fairsched.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return int(row[0])


def expire(db: psycopg.Connection, job_id: int) -> None:
    """Move a lease's expiry into the past, as time passing would."""
    db.execute(
        "UPDATE fairsched.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
        (job_id,),
    )


def test_claim_leases_with_token_and_attempt(client: Client, db: psycopg.Connection) -> None:
    """A job's token starts at a random number (no one can guess it) and a claim raises it by one."""
    job_id = client.enqueue("q", {"n": 1}, tenant="acme")
    start = token_of(db, job_id)
    [lease] = client.claim("q", owner="w1")
    assert (lease.id, lease.token, lease.attempt, lease.tenant, lease.payload) == (
        job_id,
        start + 1,
        1,
        "acme",
        {"n": 1},
    )
    assert lease.idempotency_key == f"fairsched-job-{job_id}"
    assert client.claim("q", owner="w2") == []
    other = token_of(db, client.enqueue("q", {}, tenant="acme"))
    assert min(start, other) > 2**20 and other != start


def test_payloads_come_back_as_enqueued_through_the_pools_text_json_loader(client: Client) -> None:
    """Pooled connections decode JSON to text before parsing (``db.json_from_text``):
    non-ASCII text, escapes and nesting come back as they went in."""
    payload = {"name": "Zoë Ångström", "emoji": "\U0001f680", "quote": 'a "b" \\ c', "n": [1, 2.5, None]}
    client.enqueue("q", payload, tenant="acme")
    with client.pool.connection() as conn:
        for name in ("json", "jsonb"):
            oid = conn.adapters.types[name].oid
            for fmt in (Format.TEXT, Format.BINARY):
                assert conn.adapters.get_loader(oid, fmt) is not psycopg.adapters.get_loader(oid, fmt)
    [lease] = client.claim("q", owner="w1")
    assert lease.payload == payload


def test_lease_rows_must_list_the_lease_fields_in_order(db: psycopg.Connection) -> None:
    """Claims build leases by position: a statement whose columns differ is refused."""
    with db.cursor(row_factory=lease_row) as cur, pytest.raises(TypeError, match="not Lease's"):
        cur.execute("SELECT 2 AS token, 1 AS id")


def test_fifo_order_priority_then_age(client: Client) -> None:
    low = client.enqueue("q", {}, tenant="t", priority=0)
    high = client.enqueue("q", {}, tenant="t", priority=5)
    low2 = client.enqueue("q", {}, tenant="t", priority=0)
    assert [lease.id for lease in client.claim("q", owner="w", limit=3)] == [high, low, low2]


def test_complete_is_fenced_and_audited(client: Client, db: psycopg.Connection) -> None:
    job_id = client.enqueue("q", {}, tenant="t")
    [lease] = client.claim("q", owner="w1")
    assert client.complete(lease) is True
    assert client.complete(lease) is False
    assert status_of(db, job_id) == "succeeded"
    outcomes = db.execute(
        "SELECT outcome, lease_token, lease_owner FROM fairsched.attempts WHERE job_id = %s", (job_id,)
    ).fetchall()
    assert outcomes == [("succeeded", lease.token, "w1")]
    stale = db.execute(
        "SELECT count(*) FROM fairsched.job_events WHERE job_id = %s AND kind = 'stale_completion_rejected'",
        (job_id,),
    ).fetchone()
    assert stale == (1,)


def completion_wal_records(db: psycopg.Connection, leases: list[Lease]) -> int:
    """WAL records one completion of ``leases`` writes (run, measured, rolled back)."""
    params = {"ids": [x.id for x in leases], "tokens": [x.token for x in leases], "owner": leases[0].owner}
    explain = sql.SQL("EXPLAIN (ANALYZE, WAL, FORMAT JSON) {}").format(sql.SQL(QUERIES["leases_complete"]))
    with db.transaction(force_rollback=True):
        row = db.execute(explain, params).fetchone()
    assert row is not None
    return int(row[0][0]["Plan"]["WAL Records"])


def test_a_completion_locks_no_row_before_updating_it(client: Client, db: psycopg.Connection) -> None:
    """Per job, a completion writes the row's new version, its primary-key entry, its entry
    in the finished-jobs index the retention prune reads (jobs_finished_idx) and, when the
    new version goes to another page, a lock on the old one while it finds room: at most
    four WAL records (3.66 here). A BEFORE ROW trigger on the jobs would add a tuple lock
    for every row updated (4.66 here; see the trigger jobs_succeeded_unchanged)."""
    client.declare_queue("q", QueueSettings(policies=["weighted", "aging", "serial"]))
    client.enqueue_many("q", [JobSpec({}, tenant="acme") for _ in range(60)])
    leases = client.claim("q", owner="w1", limit=60)
    assert len(leases) == 60
    few, many = completion_wal_records(db, leases[:10]), completion_wal_records(db, leases)
    assert (many - few) / 50 < 4.3, f"{few} records for 10 jobs, {many} for 60"


def test_stale_owner_cannot_complete_after_reclaim(client: Client, db: psycopg.Connection) -> None:
    job_id = client.enqueue("q", {}, tenant="t")
    [old] = client.claim("q", owner="w1")
    expire(db, job_id)
    assert client.recover().retried == 1
    [new] = client.claim("q", owner="w2")
    assert new.token == old.token + 1
    assert client.complete(old) is False
    assert client.heartbeat(old, progress=1) is False
    assert client.fail(old, "late") is False
    assert client.release(old) is False
    assert status_of(db, job_id) == "running"
    assert client.complete(new) is True


def test_heartbeat_renews_only_on_progress(client: Client, db: psycopg.Connection) -> None:
    client.enqueue("q", {}, tenant="t")
    [lease] = client.claim("q", owner="w", lease_seconds=5)
    assert client.heartbeat(lease, progress=1)
    first = db.execute("SELECT lease_expires_at FROM fairsched.jobs WHERE id = %s", (lease.id,)).fetchone()
    assert client.heartbeat(lease, progress=1)  # no progress: still held, not renewed
    second = db.execute("SELECT lease_expires_at FROM fairsched.jobs WHERE id = %s", (lease.id,)).fetchone()
    assert first == second
    assert client.heartbeat(lease, progress=2)
    third = db.execute("SELECT lease_expires_at FROM fairsched.jobs WHERE id = %s", (lease.id,)).fetchone()
    assert third is not None and second is not None and third[0] > second[0]


def test_failures_recorded_in_one_statement_each_by_its_own_fence(
    client: Client, db: psycopg.Connection
) -> None:
    client.enqueue_many("q", [JobSpec({}, tenant="t") for _ in range(3)])
    first, second, third = client.claim("q", owner="w", limit=3)
    expire(db, third.id)
    outcomes = client.fail_many([(first, PermanentError("bad")), (second, "flaky"), (third, "late")])
    assert outcomes[first.id].held and outcomes[first.id].status == "dead"
    assert outcomes[second.id].held and outcomes[second.id].status == "pending"
    assert not outcomes[third.id].held
    rows = db.execute("SELECT job_id, outcome, error_code FROM fairsched.attempts ORDER BY job_id").fetchall()
    assert rows == [(first.id, "dead", "fairsched.errors.PermanentError"), (second.id, "retrying", "error")]
    stale = db.execute(
        "SELECT job_id FROM fairsched.job_events WHERE kind = 'stale_completion_rejected'"
    ).fetchall()
    assert stale == [(third.id,)]


def test_heartbeat_without_progress_never_renews(client: Client, db: psycopg.Connection) -> None:
    client.enqueue("q", {}, tenant="t")
    [lease] = client.claim("q", owner="w", lease_seconds=5)
    expiry = "SELECT lease_expires_at, progress FROM fairsched.jobs WHERE id = %s"
    claimed = db.execute(expiry, (lease.id,)).fetchone()
    assert client.heartbeat(lease)  # the first heartbeat, no progress reported: held, not renewed
    assert client.heartbeat(lease, progress=None)
    assert db.execute(expiry, (lease.id,)).fetchone() == claimed
    assert client.heartbeat(lease, progress=1)
    renewed = db.execute(expiry, (lease.id,)).fetchone()
    assert renewed is not None and claimed is not None and renewed[0] > claimed[0]
    assert client.heartbeat(lease)  # no progress after some: the last value stays, no renewal
    assert db.execute(expiry, (lease.id,)).fetchone() == renewed


def test_heartbeat_never_past_max_runtime(fresh_db: str, db: psycopg.Connection) -> None:
    with Client(fresh_db) as client:
        client.declare_queue("short", QueueSettings(lease_seconds=60, max_runtime_seconds=2))
        client.enqueue("short", {}, tenant="t")
        [lease] = client.claim("short", owner="w")
        for step in range(3):
            assert client.heartbeat(lease, progress=step)
        row = db.execute(
            "SELECT lease_expires_at - started_at FROM fairsched.jobs WHERE id = %s", (lease.id,)
        ).fetchone()
        assert row is not None and row[0].total_seconds() <= 2.0


def test_retryable_failure_backs_off_then_dies(fresh_db: str, db: psycopg.Connection) -> None:
    with Client(fresh_db) as client:
        client.declare_queue(
            "r", QueueSettings(max_attempts=2, backoff_base_seconds=60, backoff_max_seconds=120)
        )
        job_id = client.enqueue("r", {}, tenant="t")
        [lease] = client.claim("r", owner="w")
        outcome = client.fail_attempt(lease, TimeoutError("slow"))
        assert outcome.held and outcome.status == "pending"
        row = db.execute(
            "SELECT available_at - now() FROM fairsched.jobs WHERE id = %s", (job_id,)
        ).fetchone()
        assert row is not None and row[0].total_seconds() <= 60
        db.execute("UPDATE fairsched.jobs SET available_at = now() WHERE id = %s", (job_id,))
        [lease] = client.claim("r", owner="w")
        assert lease.attempt == 2
        assert client.fail_attempt(lease, TimeoutError("slow")).status == "dead"
        [dead] = client.dead_list()
        assert dead.id == job_id and dead.last_error_code == "TimeoutError"


def test_permanent_failure_is_dead_at_once(client: Client, db: psycopg.Connection) -> None:
    job_id = client.enqueue("q", {}, tenant="t")
    [lease] = client.claim("q", owner="w")
    assert client.fail(lease, PermanentError("bad payload")) is True
    assert status_of(db, job_id) == "dead"


def test_unknown_failures_get_a_small_budget(fresh_db: str, db: psycopg.Connection) -> None:
    with Client(fresh_db) as client:
        client.declare_queue(
            "u",
            QueueSettings(
                max_attempts=10, unknown_max_attempts=2, backoff_base_seconds=0, backoff_max_seconds=0
            ),
        )
        job_id = client.enqueue("u", {}, tenant="t")
        for expected in ("pending", "dead"):
            [lease] = client.claim("u", owner="w")
            assert client.fail_attempt(lease, KeyError("x")).status == expected
        assert status_of(db, job_id) == "dead"


def test_dead_replay_keeps_id_and_history(client: Client, db: psycopg.Connection) -> None:
    job_id = client.enqueue("q", {}, tenant="t")
    [lease] = client.claim("q", owner="w")
    client.fail(lease, "broken", kind=FailureKind.PERMANENT)
    client.dead_replay(job_id)
    [again] = client.claim("q", owner="w")
    assert again.id == job_id and again.attempt == 1 and again.token == lease.token + 1
    client.complete(again)
    kinds = [h["kind"] for h in client.job_show(job_id)["history"]]
    assert kinds == ["attempt", "replayed", "attempt"]
    with pytest.raises(JobNotFound):
        client.dead_replay(job_id)


def test_dead_discard_resolves_but_keeps_the_row(client: Client, db: psycopg.Connection) -> None:
    job_id = client.enqueue("q", {}, tenant="t")
    [lease] = client.claim("q", owner="w")
    client.fail(lease, "broken", kind="permanent")
    client.dead_discard(job_id)
    assert status_of(db, job_id) == "discarded"
    assert client.dead_list() == []


def test_release_returns_job_without_spending_an_attempt(client: Client) -> None:
    job_id = client.enqueue("q", {}, tenant="t")
    [lease] = client.claim("q", owner="w")
    assert client.release(lease)
    [again] = client.claim("q", owner="w")
    assert again.id == job_id and again.attempt == 1


def test_recovery_moves_exhausted_leases_to_dead(client: Client, db: psycopg.Connection) -> None:
    job_id = client.enqueue("q", {}, tenant="t", max_attempts=1)
    client.claim("q", owner="w")
    expire(db, job_id)
    result = client.recover()
    assert (result.retried, result.dead) == (0, 1)
    assert status_of(db, job_id) == "dead"


def test_idempotency_key_returns_existing_job(client: Client, db: psycopg.Connection) -> None:
    first = client.enqueue("q", {"a": 1}, tenant="t", idempotency_key="order-7")
    assert client.enqueue("q", {"a": 2}, tenant="t", idempotency_key="order-7") == first
    other_tenant = client.enqueue("q", {}, tenant="u", idempotency_key="order-7")
    assert other_tenant != first
    ids = client.enqueue_many(
        "q",
        [
            JobSpec({}, "t", idempotency_key="order-7"),
            JobSpec({}, "t", idempotency_key="new"),
            JobSpec({}, "t", idempotency_key="new"),
        ],
    )
    assert ids[0] == first and ids[1] == ids[2] != first
    [lease] = client.claim("q", owner="w")
    assert lease.idempotency_key == "order-7"
    assert db.execute("SELECT count(*) FROM fairsched.jobs").fetchone() == (3,)


def test_enqueue_joins_the_callers_transaction(client: Client, fresh_db: str, db: psycopg.Connection) -> None:
    with psycopg.connect(fresh_db) as conn:
        job_id = client.enqueue("q", {}, tenant="t", conn=conn)
        conn.rollback()
    assert db.execute("SELECT count(*) FROM fairsched.jobs WHERE id = %s", (job_id,)).fetchone() == (0,)
    with psycopg.connect(fresh_db) as conn:
        job_id = client.enqueue("q", {}, tenant="t", conn=conn)
        conn.commit()
    assert status_of(db, job_id) == "pending"


def test_enqueue_many_is_ordered(client: Client) -> None:
    ids = client.enqueue_many("q", [JobSpec({"n": n}, f"t{n % 4}") for n in range(200)])
    assert len(ids) == 200 and ids == sorted(ids)
    leases = client.claim("q", owner="w", limit=200)
    assert {lease.id: lease.payload["n"] for lease in leases} == {i: n for n, i in enumerate(ids)}


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"queue": "nope"}, UnknownQueue),
        ({"queue": "bad name; drop"}, InvalidInput),
        ({"tenant": ""}, InvalidInput),
        ({"tenant": "x" * 500}, InvalidInput),
        ({"tenant": "a\x00b"}, InvalidInput),
        ({"payload": {"x": float("nan")}}, InvalidInput),
        ({"payload": object()}, InvalidInput),
        ({"payload": "x" * 5000}, PayloadTooLarge),
        ({"priority": 2**40}, InvalidInput),
        ({"aggregate_key": "a"}, InvalidInput),
        ({"max_attempts": 0}, InvalidInput),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    client: Client, db: psycopg.Connection, kwargs: dict[str, object], error: type[Exception]
) -> None:
    args: dict[str, object] = {"queue": "q", "payload": {}, "tenant": "t", **kwargs}
    queue, payload = args.pop("queue"), args.pop("payload")
    with pytest.raises(error):
        client.enqueue(queue, payload, **args)  # type: ignore[arg-type]
    assert db.execute("SELECT count(*) FROM fairsched.jobs").fetchone() == (0,)
