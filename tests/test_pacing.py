"""Paced claims (fairsched/pacing.py) and claimers that keep claiming under a backlog:
the pace's arithmetic, then real worker processes."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from apps.probe import create_probe_tables
from worker_support import Workers, statuses, wait_for

from fairsched import Client, JobSpec, QueueSettings, Settings
from fairsched.pacing import BURST_WINDOWS, PACE_MARGIN, Pacer

WINDOW = 0.005


# -- the pace ------------------------------------------------------------------


def test_jobs_no_longer_than_a_window_are_never_paced() -> None:
    pacer = Pacer(50, WINDOW)
    assert not pacer.paced, "nothing finished yet: nothing to pace by"
    pacer.finished(0.0001)
    assert not pacer.paced
    pacer.finished(WINDOW)
    assert not pacer.paced


def test_the_pace_follows_the_running_average_of_run_times() -> None:
    pacer = Pacer(50, WINDOW)
    pacer.finished(0.12)
    assert pacer.paced
    assert pacer.rate == pytest.approx(PACE_MARGIN * 50 / 0.12)
    for _ in range(200):
        pacer.finished(0.5)
    assert pacer.rate == pytest.approx(PACE_MARGIN * 50 / 0.5, rel=1e-3)


def test_paced_claims_come_a_window_apart_and_take_the_starts_earned() -> None:
    pacer = Pacer(50, WINDOW)
    pacer.finished(0.12)  # ~521 starts/s: ~2.6 a window
    burst = BURST_WINDOWS * pacer.rate * WINDOW
    assert pacer.allowance(100.0) == int(burst), "long idle: the saved starts are capped"
    pacer.started(int(burst))
    assert pacer.pause(100.0) == pytest.approx(WINDOW)
    assert pacer.pause(100.0 + WINDOW) == 0.0
    assert pacer.allowance(100.0 + WINDOW) == int(burst - int(burst) + pacer.rate * WINDOW)


def test_short_claims_save_starts_up_to_two_windows_worth() -> None:
    pacer = Pacer(50, WINDOW)
    pacer.finished(0.12)
    pacer.allowance(100.0)
    pacer.started(0)
    per_window = pacer.rate * WINDOW
    assert pacer.allowance(100.0 + 10 * WINDOW) == int(BURST_WINDOWS * per_window)


def test_slow_jobs_pace_one_start_at_a_time() -> None:
    pacer = Pacer(4, WINDOW)
    pacer.finished(2.0)  # 2.5 starts/s
    assert pacer.allowance(100.0) == 1
    pacer.started(1)
    assert pacer.pause(100.0) == pytest.approx(1 / pacer.rate), "the next start is due in 0.4 s"


# -- real workers ----------------------------------------------------------------


@pytest.fixture
def client(fresh_db: str, db: psycopg.Connection) -> Iterator[Client]:
    create_probe_tables(db)
    with Client(fresh_db, settings=Settings()) as c:
        yield c


def claim_sizes(db: psycopg.Connection) -> list[int]:
    """Jobs per claim, in claim order (a claim's jobs share its owner and start time)."""
    rows = db.execute(
        "SELECT count(*) FROM fairsched.jobs GROUP BY lease_owner, started_at ORDER BY started_at"
    ).fetchall()
    return [n for (n,) in rows]


def test_a_backlog_of_long_jobs_is_claimed_at_the_pace_slots_free(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    """Unpaced, the 20 slots that start together free together and are claimed again in
    one claim of ~20, run time after run time."""
    client.declare_queue("probe", QueueSettings(lease_seconds=30))
    client.enqueue_many("probe", [JobSpec({"sleep": 0.3}, "t") for _ in range(100)])
    workers.start({"probe": 20})
    wait_for(lambda: statuses(db) == {"succeeded": 100}, "100 jobs succeeded")
    first, *paced = claim_sizes(db)
    assert first == 20, "the first claim fills every slot: no run time known yet"
    assert paced and max(paced) <= 2, f"paced claims take a start or two each, got {paced}"


def test_a_short_weighted_claim_under_a_backlog_claims_again_at_once(
    client: Client, db: psycopg.Connection, workers: Workers
) -> None:
    """A tenant-first claim deals jobs to a tenant that has none left (its share row still
    active, held by another transaction so that no claim can take it out), as many as its
    cap of 2 leaves room for: every claim of 8 comes back with 6 while another tenant has
    200 jobs waiting. A claimer that read a short claim as "nothing left" would sleep
    until its next poll, a minute here."""
    client.declare_queue("probe", QueueSettings(lease_seconds=30, policies=["weighted"], notify=False))
    client.set_tenant_share("probe", "a-dry", weight=1, cap=2)
    db.execute("UPDATE fairsched.tenant_shares SET active = true, pass = 0 WHERE tenant = 'a-dry'")
    client.enqueue_many("probe", [JobSpec({}, "big") for _ in range(200)])
    with psycopg.connect(db.info.dsn) as holder:
        holder.execute("SELECT FROM fairsched.tenant_shares WHERE tenant = 'a-dry' FOR UPDATE")
        workers.start(
            {"probe": 8},
            settings={"FAIRSCHED_POLL_INTERVAL_SECONDS": "60", "FAIRSCHED_RECOVERY_INTERVAL_SECONDS": "60"},
        )
        wait_for(lambda: statuses(db) == {"succeeded": 200}, "200 jobs succeeded", timeout=20)
        sizes = claim_sizes(db)
        active = holder.execute("SELECT active FROM fairsched.tenant_shares WHERE tenant = 'a-dry'")
        active = active.fetchone()
    assert active == (True,), "the dry tenant stayed in the selection throughout"
    assert max(sizes) <= 6, f"the dry tenant's room left every claim short, got {sizes}"
