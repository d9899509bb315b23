"""ratelimit: no tenant is claimed past its token bucket, whatever the batch size or the
number of concurrent claimers; the rest of the claim goes to tenants under their limits;
a change applies at the next claim; the claim stays an index scan."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from fairsched_policies.ratelimit import Rate, parse_rate, rate_set
from policies_support import claim_concurrently, declare, fill

from fairsched import Client
from fairsched.engine.claim import claim_params
from fairsched.engine.composer import compose_claim
from fairsched.errors import InvalidInput

STACKS = [
    ["ratelimit"],
    ["weighted", "ratelimit"],
    ["weighted", "aging", "ratelimit"],
    ["aging", "ratelimit"],
]


def set_rate(client: Client, queue: str, tenant: str | None, rate: str) -> None:
    with client.connection() as conn:
        rate_set(conn, queue, tenant, parse_rate(rate))
        conn.commit()


def claimed(client: Client, queue: str, *, limit: int, times: int = 1) -> Counter[str]:
    """Jobs per tenant over ``times`` claims of ``limit``, completed as they come."""
    counts: Counter[str] = Counter()
    for _ in range(times):
        leases = client.claim(queue, owner="w", limit=limit)
        counts.update(lease.tenant for lease in leases)
        client.complete_many(leases)
    return counts


@pytest.mark.parametrize("stack", STACKS, ids="+".join)
def test_batch_claims_take_no_more_of_a_tenant_than_its_bucket(client: Client, stack: list[str]) -> None:
    declare(client, "rl", stack)
    fill(client, "rl", "a", 60)
    fill(client, "rl", "b", 60)
    set_rate(client, "rl", "a", "10/h")
    counts = claimed(client, "rl", limit=50, times=3)
    assert counts["a"] == 10
    assert counts["b"] == 60


@pytest.mark.parametrize("stack", [s for s in STACKS if "weighted" in s], ids="+".join)
def test_with_weighted_one_claim_fills_up_from_tenants_under_their_limits(
    client: Client, stack: list[str]
) -> None:
    declare(client, "rl", stack)
    for tenant in "abc":
        fill(client, "rl", tenant, 100)
    set_rate(client, "rl", "a", "5/h")
    counts = claimed(client, "rl", limit=60)
    assert counts == {"a": 5, "b": 27, "c": 28} or counts == {"a": 5, "b": 28, "c": 27}


def test_a_queue_default_limits_every_tenant_without_its_own(client: Client) -> None:
    declare(client, "rl", ["weighted", "ratelimit"])
    for tenant in "abc":
        fill(client, "rl", tenant, 50)
    set_rate(client, "rl", None, "4/h")
    set_rate(client, "rl", "a", "12/h")
    assert claimed(client, "rl", limit=50, times=4) == {"a": 12, "b": 4, "c": 4}
    set_rate(client, "rl", "b", "off")
    set_rate(client, "rl", None, "off")
    assert claimed(client, "rl", limit=100, times=2) == {"b": 46, "c": 46}


def test_a_change_applies_at_the_next_claim(client: Client) -> None:
    declare(client, "rl", ["ratelimit"])
    fill(client, "rl", "a", 100)
    set_rate(client, "rl", "a", "3/h")
    assert claimed(client, "rl", limit=10, times=3) == {"a": 3}
    set_rate(client, "rl", "a", "1000/s")
    time.sleep(0.05)
    assert claimed(client, "rl", limit=10) == {"a": 10}
    set_rate(client, "rl", "a", "2/d")
    assert claimed(client, "rl", limit=10, times=2) == {"a": 2}, "a lower limit caps the tokens left"
    set_rate(client, "rl", "a", "off")
    assert claimed(client, "rl", limit=10) == {"a": 10}


@pytest.mark.parametrize("stack", [["ratelimit"], ["weighted", "ratelimit"]], ids="+".join)
@pytest.mark.parametrize("batch", [1, 7])
def test_concurrent_claimers_never_pass_a_rate(
    client: Client, db: psycopg.Connection, stack: list[str], batch: int
) -> None:
    """Four claimers against a 20/s tenant: whenever its jobs started, at most the bucket
    (20) plus 20 a second since the first of them. A job's start is its claim's
    transaction time and the bucket is charged a moment later, under its lock: two jobs
    (100 ms at 20/s) of slack for that lag."""
    declare(client, "rl", stack)
    fill(client, "rl", "a", 400)
    fill(client, "rl", "b", 3000)
    set_rate(client, "rl", "a", "20/s")
    claim_concurrently(client, "rl", claims=3000, workers=4, batch=batch)
    rows = db.execute(
        "SELECT extract(epoch FROM started_at) FROM fairsched.jobs"
        " WHERE tenant = 'a' AND started_at IS NOT NULL ORDER BY started_at"
    ).fetchall()
    starts = [float(row[0]) for row in rows]
    assert len(starts) >= 20, "the full bucket is admitted"
    for i, at in enumerate(starts):
        allowed = 20 + 20 * (at - starts[0]) + 2
        assert i + 1 <= allowed + 1e-6, f"{i + 1} jobs of a started within {at - starts[0]:.3f} s"


def test_the_claim_stays_an_index_scan(client: Client, db: psycopg.Connection) -> None:
    declare(client, "rl", ["weighted", "ratelimit"])
    for tenant in "abcd":
        fill(client, "rl", tenant, 2500)
    set_rate(client, "rl", "a", "1/h")
    db.execute("ANALYZE fairsched.jobs")
    for names in (("weighted", "ratelimit"), ("ratelimit",)):
        statement = compose_claim(names)
        params = claim_params("rl", owner="w", limit=50, lease_seconds=None)
        with db.transaction(force_rollback=True):
            plan = db.execute(b"EXPLAIN (FORMAT JSON) " + statement.as_bytes(None), params).fetchone()
        nodes = list(plan_nodes(plan[0][0]["Plan"]))
        on_jobs = [n for n in nodes if n.get("Relation Name") == "jobs" and n["Node Type"].endswith("Scan")]
        assert on_jobs and all(node["Node Type"] in ("Index Scan", "Index Only Scan") for node in on_jobs)
        for node in nodes:
            if node["Node Type"] == "Sort":
                scans = [c for c in node["Plans"] if c["Node Type"].endswith("Scan")]
                assert not any(c.get("Relation Name") == "jobs" for c in scans), "no sort over the backlog"


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)


BAD_RATES = ["0/s", "-1/s", "1.5/s", "inf/s", "nan/s", "5", "5/x", "1e3/s", "1000001/s", "", "/s"]


@pytest.mark.parametrize("text", BAD_RATES)
def test_bad_rates_are_refused_with_one_clear_error(text: str) -> None:
    with pytest.raises(InvalidInput, match="N/s, N/m, N/h or N/d"):
        parse_rate(text)


def test_the_database_refuses_a_limit_out_of_range(client: Client, db: psycopg.Connection) -> None:
    declare(client, "rl", ["ratelimit"])
    for jobs, period in ((0, 1), (2_000_000, 1), (5, 7)):
        with pytest.raises(psycopg.errors.CheckViolation), db.transaction():
            rate_set(db, "rl", "a", Rate(jobs, period))
    assert db.execute("SELECT count(*) FROM fairsched.ratelimits").fetchone() == (0,)
