"""The bench's commit probe times real commits on the server's clock, and the noisy
neighbour sets the small tenants' slowest waits beside the stalls it met."""

from __future__ import annotations

import time

import psycopg
import pytest

from bench.bench import NoisyRun
from bench.commitprobe import STALL_SECONDS, Commit, commit_probe, db_clock, overlapping, stalls


def test_a_commit_held_up_on_the_server_is_recorded_as_a_stall_when_it_happened(empty_db: str) -> None:
    hold = 0.3
    with commit_probe(empty_db, interval=0.005) as commits, psycopg.connect(empty_db) as blocker:
        time.sleep(0.1)  # a few quick commits first
        # The probe's next commit waits for this row lock as a commit waits for a
        # stalled WAL flush: the client sees one slow round trip.
        blocker.execute("SELECT n FROM fairsched_lab.probe_commits WHERE id = 1 FOR UPDATE")
        held_from = db_clock(blocker)
        time.sleep(hold)
        held_to = db_clock(blocker)
        blocker.rollback()
        time.sleep(0.1)
    slow = stalls(commits)
    assert len(slow) == 1, commits
    (stall,) = slow
    assert stall.seconds >= hold * 0.8
    # On the database's clock, the stalled commit spans the time the row was held.
    assert stall.at <= held_from + 0.05 and stall.end >= held_to - 0.05, (stall, held_from, held_to)
    quick = [c for c in commits if c is not stall]
    assert len(quick) >= 10 and all(c.seconds < STALL_SECONDS for c in quick)
    assert [c.at for c in commits] == sorted(c.at for c in commits)


def test_a_probe_whose_connection_was_terminated_raises_when_its_block_ends(empty_db: str) -> None:
    # The probe's error surfaces as its block ends.
    with (
        pytest.raises(psycopg.OperationalError),
        commit_probe(empty_db, interval=0.005) as commits,
        psycopg.connect(empty_db) as admin,
    ):
        time.sleep(0.05)
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        time.sleep(0.1)
    assert commits, "the probe committed before its connection was terminated"


def test_overlapping_counts_a_span_that_touches_a_commit() -> None:
    commit = Commit(at=10.0, seconds=0.5)
    assert overlapping((9.0, 10.0), [commit])
    assert overlapping((10.2, 10.3), [commit])
    assert overlapping((10.5, 11.0), [commit])
    assert not overlapping((9.0, 9.99), [commit])
    assert not overlapping((10.51, 11.0), [commit])
    assert not overlapping((9.0, 11.0), [])


def test_the_share_of_the_tail_that_met_a_stall_reads_only_the_small_tenants_top_percent() -> None:
    # 98 small-tenant waits of 4 ms, one per 0.1 s, and two of 150 ms: the p99's rank and
    # the one above it are the two slow waits. Only the first met the 120 ms stall.
    rows: list[tuple[str, float, float]] = [("small0", 0.004, 100.0 + i / 10) for i in range(98)]
    rows += [("small1", 0.15, 130.0), ("small2", 0.15, 140.0)]
    rows += [("big", 0.15, 135.0)]  # the flood's waits are not the small tenants'
    quick = [Commit(100.0 + i / 50, 0.001) for i in range(2000)]
    stall = Commit(129.9, 0.12)
    run = NoisyRun.of(rows, (100.0, 110.0), 0, [*quick, stall])
    assert run.tail_stalled == pytest.approx(0.5)
    assert NoisyRun.of(rows, (100.0, 110.0), 0, quick).tail_stalled == 0
    assert NoisyRun.of(rows, (100.0, 110.0), 0, [*quick, stall, Commit(139.9, 0.2)]).tail_stalled == 1
