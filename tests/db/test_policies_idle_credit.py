"""A tenant idle between bursts banks no credit, and one that used the queue alone carries no debt."""

from __future__ import annotations

from collections import Counter

from fairsched import Client, JobSpec, QueueSettings


def drain_exactly(client: Client, total: int) -> None:
    """Claim and complete ``total`` jobs, never making a claim that finds nothing."""
    done = 0
    while done < total:
        leases = client.claim("w", owner="w", limit=min(10, total - done))
        assert leases
        client.complete_many(leases)
        done += len(leases)


def test_a_second_burst_is_shared_fairly(client: Client) -> None:
    client.declare_queue("w", QueueSettings(policies=["weighted"]))
    client.enqueue_many("w", [JobSpec({}, "big") for _ in range(300)])
    client.enqueue_many("w", [JobSpec({}, t) for t in ("s1", "s2") for _ in range(30)])
    drain_exactly(client, 360)
    assert client.claim("w", owner="w") == []  # a poll finds the queue idle: every tenant leaves
    for tenant in ("s1", "big", "s2"):
        client.enqueue_many("w", [JobSpec({}, tenant) for _ in range(100)])
    claimed = Counter(lease.tenant for _ in range(6) for lease in client.claim("w", owner="w", limit=10))
    assert sum(claimed.values()) == 60
    assert all(15 <= claimed[t] <= 25 for t in ("big", "s1", "s2")), claimed
