"""serial: one job at a time per aggregate, in sequence order, with many concurrent batch
claimers; gaps (strict, lowest); poisoned heads (block, skip); clear enqueue errors."""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict

import psycopg
import pytest
from policies_support import claim_concurrently, declare

from fairsched import Client
from fairsched.engine.dead import aggregate_skip, aggregate_unblock, aggregates_blocked
from fairsched.engine.enqueue import JobSpec
from fairsched.engine.lease import Lease
from fairsched.errors import InvalidInput

AGGREGATES, SEQS = 12, 25


@pytest.mark.parametrize("policies", [["serial"], ["weighted", "aging", "serial"]])
def test_aggregates_run_one_at_a_time_in_order_with_batch_claimers(
    client: Client, policies: list[str]
) -> None:
    declare(client, "s", policies)
    specs = [
        JobSpec({"agg": a, "seq": s}, f"t{a % 3}", aggregate_key=f"k{a}", aggregate_seq=s)
        for s in range(SEQS)
        for a in range(AGGREGATES)
    ]
    for start in range(0, len(specs), 37):
        client.enqueue_many("s", specs[start : start + 37])
    running: set[str] = set()
    order: dict[str, list[int]] = defaultdict(list)
    overlaps: list[str] = []
    lock = threading.Lock()

    def handle(lease: Lease) -> None:
        key = lease.aggregate_key or ""
        with lock:
            if key in running:
                overlaps.append(key)
            running.add(key)
            order[key].append(lease.aggregate_seq or 0)
        time.sleep(0.001)
        with lock:
            running.discard(key)

    leases: list[Lease] = []
    for _ in range(SEQS * 3):
        leases += claim_concurrently(client, "s", claims=10_000, workers=6, batch=8, handle=handle)
        if len(leases) == AGGREGATES * SEQS:
            break
    assert not overlaps
    assert len(leases) == AGGREGATES * SEQS
    assert all(seqs == list(range(SEQS)) for seqs in order.values()), order


def test_strict_waits_for_a_gap_and_reports_it(client: Client, db: psycopg.Connection) -> None:
    declare(client, "s", ["serial"], serial_gap="strict")
    for seq in (1, 2, 4, 5):
        client.enqueue("s", {}, tenant="t", aggregate_key="k", aggregate_seq=seq)
    assert _drain(client) == [1, 2]
    gap = db.execute("SELECT gap_since FROM fairsched.aggregates WHERE aggregate_key = 'k'").fetchone()
    assert gap is not None and gap[0] is not None
    client.enqueue("s", {}, tenant="t", aggregate_key="k", aggregate_seq=3)
    assert _drain(client) == [3, 4, 5]
    gap = db.execute("SELECT gap_since FROM fairsched.aggregates WHERE aggregate_key = 'k'").fetchone()
    assert gap is not None and gap[0] is None


def test_lowest_runs_the_lowest_present(client: Client) -> None:
    declare(client, "s", ["serial"], serial_gap="lowest")
    seqs = [1, 2, 4, 5, 9]
    random.Random(7).shuffle(seqs)
    client.enqueue_many("s", [JobSpec({}, "t", aggregate_key="k", aggregate_seq=s) for s in seqs])
    assert _drain(client) == [1, 2, 4, 5, 9]


def test_a_dead_head_blocks_its_aggregate_only_until_skipped(client: Client, db: psycopg.Connection) -> None:
    declare(client, "s", ["serial"], serial_poison="block")
    for seq in (1, 2):
        client.enqueue("s", {}, tenant="t", aggregate_key="k", aggregate_seq=seq)
        client.enqueue("s", {}, tenant="t", aggregate_key="other", aggregate_seq=seq)
    [head, other] = client.claim("s", owner="w", limit=5)
    assert (head.aggregate_key, other.aggregate_key) == ("k", "other")
    client.fail(head, "poison", kind="permanent")
    client.complete(other)
    claimed = client.claim("s", owner="w", limit=5)
    assert [(x.aggregate_key, x.aggregate_seq) for x in claimed] == [("other", 2)]
    [blocked] = aggregates_blocked(db, queue="s")
    assert (blocked.aggregate_key, blocked.blocked_job_id) == ("k", head.id)
    aggregate_unblock(db, "s", "t", "k")
    [again] = client.claim("s", owner="w", limit=5)
    assert again.id == head.id
    client.fail(again, "poison", kind="permanent")
    assert client.claim("s", owner="w") == []
    aggregate_skip(db, "s", "t", "k")
    [nxt] = client.claim("s", owner="w")
    assert (nxt.aggregate_key, nxt.aggregate_seq) == ("k", 2)
    assert aggregates_blocked(db, queue="s") == []


def test_skip_mode_passes_a_dead_head(client: Client) -> None:
    declare(client, "s", ["serial"], serial_poison="skip")
    for seq in (1, 2):
        client.enqueue("s", {}, tenant="t", aggregate_key="k", aggregate_seq=seq)
    [head] = client.claim("s", owner="w")
    client.fail(head, "poison", kind="permanent")
    [nxt] = client.claim("s", owner="w")
    assert nxt.aggregate_seq == 2


def test_a_recovered_or_released_head_keeps_its_place(client: Client) -> None:
    declare(client, "s", ["weighted", "serial"])
    for seq in (1, 2):
        client.enqueue("s", {}, tenant="t", aggregate_key="k", aggregate_seq=seq)
    [head] = client.claim("s", owner="w", lease_seconds=0.05)
    time.sleep(0.1)
    assert client.recover().retried == 1
    [again] = client.claim("s", owner="w", limit=5)
    assert again.id == head.id
    assert client.release(again)
    [third] = client.claim("s", owner="w", limit=5)
    assert third.id == head.id


def test_enqueueing_a_sequence_that_ran_or_exists_is_refused(client: Client) -> None:
    declare(client, "s", ["serial"])
    client.enqueue("s", {}, tenant="t", aggregate_key="k", aggregate_seq=1)
    with pytest.raises(InvalidInput, match="already has a job with sequence number 1"):
        client.enqueue("s", {}, tenant="t", aggregate_key="k", aggregate_seq=1)
    client.complete(client.claim("s", owner="w")[0])
    with pytest.raises(InvalidInput, match="already past sequence number 0"):
        client.enqueue("s", {}, tenant="t", aggregate_key="k", aggregate_seq=0)
    with pytest.raises(InvalidInput, match="appears twice"):
        client.enqueue_many("s", [JobSpec({}, "t", aggregate_key="k", aggregate_seq=7)] * 2)


def _drain(client: Client) -> list[int]:
    seqs: list[int] = []
    while leases := client.claim("s", owner="w", limit=10):
        assert len(leases) == 1
        seqs.append(leases[0].aggregate_seq or 0)
        client.complete(leases[0])
    return seqs
