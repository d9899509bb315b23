"""The worker registry: a running worker process is listed with its queues, slots and
claims, a clean stop removes it, a killed one ages out; reports become claim rates; the
registry's function refuses bad input."""

from __future__ import annotations

import signal

import psycopg
import pytest
from policies_support import declare
from worker_support import Workers, wait_for

from fairsched import Client, JobSpec
from fairsched.engine.workers import workers_by_queue

REPORT = "SELECT fairsched.worker_seen(%s, %s::jsonb, %s::jsonb)"


def _rows(db: psycopg.Connection) -> dict[str, object]:
    return dict(db.execute("SELECT owner, queues FROM fairsched.workers").fetchall())


def _claimed(db: psycopg.Connection, owner: str, queue: str) -> str | None:
    row = db.execute(
        "SELECT claimed ->> %s FROM fairsched.workers WHERE owner = %s", [queue, owner]
    ).fetchone()
    return None if row is None else str(row[0])


def test_workers_are_listed_with_their_slots_and_leave_when_they_stop(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client, "probe", ["fifo"])
    declare(client, "aprobe", ["fifo"])
    first = workers.start({"probe": 3, "aprobe": 1})
    second = workers.start({"probe": 2})
    wait_for(lambda: len(_rows(db)) == 2, "both workers registered")
    assert _rows(db) == {first.owner: {"probe": 3, "aprobe": 1}, second.owner: {"probe": 2}}
    live = {queue: (w.workers, w.slots) for queue, w in workers_by_queue(db).items()}
    assert live == {"probe": (2, 5), "aprobe": (1, 1)}
    assert first.stop() == 0
    assert _rows(db) == {second.owner: {"probe": 2}}
    second.send(signal.SIGKILL)
    second.wait()
    assert list(_rows(db)) == [second.owner]  # a killed worker leaves its row ...
    db.execute("UPDATE fairsched.workers SET seen_at = now() - interval '61 seconds'")
    assert workers_by_queue(db) == {}  # ... which stops counting once it is not renewed


def test_claims_reported_become_the_queues_rate(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    """The jobs claimed between a worker's two reports over the time between them; a
    worker reports its claims since it started."""
    db.execute(REPORT, ["w1", '{"q": 4}', '{"q": 100}'])
    db.execute("UPDATE fairsched.workers SET seen_at = now() - interval '10 seconds'")
    db.execute(REPORT, ["w1", '{"q": 4}', '{"q": 350}'])
    [rate] = [w.claims_per_second for w in workers_by_queue(db).values()]
    assert 24 <= rate <= 25  # 250 jobs in 10 s (and the few ms of this test)
    declare(client, "probe", ["fifo"])
    client.enqueue_many("probe", [JobSpec({}, "t") for _ in range(30)])
    worker = workers.start({"probe": 2})
    wait_for(
        lambda: _claimed(db, worker.owner, "probe") == "30", "the worker reports its 30 claims", timeout=40
    )


@pytest.mark.parametrize(
    "queues, claimed",
    [
        ('"probe"', "{}"),
        ('{"probe": -1}', "{}"),
        ('{"probe": 100001}', "{}"),
        ('{"probe": "4"}', "{}"),
        ('{"": 1}', "{}"),
        ('{"probe": 1}', '{"other": 1}'),
        ('{"probe": 1}', '{"probe": -1}'),
        ('{"probe": 1}', '{"probe": 1.5}'),
    ],
)
def test_the_registry_refuses_bad_reports(db: psycopg.Connection, queues: str, claimed: str) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"a worker's (queues|claim counts) are"):
        db.execute(REPORT, ["w", queues, claimed])
    assert _rows(db) == {}
