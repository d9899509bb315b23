"""Worker processes killed and paused under load, checked with the ledger (bench.ledger).

Each test runs real ``fairsched worker`` processes executing the soak handler,
which records every execution (job id + lease token, database time); faults are
real signals. Each prints the checker's figures and asserts the counts.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from bench.soak import Soak, SoakResult, run_soak


def show(name: str, result: SoakResult) -> None:
    print(f"\n[{name}]\n{result.summary()}")


def test_repeated_kill9_under_load_loses_nothing_and_bounds_duplicates(fresh_db: str, tmp_path: Path) -> None:
    soak = Soak(fresh_db, workers=3, slots=4, rate=60, lease_seconds=2.0, seed=11, log_dir=tmp_path)
    with soak:
        for round_ in range(9):
            soak.run_for(1.0)
            soak.kill(round_ % 3)
        soak.run_for(1.0)
    result = soak.result
    assert result is not None
    show("kill -9 x9", result)
    report = result.report
    assert result.crashes == 9
    assert (report.lost, report.not_succeeded, report.unexpected, report.stale_accepted) == (0, 0, 0, 0)
    assert report.duplicate_executions >= 1, "kills mid-job re-run those jobs"
    assert report.premature == 0
    assert report.longest_overlap_seconds <= report.lease_seconds
    assert result.ok


def test_paused_workers_resumed_after_their_lease_complete_nothing(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    soak = Soak(
        fresh_db, workers=3, slots=3, rate=20, lease_seconds=1.5, work_seconds=(0.4, 0.8), log_dir=tmp_path
    )
    with soak:
        soak.run_for(2.0)
        for i in range(3):
            soak.pause(i, 1.5 * 2.2)
            soak.run_for(0.5)
    result = soak.result
    assert result is not None
    show("SIGSTOP past the lease x3", result)
    report = result.report
    assert result.pauses == 3
    assert result.stale_rejections >= 3, "each paused worker held a job whose completion is refused"
    row = db.execute(
        "SELECT count(*) FROM fairsched.job_events WHERE kind = 'stale_completion_rejected'"
    ).fetchone()
    assert row is not None and row[0] == result.stale_rejections
    assert (report.lost, report.stale_accepted, report.premature) == (0, 0, 0)
    assert report.duplicate_executions >= 3
    assert report.longest_overlap_seconds <= report.lease_seconds
    assert result.ok


def test_soak_with_random_kills_and_pauses(fresh_db: str, tmp_path: Path) -> None:
    result = run_soak(fresh_db, 20, seed=7, log_dir=tmp_path, chaos_every=(1.0, 2.5), pause_share=0.3)
    show("soak 20s", result)
    assert result.crashes >= 1 and result.pauses >= 1
    assert result.lost == 0
    assert result.report.stale_accepted == 0
    assert result.longest_duplicate_window_seconds <= result.report.lease_seconds
    assert result.ok


@pytest.mark.parametrize("role", [None, "fairsched_worker"])
def test_serial_aggregates_keep_their_order_through_kills_and_pauses(
    fresh_db: str, tmp_path: Path, role: str | None
) -> None:
    """With ``role``, the workers run as that role: no table writes, every transition and
    the recovery of the killed workers' leases through functions (migrations/008_roles.sql)."""
    soak = Soak(
        fresh_db,
        workers=3,
        slots=4,
        rate=40,
        lease_seconds=2.0,
        seed=5,
        log_dir=tmp_path,
        policies=("weighted", "aging", "serial"),
        aggregates=3,
        worker_dsn=make_conninfo(fresh_db, options=f"-c role={role}") if role else None,
    )
    with soak:
        for round_ in range(4):
            soak.run_for(1.5)
            soak.kill(round_ % 3)
        soak.pause(1, 2.0 * 2)
        soak.run_for(1.0)
    result = soak.result
    assert result is not None
    show(
        f"serial aggregates (weighted + aging + serial), kill -9 x4, SIGSTOP x1, as {role or 'owner'}", result
    )
    report = result.report
    assert report.ordering_violations == 0
    assert (report.lost, report.stale_accepted, report.premature) == (0, 0, 0)
    assert result.ok


def test_the_ordering_checker_sees_aggregates_run_without_the_serial_policy(
    fresh_db: str, tmp_path: Path
) -> None:
    soak = Soak(
        fresh_db, workers=2, slots=4, rate=60, seed=5, log_dir=tmp_path, policies=("fifo",), aggregates=1
    )
    with soak:
        soak.run_for(4.0)
    result = soak.result
    assert result is not None
    print(f"\n[aggregates on a fifo queue] ordering violations: {result.report.ordering_violations}")
    assert result.report.ordering_violations > 0
    assert not result.ok
