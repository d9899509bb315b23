"""weighted: proportional shares, work conservation, no banked credit, caps, runtime
charging and live weight changes, with concurrent claimers on a real PostgreSQL."""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from fairsched_policies.weighted import TENANT_ORDER
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policies_support import claim_concurrently, declare, fill, shares
from psycopg import pq, sql

from fairsched import Client, JobSpec
from fairsched.engine.lease import Failure, FailureKind, Lease, leases_complete, leases_fail
from fairsched.errors import InvalidInput
from fairsched.policy.registry import TenantShare, tenant_share_set, tenant_shares_list

DRY = (TENANT_ORDER.dry_lock, TENANT_ORDER.dry_deactivate)
"""The dry-tenant statements, composed with a stack's filters."""


def test_shares_follow_weights_1_2_5_over_10k_claims(client: Client) -> None:
    declare(client, "w", ["weighted"], tenants={"a": {"weight": 1}, "b": {"weight": 2}, "c": {"weight": 5}})
    for tenant in "abc":
        fill(client, "w", tenant, 7000)
    leases = claim_concurrently(client, "w", claims=10_000, workers=4, batch=10)
    assert len(leases) == 10_000
    observed = shares(leases)
    for tenant, entitled in {"a": 12.5, "b": 25.0, "c": 62.5}.items():
        assert abs(observed[tenant] - entitled) <= 2.0, observed


def stride_quota(tenants: dict[str, tuple[float, float, float, int]], limit: int) -> Counter[str]:
    """The model of a batch claim: tenants as ``name: (pass, weight, cost, room)``; of the
    ``limit`` lowest-pass tenants, the ``limit`` smallest virtual finish tags
    ``pass + k * cost / weight`` (k from 1 to room), ties by tenant."""
    chosen = sorted(tenants, key=lambda name: (tenants[name][0], name))[:limit]
    tags = sorted(
        (tenants[name][0] + k * tenants[name][2] / tenants[name][1], name)
        for name in chosen
        for k in range(1, tenants[name][3] + 1)
    )
    return Counter(name for _, name in tags[:limit])


_queues = itertools.count()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    limit=st.integers(2, 40),
    runtime=st.booleans(),
    tenants=st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.25, 10.0, 40.0]),
            st.sampled_from([0.5, 1.0, 2.0, 3.0, 5.0, 100.0]),
            st.sampled_from([0.05, 0.3, 1.0, 2.5]),
            st.one_of(st.none(), st.integers(1, 45)),
        ),
        min_size=1,
        max_size=7,
    ),
)
def test_a_batch_claim_splits_by_stride_water_filling(
    client: Client,
    db: psycopg.Connection,
    limit: int,
    runtime: bool,
    tenants: list[tuple[float, float, float, int | None]],
) -> None:
    """A claim of ``limit`` gives each tenant what the stride model does, whatever the
    passes, weights, runtime estimates and caps (the claim bounds the tags it sorts)."""
    queue = f"w{next(_queues)}"
    declare(client, queue, ["weighted"], charge="runtime" if runtime else "count")
    for n, (_, weight, _, cap) in enumerate(tenants):
        fill(client, queue, f"t{n}", limit)
        client.set_tenant_share(queue, f"t{n}", weight=weight, cap=cap or 0)
    for n, (pass_, _, estimate, _) in enumerate(tenants):
        db.execute(
            "UPDATE fairsched.tenant_shares SET pass = %s, runtime_estimate = %s"
            " WHERE queue_name = %s AND tenant = %s",
            (pass_, estimate, queue, f"t{n}"),
        )
    model = stride_quota(
        {
            f"t{n}": (pass_, weight, estimate if runtime else 1.0, min(limit, cap or limit))
            for n, (pass_, weight, estimate, cap) in enumerate(tenants)
        },
        limit,
    )
    leases = client.claim(queue, owner="o", limit=limit)
    assert Counter(lease.tenant for lease in leases) == model


def test_a_lone_tenant_gets_every_claim(client: Client) -> None:
    declare(client, "w", ["weighted"], tenants={"small": {"weight": 1}, "big": {"weight": 100}})
    fill(client, "w", "small", 300)
    leases = claim_concurrently(client, "w", claims=1000, workers=4, batch=7)
    assert len(leases) == 300 and {lease.tenant for lease in leases} == {"small"}


def test_a_returning_idle_tenant_banks_no_credit(client: Client) -> None:
    declare(client, "w", ["weighted"])
    fill(client, "w", "busy", 3000)
    claim_concurrently(client, "w", claims=2000, workers=2, batch=10)
    fill(client, "w", "back", 1000)
    leases = claim_concurrently(client, "w", claims=400, workers=2, batch=10)
    observed = shares(leases)
    assert abs(observed["back"] - 50.0) <= 5.0, observed


@pytest.mark.parametrize(("limit", "expected"), [(1, {"z": 1}), (3, {"z": 2, "a": 1})])
def test_a_tie_at_the_same_pass_goes_to_the_tenant_claimed_least(
    client: Client, limit: int, expected: dict[str, int]
) -> None:
    """A tenant coming back rejoins at the lowest active pass, level with the tenant that
    kept the queue busy: the tie goes to the one claimed least so far, not by name (by
    name "a" would win every such tie: one job of "z" in a claim of three, none in one)."""
    declare(client, "w", ["weighted"])
    fill(client, "w", "a", 100)
    assert len(client.claim("w", owner="t", limit=10)) == 10
    fill(client, "w", "z", 2)
    claimed = Counter(lease.tenant for lease in client.claim("w", owner="t", limit=limit))
    assert claimed == expected


def test_a_weighted_enqueue_is_one_round_trip_that_activates_its_tenants(
    client: Client, fresh_db: str, tmp_path: Path
) -> None:
    """The jobs and their tenants' activation go in one statement, committed together:
    one message batch to the server (libpq's trace), where it was five (BEGIN, insert,
    lock, activate, COMMIT)."""
    declare(client, "w", ["weighted"])
    fill(client, "w", "old", 3)
    trace = tmp_path / "libpq.trace"
    with psycopg.connect(fresh_db, autocommit=True) as conn, trace.open("w") as out:
        client.enqueue_many("w", [JobSpec({}, "old")], conn=conn)  # the queue's stack is read
        conn.pgconn.trace(out.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        client.enqueue_many("w", [JobSpec({}, t) for t in ("old", "new1", "new2", "new1")], conn=conn)
        conn.pgconn.untrace()
    sent = trace.read_text()
    assert len(re.findall(r"^F\t\d+\t(?:Sync|Query)\b", sent, re.MULTILINE)) == 1, sent
    with psycopg.connect(fresh_db, autocommit=True) as db:
        active = {s.tenant: s.active for s in tenant_shares_list(db, "w")}
    assert active == {"old": True, "new1": True, "new2": True}
    claimed = Counter(lease.tenant for lease in client.claim("w", owner="t", limit=10))
    assert claimed == {"old": 5, "new1": 2, "new2": 1}


def wait_for_a_lock_wait(db: psycopg.Connection) -> None:
    """Return once a backend of this database waits for a lock."""
    for _ in range(500):
        row = db.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
        if row is not None and row[0] > 0:
            return
        time.sleep(0.02)
    raise AssertionError("the enqueue never waited for the deactivation's lock")


def test_an_enqueue_racing_a_deactivation_leaves_its_tenant_active(client: Client, fresh_db: str) -> None:
    """The enqueue waits for a deactivation that locked the tenant's share row first;
    its activation reads the row after that commit (a statement of its own, with its
    own snapshot) and puts the tenant back, so the new job is claimable."""
    declare(client, "w", ["weighted"])
    fill(client, "w", "t", 1)
    assert len(client.claim("w", owner="t")) == 1  # "t" is active with nothing pending
    errors: list[BaseException] = []

    def enqueue() -> None:
        try:
            fill(client, "w", "t", 1)
        except BaseException as e:
            errors.append(e)

    with psycopg.connect(fresh_db, autocommit=True) as deactivator, deactivator.transaction():
        no_filters = {"filters": sql.SQL("")}
        lock, deactivate = (sql.SQL(statement).format(**no_filters) for statement in DRY)
        deactivator.execute(lock, {"queue": "w", "limit": 5})
        deactivator.execute(deactivate, {"queue": "w", "tenants": ["t"]})
        racer = threading.Thread(target=enqueue)
        racer.start()
        with psycopg.connect(fresh_db, autocommit=True) as db:
            wait_for_a_lock_wait(db)
    racer.join(timeout=30)
    assert not racer.is_alive() and not errors, errors
    with psycopg.connect(fresh_db, autocommit=True) as db:
        assert [(s.tenant, s.active) for s in tenant_shares_list(db, "w")] == [("t", True)]
    assert [lease.tenant for lease in client.claim("w", owner="t", limit=5)] == ["t"]


def test_caps_hold_under_concurrency(client: Client, db: psycopg.Connection) -> None:
    declare(client, "w", ["weighted"], tenant_cap=3, tenants={"capped": {"weight": 50, "cap": 2}})
    fill(client, "w", "capped", 200)
    fill(client, "w", "other", 200)
    peak: Counter[str] = Counter()
    running: Counter[str] = Counter()
    lock = threading.Lock()

    def handle(lease: Lease) -> None:
        with lock:
            running[lease.tenant] += 1
            peak[lease.tenant] = max(peak[lease.tenant], running[lease.tenant])
        time.sleep(0.002)
        with lock:
            running[lease.tenant] -= 1

    def observe() -> None:
        while not done.is_set():
            rows = db.execute(
                "SELECT tenant, count(*) FROM fairsched.jobs WHERE status = 'running' GROUP BY tenant"
            ).fetchall()
            for tenant, n in rows:
                with lock:
                    peak["db:" + tenant] = max(peak["db:" + tenant], n)

    done = threading.Event()
    watcher = threading.Thread(target=observe)
    watcher.start()
    try:
        leases = claim_concurrently(client, "w", claims=400, workers=8, batch=3, handle=handle)
    finally:
        done.set()
        watcher.join()
    assert len(leases) == 400
    assert peak["db:capped"] <= 2 and peak["db:other"] <= 3, peak
    assert {s.tenant: s.running for s in tenant_shares_list(db, "w")} == {"capped": 0, "other": 0}


def test_completions_never_wait_for_share_rows_a_claimer_holds(
    client: Client, db: psycopg.Connection, fresh_db: str
) -> None:
    """A finisher releases running slots in its own shard row: a claim holding the
    tenant's share row (as every weighted claim does until it commits) does not stall it."""
    declare(client, "w", ["weighted"], tenant_cap=10)
    fill(client, "w", "t", 20)
    leases = client.claim("w", owner="o", limit=5)
    assert len(leases) == 5
    with psycopg.connect(fresh_db) as holder:  # a claimer's transaction on the share row
        holder.execute("SELECT 1 FROM fairsched.tenant_shares WHERE queue_name = 'w' FOR NO KEY UPDATE")
        with psycopg.connect(fresh_db, autocommit=True) as finisher:
            finisher.execute("SET lock_timeout = '2s'")
            done = leases_complete(finisher, leases[:3])
            leases_fail(finisher, [Failure(leases[3], FailureKind.RETRYABLE, "boom", "boom")])
        holder.rollback()
    assert done == {lease.id for lease in leases[:3]}
    assert {s.tenant: s.running for s in tenant_shares_list(db, "w")} == {"t": 1}


def test_every_way_out_of_running_releases_each_tenants_own_slots(
    client: Client, db: psycopg.Connection
) -> None:
    """Completions (released from the rows their statement updates), failures and
    releases (from the job ids, in their settling transaction) of batches that mix
    queues and tenants release exactly the slots of each queue and tenant."""
    for queue in ("w1", "w2"):
        declare(client, queue, ["weighted"])
        for tenant in ("a", "b", "c"):
            fill(client, queue, tenant, 10)
    claimed = {queue: client.claim(queue, owner="o", limit=24) for queue in ("w1", "w2")}
    by_tenant = {
        (queue, tenant): [lease for lease in leases if lease.tenant == tenant]
        for queue, leases in claimed.items()
        for tenant in ("a", "b", "c")
    }
    done = by_tenant["w1", "a"][:5] + by_tenant["w2", "a"][:1] + by_tenant["w1", "b"][:2]
    done += by_tenant["w2", "c"]
    failed = by_tenant["w1", "c"][:3] + by_tenant["w2", "b"][:4]
    released = by_tenant["w1", "a"][5:7]
    assert client.complete_many(done) == {lease.id for lease in done}
    assert all(outcome.held for outcome in client.fail_many((lease, "boom") for lease in failed).values())
    assert all(client.release(lease) for lease in released)
    gone = {lease.id for lease in done + failed + released}
    expected = Counter(
        (queue, lease.tenant) for queue, leases in claimed.items() for lease in leases if lease.id not in gone
    )
    running = {(queue, s.tenant): s.running for queue in ("w1", "w2") for s in tenant_shares_list(db, queue)}
    assert running == {key: expected[key] for key in running}, (running, expected)
    assert sum(running.values()) == 48 - len(gone)


def test_a_cap_set_live_counts_the_jobs_already_running(client: Client, db: psycopg.Connection) -> None:
    declare(client, "w", ["weighted"])
    fill(client, "w", "t", 50)
    running = client.claim("w", owner="o", limit=6)
    client.set_tenant_share("w", "t", cap=6)
    assert client.claim("w", owner="o", limit=5) == []
    client.complete_many(running[:2])
    assert len(client.claim("w", owner="o", limit=5)) == 2
    assert {s.tenant: s.running for s in tenant_shares_list(db, "w")} == {"t": 6}


def test_jobs_claimed_before_a_queue_turned_weighted_release_nothing(
    client: Client, db: psycopg.Connection
) -> None:
    """Only jobs a weighted claim counted are released, so a policy change under running
    jobs cannot push a tenant's running count below its truth (and past its cap)."""
    declare(client, "w", ["fifo"])
    fill(client, "w", "t", 50)
    before = client.claim("w", owner="o", limit=4)
    declare(client, "w", ["weighted"], tenant_cap=2)
    after = client.claim("w", owner="o", limit=5)
    assert len(after) == 2
    client.complete_many(before)
    assert client.claim("w", owner="o", limit=5) == []
    assert {s.tenant: s.running for s in tenant_shares_list(db, "w")} == {"t": 2}


def test_runtime_charging_evens_worker_time(client: Client, db: psycopg.Connection) -> None:
    declare(client, "w", ["weighted"], charge="runtime")
    client.enqueue_many("w", [_spec("slow", 0.02) for _ in range(300)])
    client.enqueue_many("w", [_spec("fast", 0.002) for _ in range(3000)])

    def handle(lease: Lease) -> None:
        time.sleep(lease.payload["s"])

    leases = claim_concurrently(client, "w", claims=900, workers=2, batch=1, handle=handle)
    counts = Counter(lease.tenant for lease in leases)
    # Worker-time as the database measured it: claim to completion of each attempt.
    spent = dict(
        db.execute(
            """SELECT j.tenant, sum(extract(epoch FROM a.finished_at - a.claimed_at))
                 FROM fairsched.attempts a JOIN fairsched.jobs j ON j.id = a.job_id
                GROUP BY j.tenant"""
        ).fetchall()
    )
    assert counts["fast"] > 2 * counts["slow"], counts
    ratio = float(spent["slow"] / spent["fast"])
    assert 0.67 <= ratio <= 1.5, (spent, counts)


def test_completions_correct_by_run_time_only_on_runtime_charged_queues(
    client: Client, db: psycopg.Connection
) -> None:
    """A count-charged queue beside a runtime-charged one: finishing a job corrects the
    runtime queue's pass and estimate by its run time, and leaves the count queue's
    share rows as its claim charged them; both release their running slots."""
    declare(client, "byrun", ["weighted"], charge="runtime")
    declare(client, "bycount", ["weighted"])
    fill(client, "byrun", "t", 1)
    fill(client, "bycount", "t", 1)

    def share_rows() -> dict[tuple[str, str], TenantShare]:
        return {(q, s.tenant): s for q in ("byrun", "bycount") for s in tenant_shares_list(db, q)}

    leases = client.claim("byrun", owner="w", limit=1) + client.claim("bycount", owner="w", limit=1)
    claimed = share_rows()
    time.sleep(0.3)
    assert leases_complete(db, leases) == {lease.id for lease in leases}
    after = share_rows()

    count_before, count_after = claimed[("bycount", "t")], after[("bycount", "t")]
    assert (count_after.pass_, count_after.charged_total) == (count_before.pass_, count_before.charged_total)
    run_before, run_after = claimed[("byrun", "t")], after[("byrun", "t")]
    # Claimed at the 1 s estimate, charged ~0.3 s once finished; the estimate moves toward it.
    assert 0.3 <= run_after.charged_total < run_before.charged_total, (run_before, run_after)
    charged = run_after.charged_total - run_before.charged_total
    assert run_after.pass_ - run_before.pass_ == pytest.approx(charged)
    assert run_after.runtime_estimate < run_before.runtime_estimate
    assert {key: s.running for key, s in after.items()} == {("byrun", "t"): 0, ("bycount", "t"): 0}


def _spec(tenant: str, seconds: float) -> object:
    from fairsched.engine.enqueue import JobSpec

    return JobSpec({"s": seconds}, tenant)


def test_a_weight_change_reweights_the_queued_backlog(client: Client, db: psycopg.Connection) -> None:
    declare(client, "w", ["weighted"])
    fill(client, "w", "a", 3000)
    fill(client, "w", "b", 3000)
    before = shares(claim_concurrently(client, "w", claims=1000, workers=2, batch=10))
    assert abs(before["a"] - 50.0) <= 3.0, before
    tenant_share_set(db, "w", "b", weight=3)
    after = shares(claim_concurrently(client, "w", claims=2000, workers=2, batch=10))
    assert abs(after["b"] - 75.0) <= 3.0, after


def test_weights_are_validated(db: psycopg.Connection, client: Client) -> None:
    declare(client, "w", ["weighted"])
    for bad in (0, -1.0, float("nan"), 10**7):
        with pytest.raises(InvalidInput):
            tenant_share_set(db, "w", "a", weight=bad)
