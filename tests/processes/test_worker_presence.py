"""The worker registry: a running worker process is listed with its queues and slots, a
clean stop removes it, a killed one ages out; the registry's function refuses bad input."""

from __future__ import annotations

import signal

import psycopg
import pytest
from policies_support import declare
from worker_support import Workers, wait_for

from fairsched import Client
from fairsched.engine.workers import QueueWorkers, workers_by_queue


def _rows(db: psycopg.Connection) -> dict[str, object]:
    return dict(db.execute("SELECT owner, queues FROM fairsched.workers").fetchall())


def test_workers_are_listed_with_their_slots_and_leave_when_they_stop(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    declare(client, "probe", ["fifo"])
    declare(client, "aprobe", ["fifo"])
    first = workers.start({"probe": 3, "aprobe": 1})
    second = workers.start({"probe": 2})
    wait_for(lambda: len(_rows(db)) == 2, "both workers registered")
    assert _rows(db) == {first.owner: {"probe": 3, "aprobe": 1}, second.owner: {"probe": 2}}
    assert workers_by_queue(db) == {"probe": QueueWorkers(2, 5), "aprobe": QueueWorkers(1, 1)}
    assert first.stop() == 0
    assert _rows(db) == {second.owner: {"probe": 2}}
    second.send(signal.SIGKILL)
    second.wait()
    assert list(_rows(db)) == [second.owner]  # a killed worker leaves its row ...
    db.execute("UPDATE fairsched.workers SET seen_at = now() - interval '61 seconds'")
    assert workers_by_queue(db) == {}  # ... which stops counting once it is not renewed


@pytest.mark.parametrize(
    "queues",
    ['"probe"', '{"probe": -1}', '{"probe": 100001}', '{"probe": "4"}', '{"": 1}'],
)
def test_the_registry_refuses_bad_reports(db: psycopg.Connection, queues: str) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="a worker's queues are an object"):
        db.execute("SELECT fairsched.worker_seen('w', %s::jsonb)", [queues])
    assert _rows(db) == {}
