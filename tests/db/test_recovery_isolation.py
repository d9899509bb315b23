"""One queue whose state is bad anyway stops no other queue's recovery, claims or metrics.

The database now refuses out-of-range settings (``migrations/004_bounds.sql``), so each
test reaches the bad state the way only a hand-edited or older database can: it drops the
range constraint first (``IF EXISTS``: on code before the bounds there is none to drop).
A queue whose stack names a policy that is not installed is bad in another way, with no
constraint to pass.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from cli_support import cli
from prometheus_client import REGISTRY
from psycopg import sql
from psycopg.conninfo import make_conninfo

from fairsched import Client, QueueSettings
from fairsched.errors import DatabaseError
from fairsched.observe.snapshot import ExporterSettings, read_snapshot
from fairsched.policy.registry import forget_stacks
from fairsched.worker.sweeper import Sweeper

BAD, GOOD = "bad", "good"
FAST = QueueSettings(backoff_base_seconds=0.0, backoff_max_seconds=0.0, policies=["weighted"])

CORRUPTIONS = {
    "max_runtime_inf": (
        "queues_max_runtime_seconds_range",
        "UPDATE fairsched.queues SET max_runtime_seconds = 'Infinity' WHERE name = 'bad'",
    ),
    "backoff_1e300": (
        "queues_backoff_base_seconds_range",
        "UPDATE fairsched.queues SET backoff_base_seconds = 1e300, backoff_max_seconds = 1e300 "
        "WHERE name = 'bad'",
    ),
    "policy_not_installed": (None, "UPDATE fairsched.queues SET policies = '{nope}' WHERE name = 'bad'"),
}


def failures(queue: str) -> float:
    return REGISTRY.get_sample_value("fairsched_recovery_failures_total", {"queue": queue}) or 0.0


def status(db: psycopg.Connection, job_id: int) -> str:
    row = db.execute("SELECT status FROM fairsched.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


def corrupt(db: psycopg.Connection, how: str) -> None:
    """Put queue ``bad`` in a state its settings' ranges forbid, past the database's checks
    (and past this process's cached policy stacks)."""
    constraint, update = CORRUPTIONS[how]
    if constraint is not None:
        for name in (constraint, constraint.replace("_range", "_check"), "queues_backoff_max_seconds_range"):
            drop = sql.SQL("ALTER TABLE fairsched.queues DROP CONSTRAINT IF EXISTS {}")
            db.execute(drop.format(sql.Identifier(name)))
    db.execute(update)  # type: ignore[arg-type]
    forget_stacks()


@pytest.fixture
def expired(client: Client, db: psycopg.Connection) -> Iterator[dict[str, int]]:
    """A job of each queue, claimed, its lease expired (the clock stepped, not waited for)."""
    ids = {}
    for queue in (BAD, GOOD):
        client.declare_queue(queue, FAST)
        ids[queue] = client.enqueue(queue, {}, tenant="acme")
        assert [lease.id for lease in client.claim(queue, owner="w1")] == [ids[queue]]
    db.execute("UPDATE fairsched.jobs SET lease_expires_at = now() - interval '1 second'")
    yield ids


@pytest.mark.parametrize("how", list(CORRUPTIONS))
def test_a_bad_queue_is_counted_and_every_other_queue_is_recovered_and_claimed(
    client: Client, db: psycopg.Connection, expired: dict[str, int], how: str
) -> None:
    corrupt(db, how)
    before = failures(BAD)
    result = client.recover()
    assert (result.retried, result.expired_by_queue) == (1, {GOOD: 1})
    assert set(result.failed) == {BAD}
    assert failures(BAD) == before + 1 and failures(GOOD) == 0
    assert status(db, expired[GOOD]) == "pending" and status(db, expired[BAD]) == "running"

    [again] = client.claim(GOOD, owner="w2")
    assert again.id == expired[GOOD] and client.heartbeat(again, progress=1)
    with psycopg.connect(client.dsn, autocommit=True) as conn:
        snapshot = read_snapshot(conn, ExporterSettings())
    assert snapshot.queues[GOOD].running == 1 and snapshot.queues[BAD].expired == 1
    assert client.complete(again)


def test_the_sweeper_keeps_sweeping_around_a_bad_queue(
    client: Client, db: psycopg.Connection, expired: dict[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    corrupt(db, "max_runtime_inf")
    woken: list[bool] = []
    sweeper = Sweeper(client, 1.0, lambda: woken.append(True))
    before = failures(BAD)
    for _ in range(2):
        sweeper.sweep()
    assert woken == [True] and failures(BAD) == before + 2
    assert status(db, expired[GOOD]) == "pending" and status(db, expired[BAD]) == "running"
    warnings = [r.getMessage() for r in caplog.records if "recovery of queue bad failed" in r.getMessage()]
    assert len(warnings) == 2 and "out of range" in warnings[0]


def test_a_bad_queue_repaired_with_policy_set_is_recovered_at_the_next_sweep(
    client: Client, db: psycopg.Connection, expired: dict[str, int]
) -> None:
    corrupt(db, "max_runtime_inf")
    assert set(client.recover().failed) == {BAD}
    shown = cli(client.dsn, "policy", "show", BAD)
    assert shown.exit_code == 1 and "set them with `fairsched policy set bad`" in shown.stderr
    repaired = cli(client.dsn, "policy", "set", BAD, "--max-runtime", "3600")
    assert repaired.exit_code == 0, repaired.output
    assert "bad.max_runtime_seconds: inf -> 3600" in repaired.stdout
    result = client.recover()
    assert (result.expired_by_queue, result.failed) == ({BAD: 1}, {})


def test_an_error_no_queue_is_at_fault_for_fails_the_sweep_and_counts_nothing(
    client: Client, db: psycopg.Connection, expired: dict[str, int]
) -> None:
    """Without the privilege to recover, the sweep fails as a whole (as before): no queue
    is counted as failed, and nothing moves."""
    corrupt(db, "max_runtime_inf")
    before = failures(GOOD) + failures(BAD)
    producer_dsn = make_conninfo(client.dsn, options="-c role=fairsched_producer")
    with (
        Client(producer_dsn, pool_size=2) as producer,
        pytest.raises(DatabaseError, match="permission denied"),
    ):
        producer.recover()
    assert failures(GOOD) + failures(BAD) == before
    assert status(db, expired[GOOD]) == "running"


def test_fairsched_recover_names_the_queue_it_could_not_sweep(
    client: Client, db: psycopg.Connection, expired: dict[str, int]
) -> None:
    corrupt(db, "max_runtime_inf")
    result = cli(client.dsn, "recover")
    assert result.exit_code == 1, result.output
    assert "expired leases recovered: 1 back to pending, 0 dead" in result.stdout
    assert "error: queue bad not recovered:" in result.stderr
    assert status(db, expired[GOOD]) == "pending" and status(db, expired[BAD]) == "running"
