"""The policies' guarantees, each asserted directly: shares follow weights, an aggregate's
next job waits for its running head in either gap mode, a job's aging key is its enqueue
time less its priority's worth of waiting."""

from __future__ import annotations

from collections import Counter

import psycopg
import pytest
from policies_support import declare
from worker_support import wait_for

from fairsched import Client, JobSpec


def test_claims_follow_the_weights(client: Client) -> None:
    """Weights 1 and 3, both tenants backlogged: 40 claims of one job go 10 and 30."""
    declare(client, "w", ["weighted"])
    client.set_tenant_share("w", "light", weight=1)
    client.set_tenant_share("w", "heavy", weight=3)
    client.enqueue_many("w", [JobSpec({}, tenant) for tenant in ("light", "heavy") for _ in range(40)])
    claimed = Counter(lease.tenant for _ in range(40) for lease in client.claim("w", owner="host:1"))
    assert abs(claimed["heavy"] - 30) <= 1 and claimed.total() == 40, claimed


@pytest.mark.parametrize("gap", ["strict", "lowest"])
def test_the_next_job_of_an_aggregate_waits_for_its_running_head(client: Client, gap: str) -> None:
    declare(client, "s", ["serial"], serial_gap=gap)
    client.enqueue("s", {}, tenant="t", aggregate_key="k", aggregate_seq=1)
    [head] = client.claim("s", owner="host:1")
    client.enqueue_many("s", [JobSpec({}, "t", aggregate_key="k", aggregate_seq=s) for s in (2, 3)])
    assert client.claim("s", owner="host:1", limit=5) == []
    assert client.complete(head)
    assert [lease.aggregate_seq for lease in client.claim("s", owner="host:1", limit=5)] == [2]


def test_aging_keys_follow_enqueue_time_so_waiting_outranks_priority(
    client: Client, db: psycopg.Connection
) -> None:
    """Interval 0.05 s: a priority-0 job that waited past 5 x 0.05 s in database time comes
    before a priority-5 job enqueued then; each key is the enqueue time less priority x
    interval."""
    interval = 0.05
    declare(client, "a", ["aging"], aging_interval_seconds=interval)
    low = client.enqueue("a", {}, tenant="t", priority=0)
    waited = "SELECT now() - created_at > interval '0.5 seconds' FROM fairsched.jobs WHERE id = %s"
    wait_for(lambda: db.execute(waited, (low,)).fetchone() == (True,), "the low job waited 0.5 s")
    high = client.enqueue("a", {}, tenant="t", priority=5)
    keys = db.execute(
        "SELECT id, aging_key, extract(epoch FROM created_at)::float8 - priority * %s FROM fairsched.jobs"
        " ORDER BY id",
        (interval,),
    ).fetchall()
    for _, key, expected in keys:
        assert key == pytest.approx(expected, abs=1e-6)
    assert [lease.id for lease in client.claim("a", owner="host:1")] == [low]
    assert [lease.id for lease in client.claim("a", owner="host:1")] == [high]
