"""A change of ``aging_interval_seconds`` re-keys the queued backlog: the jobs already
waiting are claimed in the order the new interval gives, as if enqueued under it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from cli_support import cli
from fairsched_policies.aging import aging_rekey
from policies_support import declare

from fairsched import Client, JobSpec, QueueSettings

OLD, NEW = 1000.0, 0.001
"""Under OLD one priority level is worth 1000 s of waiting (priority decides); under
NEW a millisecond (enqueue time decides)."""

LOW, HIGH = 0, 2

STRAY_KEYS = """
SELECT count(*) FROM fairsched.jobs j JOIN fairsched.queues q ON q.name = j.queue_name
 WHERE j.status IN ('waiting', 'pending', 'running')
   AND j.aging_key <> extract(epoch FROM j.created_at) - j.priority * q.aging_interval_seconds
"""


def backlog(client: Client, queue: str) -> tuple[int, list[int], list[int]]:
    """A low job claimed (running) first, two more low jobs, then three high ones later;
    returns (running low, pending low, high)."""
    running = client.enqueue(queue, {"n": 0}, tenant="t", priority=LOW)
    assert [lease.id for lease in client.claim(queue, owner="w")] == [running]
    low = client.enqueue_many(queue, [JobSpec({"n": i}, "t", priority=LOW) for i in (1, 2)])
    time.sleep(0.05)  # 50 s under NEW's scale (vs 2 ms of priority), nothing under OLD's
    high = client.enqueue_many(queue, [JobSpec({"n": i}, "t", priority=HIGH) for i in (3, 4, 5)])
    return running, low, high


def claim_order(client: Client, queue: str) -> list[int]:
    order: list[int] = []
    while leases := client.claim(queue, owner="w"):
        order += [lease.id for lease in leases]
        client.complete_many(leases)
    return order


def via_policy_set(dsn: str, tmp_path: Path, queue: str, policies: list[str]) -> None:
    result = cli(dsn, "policy", "set", queue, "--aging-interval", str(NEW))
    assert result.exit_code == 0, result.output


def via_config_apply(dsn: str, tmp_path: Path, queue: str, policies: list[str]) -> None:
    path = tmp_path / "fairsched.toml"
    stack = ", ".join(f'"{p}"' for p in policies)
    path.write_text(
        f"[queues.{queue}]\npolicies = [{stack}]\naging_interval_seconds = {NEW}\n"
        "backoff_base_seconds = 0.0\nbackoff_max_seconds = 0.0\nmax_attempts = 3\n"
    )
    result = cli(dsn, "config", "apply", str(path))
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("change", [via_policy_set, via_config_apply])
@pytest.mark.parametrize("policies", [["aging"], ["weighted", "aging"]])
def test_the_backlog_follows_the_new_interval(
    client: Client,
    db: psycopg.Connection,
    fresh_db: str,
    tmp_path: Path,
    change: Callable[[str, Path, str, list[str]], None],
    policies: list[str],
) -> None:
    declare(client, "a", policies, aging_interval_seconds=OLD)
    running, low, high = backlog(client, "a")

    change(fresh_db, tmp_path, "a", policies)
    assert db.execute(STRAY_KEYS).fetchone() == (0,), "every queued job keyed by the new interval"
    # The running job comes back (its lease expired) keyed by the new interval too.
    db.execute(
        "UPDATE fairsched.jobs SET lease_expires_at = now() - interval '1 s' WHERE id = %s", (running,)
    )
    client.recover()
    # Under OLD the high jobs would go first; under NEW enqueue time decides.
    assert claim_order(client, "a") == [running, *low, *high]


def test_without_a_change_the_old_interval_orders_the_backlog(client: Client) -> None:
    """The control: the same backlog under OLD runs the high jobs first."""
    declare(client, "a", ["aging"], aging_interval_seconds=OLD)
    _running, low, high = backlog(client, "a")
    assert claim_order(client, "a") == [*high, *low]


def test_rekey_goes_in_bounded_batches_and_keys_as_enqueue_does(
    client: Client, db: psycopg.Connection, fresh_db: str
) -> None:
    declare(client, "a", ["aging"], aging_interval_seconds=OLD)
    declare(client, "b", ["aging"], aging_interval_seconds=OLD)
    client.enqueue_many("a", [JobSpec({"n": i}, "t", priority=i % 3 - 1) for i in range(25)])
    client.enqueue_many("b", [JobSpec({"n": i}, "t", priority=1) for i in range(5)])
    # The setting changed behind fairsched's back: nothing re-keyed yet.
    db.execute("UPDATE fairsched.queues SET aging_interval_seconds = 7 WHERE name IN ('a', 'b')")
    assert db.execute(STRAY_KEYS).fetchone() == (17 + 5,)  # priority 0's keys agree (8 in a)

    with psycopg.connect(fresh_db, autocommit=True) as conn:
        done = aging_rekey(conn, "a", batch=4)
    assert done.rekeyed == 17
    assert done.batches >= 25 // 4, "at most 4 rows per transaction"
    stray = db.execute(STRAY_KEYS).fetchone()
    assert stray == (5,), "queue b is not touched"
    # A job enqueued now gets exactly the key the re-key gives.
    late = client.enqueue("a", {}, tenant="t", priority=2)
    assert db.execute(STRAY_KEYS).fetchone() == (5,)
    row = db.execute("SELECT aging_key FROM fairsched.jobs WHERE id = %s", (late,)).fetchone()
    formula = db.execute(
        "SELECT extract(epoch FROM created_at) - priority * 7::float8 FROM fairsched.jobs WHERE id = %s",
        (late,),
    ).fetchone()
    assert row == formula


@pytest.mark.parametrize("how", ["declare", "policy set"])
def test_jobs_queued_before_aging_joined_the_stack_are_keyed_by_their_priority(
    client: Client, db: psycopg.Connection, fresh_db: str, how: str
) -> None:
    """A stack without aging leaves each job's key at its enqueue time: when aging joins
    the stack, the queued jobs get the keys their priorities give (the high one, enqueued
    last, is claimed first)."""
    client.declare_queue("joins", QueueSettings(policies=["fifo"]))
    low = client.enqueue("joins", {}, tenant="t", priority=LOW)
    high = client.enqueue("joins", {}, tenant="t", priority=HIGH)
    assert db.execute(STRAY_KEYS.replace("q.aging_interval_seconds", "60")).fetchone() == (1,)
    if how == "declare":  # the default interval (60 s): only the stack changes
        client.declare_queue("joins", QueueSettings(policies=["aging"]))
    else:
        result = cli(fresh_db, "policy", "set", "joins", "--policies", "aging")
        assert result.exit_code == 0, result.output
    assert db.execute(STRAY_KEYS).fetchone() == (0,)
    assert claim_order(client, "joins") == [high, low]
