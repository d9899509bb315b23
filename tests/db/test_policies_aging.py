"""aging: a job of priority p is never overtaken by a job of priority q > p enqueued more
than (q - p) * aging_interval after it, even under a continuous high-priority flood."""

from __future__ import annotations

import threading
from datetime import timedelta

import psycopg
import pytest
from policies_support import declare

from fairsched import Client
from fairsched.engine.enqueue import JobSpec

INTERVAL = 0.25
LOW, HIGH = 0, 4


@pytest.mark.parametrize("policies", [["aging"], ["weighted", "aging"]])
def test_the_aging_bound_holds_under_a_high_priority_flood(
    client: Client, db: psycopg.Connection, policies: list[str]
) -> None:
    declare(client, "a", policies, aging_interval_seconds=INTERVAL)
    client.enqueue_many("a", [JobSpec({}, "t", priority=HIGH) for _ in range(200)])
    low = client.enqueue("a", {"low": True}, tenant="t", priority=LOW)
    stop = threading.Event()

    def flood() -> None:
        while not stop.is_set():
            client.enqueue_many("a", [JobSpec({}, "t", priority=HIGH) for _ in range(20)])
            stop.wait(0.01)

    flooder = threading.Thread(target=flood)
    flooder.start()
    try:
        claimed_low = False
        for _ in range(20_000):
            leases = client.claim("a", owner="w", limit=2)
            client.complete_many(leases)
            if any(lease.id == low for lease in leases):
                claimed_low = True
                break
    finally:
        stop.set()
        flooder.join()
    assert claimed_low
    rows = db.execute(
        """SELECT j.created_at - l.created_at AS later_by
             FROM fairsched.jobs j, fairsched.jobs l
            WHERE l.id = %s AND j.priority = %s AND j.started_at < l.started_at""",
        (low, HIGH),
    ).fetchall()
    overtakers = [row[0] for row in rows]
    bound = timedelta(seconds=(HIGH - LOW) * INTERVAL)
    assert overtakers, "the flood never overtook the low job: the test would prove nothing"
    assert max(overtakers) <= bound, (max(overtakers), bound)
    # The flood went on after the low job ran: it was not starved until the flood ended.
    pending_high = db.execute(
        "SELECT count(*) FROM fairsched.jobs WHERE status = 'pending' AND priority = %s", (HIGH,)
    ).fetchone()
    assert pending_high is not None and pending_high[0] > 0
