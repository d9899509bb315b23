"""Workers whose own clock is wrong (libfaketime) behave the same: leases use database time only.

Of three workers, one runs two hours ahead and one two hours behind (``faketime``),
one on the true clock; workers are killed and paused so leases expire and jobs
move between them. The ledger must show nothing lost, no re-execution before a
lease ran out and no stale completion accepted; every lease the database granted
is exactly the queue's lease in database time.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
from fault_support import ensure_tools
from worker_support import wait_for

from bench.ledger import ledger_drop
from bench.soak import Soak

SKEWS = {0: timedelta(hours=2), 1: timedelta(hours=-2), 2: timedelta(0)}
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
# The library is preloaded into the worker itself: the ``faketime`` command forks,
# and a SIGKILL sent to it would leave the worker running.
FAKED = ({"LD_PRELOAD": LIBFAKETIME, "FAKETIME": "+2h"}, {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": "-2h"}, {})
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", re.MULTILINE)


def logged_skew(log: Path) -> timedelta:
    """How far the worker's wall clock (its first log line) is from ours."""
    match = wait_for(lambda: LOG_TIME.search(log.read_text(errors="replace")), f"a log line in {log}")
    return datetime.fromisoformat(match.group(1)) - datetime.now()


def test_workers_with_wrong_clocks_keep_leases_in_database_time(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    ensure_tools("faketime")
    lease = 2.0
    soak = Soak(
        fresh_db,
        workers=3,
        slots=3,
        rate=40,
        lease_seconds=lease,
        work_seconds=(0.05, 0.4),
        log_dir=tmp_path,
        worker_envs=FAKED,
        keep_ledger=True,
    )
    with soak:
        soak.run_for(2.0)
        for index, skew in SKEWS.items():
            log = tmp_path / f"{soak.workers[index].owner}.log"
            assert abs(logged_skew(log) - skew) < timedelta(minutes=5)
        soak.kill(0)
        soak.run_for(1.5)
        soak.pause(1, lease * 2)
        soak.run_for(1.5)
        soak.kill(1)
        soak.run_for(1.5)
    result = soak.result
    assert result is not None
    print(f"\n[workers at +2h, -2h and true time]\n{result.summary()}")
    report = result.report
    assert (report.lost, report.not_succeeded, report.stale_accepted, report.premature) == (0, 0, 0, 0)
    assert report.longest_overlap_seconds <= lease
    row = db.execute(
        "SELECT count(*), count(*) FILTER (WHERE expires_at - claimed_at <> make_interval(secs => %s))"
        " FROM fairsched_lab.ledger",
        (lease,),
    ).fetchone()
    assert row is not None and row[0] > 0 and row[1] == 0, "every lease: claim time + lease, database time"
    late = db.execute(
        "SELECT count(*) FROM fairsched_lab.ledger l JOIN fairsched_lab.ledger_deaths d USING (owner)"
        " WHERE l.started_at > d.at"
    ).fetchone()
    assert late == (0,), "a killed worker executed nothing after its death"
    ledger_drop(db)
    assert result.ok
