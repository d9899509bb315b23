"""Live tuning: changes made through the Client reach a running worker through the database.

A real ``fairsched worker`` drains a two-tenant backlog while a tenant's weight
or the queue's policy stack changes; the shares of the claims made after the
change (``fairsched.attempts.claimed_at``, and ``started_at`` of jobs still
running) show the worker applied it without a restart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from worker_support import Workers, wait_for

from fairsched import Client, JobSpec, QueueSettings, Settings
from fairsched.policy.registry import STACK_TTL_SECONDS

CLAIMED = sql.SQL("""WITH c AS (
    SELECT j.tenant, a.claimed_at FROM fairsched.attempts a JOIN fairsched.jobs j ON j.id = a.job_id
    UNION ALL
    SELECT tenant, started_at FROM fairsched.jobs WHERE status = 'running'
)
""")
"""Every claim made so far (finished attempts, and the jobs running now) as ``c``."""

FIRST_CLAIMS = CLAIMED + sql.SQL(
    "SELECT tenant, claimed_at FROM c WHERE claimed_at >= %(since)s ORDER BY claimed_at LIMIT %(count)s"
)

A_SINCE_LAST_B = CLAIMED + sql.SQL(
    """SELECT l.at, count(*) FILTER (WHERE c.tenant = 'a' AND c.claimed_at > l.at)
  FROM c, (SELECT max(claimed_at) AS at FROM c WHERE tenant = 'b') AS l
 GROUP BY l.at"""
)
"""The last claim of b, and how many claims of a came after it."""


@pytest.fixture
def client(fresh_db: str) -> Iterator[Client]:
    with Client(fresh_db, settings=Settings()) as c:
        yield c


def declare(client: Client, policies: list[str], **values: Any) -> None:
    client.declare_queue("probe", QueueSettings(lease_seconds=10, policies=policies, **values))


def fill(client: Client, tenant: str, count: int) -> None:
    client.enqueue_many("probe", [JobSpec({"sleep": 0.03}, tenant=tenant) for _ in range(count)])


def db_now(db: psycopg.Connection) -> datetime:
    row = db.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def first_claims(
    db: psycopg.Connection, since: datetime, count: int, timeout: float = 30.0
) -> dict[str, int]:
    """Per tenant, the first ``count`` claims made since ``since`` (waits until there are that many)."""
    rows = wait_for(
        lambda: (
            (found := db.execute(FIRST_CLAIMS, {"since": since, "count": count}).fetchall())
            and len(found) == count
            and found
        ),
        f"{count} claims",
        timeout=timeout,
    )
    return dict(Counter(tenant for tenant, _ in rows))


def share(counts: dict[str, int], tenant: str) -> float:
    return counts.get(tenant, 0) / max(1, sum(counts.values()))


def test_a_tenant_weight_change_reaches_a_running_worker(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client, ["weighted"])
    fill(client, "a", 1500)
    fill(client, "b", 1500)
    start = db_now(db)
    workers.start({"probe": 4})
    before = first_claims(db, start, 200)
    client.set_tenant_share("probe", "a", weight=4)
    changed = db_now(db)
    after = first_claims(db, changed, 300)
    print(
        f"before {before} (a {share(before, 'a'):.3f}); after weight a=4: {after} (a {share(after, 'a'):.3f})"
    )
    assert abs(share(before, "a") - 0.5) <= 0.06, before
    assert abs(share(after, "a") - 0.8) <= 0.06, after


def test_a_policy_stack_switch_reaches_a_running_worker(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client, ["weighted"])
    fill(client, "a", 1500)
    fill(client, "b", 1500)
    start = db_now(db)
    workers.start({"probe": 4})
    weighted = first_claims(db, start, 200)
    switched = db_now(db)
    declare(client, ["fifo"])
    # fifo claims in enqueue order: a's whole backlog before any of b's. Under the weighted
    # stack b gets every other claim, so a run of 200 claims of a alone proves the switch.
    last_b, only_a = wait_for(
        lambda: (row := db.execute(A_SINCE_LAST_B).fetchone()) is not None and row[1] >= 200 and row,
        "200 claims of a after the last claim of b",
    )
    print(
        f"weighted before the switch: {weighted} (a {share(weighted, 'a'):.3f}); after it: {only_a}"
        f" claims of a alone, from {(last_b - switched).total_seconds():.2f}s after the switch"
    )
    assert abs(share(weighted, "a") - 0.5) <= 0.06, weighted
    assert last_b >= switched - timedelta(seconds=5), "b was still claimed until the switch"


def test_switching_to_weighted_reaches_a_running_worker_and_its_backlog(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client, ["fifo"])
    fill(client, "a", 1500)
    fill(client, "b", 1500)
    start = db_now(db)
    workers.start({"probe": 4})
    fifo = first_claims(db, start, 200)
    declare(client, ["weighted"])
    # A worker may use the fifo stack it cached for up to STACK_TTL_SECONDS after the switch.
    switched = db_now(db) + timedelta(seconds=STACK_TTL_SECONDS)
    after = first_claims(db, switched, 100, timeout=10)
    print(f"fifo {fifo}; weighted after the switch {after}")
    assert fifo == {"a": 200}, fifo
    assert share(after, "b") >= 0.3, after
