"""serial at its edges: idempotent retries of held jobs, where a strict aggregate starts,
and replay or discard of a dead serial job."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
import pytest
from cli_support import cli, one_error_line
from policies_support import declare

from fairsched import Client
from fairsched.engine.enqueue import JobSpec
from fairsched.errors import InvalidInput
from fairsched.observe.snapshot import ExporterSettings, read_snapshot

STACKS = [["serial"], ["weighted", "aging", "serial"]]


def _job(seq: int, key: str, aggregate: str = "x") -> JobSpec:
    return JobSpec({"seq": seq}, "t", aggregate_key=aggregate, aggregate_seq=seq, idempotency_key=key)


def _to_running(client: Client, job_id: int) -> None:
    [lease] = client.claim("si", owner="w")
    assert lease.id == job_id


def _to_succeeded(client: Client, job_id: int) -> None:
    [lease] = client.claim("si", owner="w")
    client.complete(lease)


def _to_dead(client: Client, job_id: int) -> None:
    [lease] = client.claim("si", owner="w")
    client.fail(lease, "poison", kind="permanent")


def _to_discarded(client: Client, job_id: int) -> None:
    _to_dead(client, job_id)
    client.dead_discard(job_id)


def _to_cancelled(client: Client, job_id: int) -> None:
    client.cancel(job_id)


STATES: dict[str, Callable[[Client, int], None]] = {
    "pending": lambda _client, _id: None,
    "running": _to_running,
    "succeeded": _to_succeeded,
    "dead": _to_dead,
    "discarded": _to_discarded,
    "cancelled": _to_cancelled,
}


@pytest.mark.parametrize("policies", STACKS)
@pytest.mark.parametrize("state", list(STATES))
def test_an_idempotent_retry_returns_the_existing_job_in_every_state(
    client: Client, db: psycopg.Connection, policies: list[str], state: str
) -> None:
    declare(client, "si", policies, serial_poison="skip")
    [first] = client.enqueue_many("si", [_job(1, "ik1")])
    [waiting] = client.enqueue_many("si", [_job(2, "ik2")])
    assert client.enqueue_many("si", [_job(2, "ik2")]) == [waiting]
    STATES[state](client, first)
    status = db.execute("SELECT status FROM fairsched.jobs WHERE id = %s", (first,)).fetchone()
    assert status == (state,)
    retry = client.enqueue("si", {}, tenant="t", aggregate_key="x", aggregate_seq=1, idempotency_key="ik1")
    assert retry == first
    # In a batch with new jobs, and with a key repeated in the batch itself.
    ids = client.enqueue_many("si", [_job(3, "ik3"), _job(1, "ik1"), _job(2, "ik2"), _job(3, "ik3")])
    assert ids[1:3] == [first, waiting] and ids[3] == ids[0] and ids[0] not in (first, waiting)
    count = db.execute("SELECT count(*) FROM fairsched.jobs WHERE queue_name = 'si'").fetchone()
    assert count == (3,)


def test_a_retry_with_another_aggregate_or_sequence_returns_the_existing_job(
    client: Client, db: psycopg.Connection
) -> None:
    declare(client, "si", ["serial"], serial_gap="lowest")
    first = client.enqueue("si", {}, tenant="t", aggregate_key="x", aggregate_seq=5, idempotency_key="ik1")
    assert client.enqueue_many("si", [_job(9, "ik1", "y"), _job(5, "ik1")]) == [first, first]
    # Nothing changed: no aggregate y, and y may still start at a lower number.
    rows = db.execute("SELECT aggregate_key, next_seq FROM fairsched.aggregates WHERE queue_name = 'si'")
    assert rows.fetchall() == [("x", 5)]
    client.enqueue("si", {}, tenant="t", aggregate_key="y", aggregate_seq=1)


def test_a_sequence_number_taken_under_another_key_is_still_refused(client: Client) -> None:
    declare(client, "si", ["serial"])
    client.enqueue("si", {}, tenant="t", aggregate_key="x", aggregate_seq=1, idempotency_key="ik1")
    with pytest.raises(InvalidInput, match="already has a job with sequence number 1"):
        client.enqueue("si", {}, tenant="t", aggregate_key="x", aggregate_seq=1, idempotency_key="ik2")
    with pytest.raises(InvalidInput, match="appears twice"):
        client.enqueue_many("si", [_job(4, "ik4"), _job(4, "ik5")])


def _drain(client: Client, queue: str) -> list[int]:
    seqs: list[int] = []
    while leases := client.claim(queue, owner="w", limit=10):
        assert len(leases) == 1
        seqs.append(leases[0].aggregate_seq or 0)
        client.complete(leases[0])
    return seqs


def _gap_waiting(db: psycopg.Connection) -> int:
    return read_snapshot(db, ExporterSettings()).queues["s"].gap_waiting_aggregates


@pytest.mark.parametrize("policies", STACKS)
def test_a_strict_aggregate_starts_at_1_and_waits_for_it(
    client: Client, db: psycopg.Connection, policies: list[str]
) -> None:
    declare(client, "s", policies, serial_gap="strict")
    client.enqueue_many("s", [JobSpec({}, "t", aggregate_key="k", aggregate_seq=s) for s in (3, 2)])
    assert client.claim("s", owner="w") == []
    assert _gap_waiting(db) == 1
    client.enqueue("s", {}, tenant="t", aggregate_key="k", aggregate_seq=1)
    assert _drain(client, "s") == [1, 2, 3]
    assert _gap_waiting(db) == 0


def test_a_strict_aggregate_starts_at_0_when_its_first_batch_holds_0(client: Client) -> None:
    declare(client, "s", ["serial"], serial_gap="strict")
    client.enqueue_many("s", [JobSpec({}, "t", aggregate_key="k", aggregate_seq=s) for s in (2, 0)])
    assert _drain(client, "s") == [0]
    client.enqueue("s", {}, tenant="t", aggregate_key="k", aggregate_seq=1)
    assert _drain(client, "s") == [1, 2]
    # An aggregate that started at 1 is past 0, and says where it starts.
    client.enqueue("s", {}, tenant="t", aggregate_key="n", aggregate_seq=1)
    with pytest.raises(InvalidInput, match=r"already past sequence number 0 .*strict aggregate starts at 1"):
        client.enqueue("s", {}, tenant="t", aggregate_key="n", aggregate_seq=0)


def test_a_lowest_aggregate_starts_at_the_lowest_number_of_its_first_batch(client: Client) -> None:
    declare(client, "s", ["serial"], serial_gap="lowest")
    client.enqueue("s", {}, tenant="t", aggregate_key="k", aggregate_seq=7)
    assert _drain(client, "s") == [7]
    with pytest.raises(InvalidInput, match="already past sequence number 3"):
        client.enqueue("s", {}, tenant="t", aggregate_key="k", aggregate_seq=3)


def test_a_retry_racing_its_first_returns_the_first_job(client: Client, db: psycopg.Connection) -> None:
    """The retry waits for the aggregate's lock the first holds, then finds its key."""
    declare(client, "si", ["serial"])
    retried: list[int] = []
    with client.connection() as first_conn, first_conn.transaction():
        [first] = client.enqueue_many("si", [_job(1, "ik1")], conn=first_conn)
        retry = threading.Thread(target=lambda: retried.extend(client.enqueue_many("si", [_job(1, "ik1")])))
        retry.start()
        while not db.execute("SELECT 1 FROM pg_locks WHERE NOT granted").fetchone():
            time.sleep(0.01)
    retry.join()
    assert retried == [first]


def _kill_head(client: Client, poison: str) -> list[int]:
    """Seqs 1-3 of aggregate x on queue ``r``; seq 1 dies as permanent. Returns their ids."""
    declare(client, "r", ["weighted", "serial"], serial_poison=poison)
    ids = client.enqueue_many("r", [JobSpec({}, "t", aggregate_key="x", aggregate_seq=s) for s in (1, 2, 3)])
    [head] = client.claim("r", owner="w")
    client.fail(head, "poison", kind="permanent")
    return ids


def _status(db: psycopg.Connection, job_id: int) -> str:
    row = db.execute("SELECT status FROM fairsched.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


PASSED = r"job \d+ was passed over by aggregate 'x' of tenant 't', .*out of order, .*or discard it$"


def test_a_dead_job_passed_over_is_refused(client: Client, db: psycopg.Connection, fresh_db: str) -> None:
    """Mode skip: seq 1 died and 2 runs; replaying 1 would run it out of order, now (2
    running) or later (2 and 3 done): refused with the reason, from the API and the CLI."""
    first, second, _third = _kill_head(client, "skip")
    [lease] = client.claim("r", owner="w")
    assert lease.id == second
    with pytest.raises(InvalidInput, match=PASSED):
        client.dead_replay(first)
    client.complete(lease)
    assert _drain(client, "r") == [3]
    with pytest.raises(InvalidInput, match=PASSED):
        client.dead_replay(first)
    refused = cli(fresh_db, "dead", "replay", str(first))
    assert refused.exit_code == 1 and "passed over" in one_error_line(refused)
    assert _status(db, first) == "dead"
    # Discarding it resolves it and changes nothing else.
    assert cli(fresh_db, "dead", "discard", str(first)).exit_code == 0
    assert _status(db, first) == "discarded"
    client.enqueue("r", {}, tenant="t", aggregate_key="x", aggregate_seq=4)
    assert _drain(client, "r") == [4]


def test_a_dead_job_passed_over_before_any_later_one_is_not_replayed(client: Client) -> None:
    declare(client, "r", ["serial"], serial_poison="skip")
    first = client.enqueue("r", {}, tenant="t", aggregate_key="x", aggregate_seq=1)
    client.fail(client.claim("r", owner="w")[0], "poison", kind="permanent")
    with pytest.raises(InvalidInput, match=PASSED):
        client.dead_replay(first)


def test_a_blocking_dead_job_replayed_runs_in_its_place(client: Client, db: psycopg.Connection) -> None:
    """Mode block: the dead head holds its aggregate; replayed, it runs first, then the rest."""
    first, _second, _third = _kill_head(client, "block")
    assert client.claim("r", owner="w") == []
    client.dead_replay(first)
    [again] = client.claim("r", owner="w", limit=5)
    assert again.id == first
    client.complete(again)
    assert _drain(client, "r") == [2, 3]
    assert client.aggregates_blocked(queue="r") == []


def test_a_blocking_dead_job_discarded_lets_its_aggregate_move_on(client: Client, fresh_db: str) -> None:
    first, _second, _third = _kill_head(client, "block")
    assert cli(fresh_db, "dead", "discard", str(first)).exit_code == 0
    assert _drain(client, "r") == [2, 3]
    assert client.aggregates_blocked(queue="r") == []
