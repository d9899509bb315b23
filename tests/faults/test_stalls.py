"""Bounded stalls: a worker frozen (SIGSTOP) inside a transaction holds nobody up.

Real ``fairsched worker`` processes run the probe app. One of them is started with a
test hook (:func:`fairsched.worker.finisher.held_for_test`) that keeps its first claim
or first completion transaction open after the statement; the test freezes it there
with SIGSTOP, with its idle-in-transaction limit short. Then: the server ends the
frozen session (its backend is gone), the jobs it had locked are claimed or
recovered and completed by the other workers while it is still frozen, and after
SIGCONT its stale work changes nothing (its completion is refused by the fence).
Every wait is bounded; nothing asserts on wall-clock time.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import psycopg
from apps.probe import create_probe_tables
from worker_support import WorkerProcess, running_workers, statuses, wait_for

from fairsched import Client, JobSpec, QueueSettings

JOBS = 40
IDLE_TIMEOUT = {"FAIRSCHED_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": "2"}
"""The frozen worker's limit: short for the test, long enough to freeze it inside."""
HOLD_SECONDS = "6"
"""How long the hook keeps the transaction open (the server ends it first)."""


def enqueue_probe_jobs(dsn: str, db: psycopg.Connection, *, sleep: float) -> list[int]:
    create_probe_tables(db)
    with Client(dsn) as client:
        client.declare_queue(
            "probe", QueueSettings(lease_seconds=2, backoff_base_seconds=0.0, backoff_max_seconds=0.0)
        )
        specs = [JobSpec({"record": True, "sleep": sleep}, tenant=f"t{i % 3}") for i in range(JOBS)]
        return client.enqueue_many("probe", specs)


def held_backend(db: psycopg.Connection) -> int | None:
    """The backend of a worker session sitting idle inside a transaction that wrote."""
    row = db.execute(
        "SELECT pid FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = 'fairsched-worker'"
        "   AND state = 'idle in transaction' AND backend_xid IS NOT NULL"
        "   AND state_change < clock_timestamp() - interval '0.2 s'"
    ).fetchone()
    return None if row is None else int(row[0])


def backend_alive(db: psycopg.Connection, pid: int) -> bool:
    return db.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() is not None


def locked_jobs(db: psycopg.Connection, ids: list[int]) -> set[int]:
    """Which of ``ids`` another transaction holds row locks on (looked at, nothing kept)."""
    with db.transaction():
        free = db.execute(
            "SELECT id FROM fairsched.jobs WHERE id = ANY(%s) FOR UPDATE SKIP LOCKED", (ids,)
        ).fetchall()
    return set(ids) - {row[0] for row in free}


def is_stopped(worker: WorkerProcess) -> bool:
    """The process is in state T (stopped by a signal)."""
    stat = Path(f"/proc/{worker.pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def freeze_inside_held_transaction(db: psycopg.Connection, worker: WorkerProcess) -> int:
    """SIGSTOP ``worker`` once its held transaction is open; returns that session's backend pid."""
    backend: int = wait_for(lambda: held_backend(db), "the worker inside its held transaction")
    worker.send(signal.SIGSTOP)
    wait_for(lambda: is_stopped(worker), "the worker stopped")
    assert held_backend(db) == backend, "the worker froze while its transaction was open"
    return backend


def statements_running(db: psycopg.Connection) -> bool:
    """Whether another client session of this database is running a statement."""
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND backend_type = 'client backend' AND state = 'active' AND pid <> pg_backend_pid()"
    ).fetchone()
    return row is not None and row[0] > 0


def column(db: psycopg.Connection, query: str, *params: Any) -> list[Any]:
    return [row[0] for row in db.execute(query, params).fetchall()]


def test_a_worker_frozen_inside_a_claim_transaction_holds_nobody_up(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    ids = enqueue_probe_jobs(fresh_db, db, sleep=0.02)
    with running_workers(fresh_db, tmp_path) as workers:
        frozen = workers.start(
            {"probe": 8}, settings={**IDLE_TIMEOUT, "FAIRSCHED_TEST_HOLD_CLAIM_SECONDS": HOLD_SECONDS}
        )
        backend = freeze_inside_held_transaction(db, frozen)
        claimed = locked_jobs(db, ids)
        assert len(claimed) == 8, "the frozen claim holds the jobs it leased, uncommitted"

        others = [workers.start({"probe": 4}) for _ in range(2)]
        wait_for(lambda: not backend_alive(db, backend), "the server ends the frozen idle transaction")
        wait_for(lambda: statuses(db) == {"succeeded": JOBS}, "every job done, those it claimed too")
        assert is_stopped(frozen), "all of it happened while the worker was frozen"
        assert not locked_jobs(db, ids)

        frozen.send(signal.SIGCONT)
        wait_for(lambda: "claiming probe failed" in frozen.output(), "its claim's commit fails")
        assert frozen.stop() == 0
        for other in others:
            assert other.stop() == 0

    assert statuses(db) == {"succeeded": JOBS}
    owners = column(db, "SELECT DISTINCT lease_owner FROM fairsched.attempts")
    assert frozen.owner not in owners, "the rolled-back claim leased nothing"
    assert column(db, "SELECT count(*) FROM public.probe_events WHERE pid = %s", frozen.pid) == [0]
    ends = column(db, "SELECT count(*) FROM public.probe_events WHERE event = 'end' GROUP BY job_id")
    assert sorted(ends) == [1] * JOBS, "each job ran once"


def test_a_worker_frozen_inside_a_completion_transaction_holds_nobody_up(
    fresh_db: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    ids = enqueue_probe_jobs(fresh_db, db, sleep=0.05)
    with running_workers(fresh_db, tmp_path) as workers:
        frozen = workers.start(
            {"probe": 4}, settings={**IDLE_TIMEOUT, "FAIRSCHED_TEST_HOLD_COMPLETION_SECONDS": HOLD_SECONDS}
        )
        backend = freeze_inside_held_transaction(db, frozen)
        # A statement the worker sent just before it stopped still runs to its end: read
        # its leases once none is left running.
        wait_for(lambda: not statements_running(db), "the frozen worker's last statements done")
        theirs = set(
            column(
                db,
                "SELECT id FROM fairsched.jobs WHERE status = 'running' AND lease_owner = %s",
                frozen.owner,
            )
        )
        completing = locked_jobs(db, sorted(theirs))
        assert completing, "the held completion transaction locks the jobs it completed"

        others = [workers.start({"probe": 4}) for _ in range(2)]
        wait_for(lambda: not backend_alive(db, backend), "the server ends the frozen idle transaction")
        wait_for(lambda: statuses(db) == {"succeeded": JOBS}, "every job done, the frozen worker's too")
        assert is_stopped(frozen), "all of it happened while the worker was frozen"
        expired = column(
            db,
            "SELECT job_id FROM fairsched.attempts WHERE lease_owner = %s AND outcome = 'expired'",
            frozen.owner,
        )
        assert set(expired) == theirs, "recovery moved every lease of the frozen worker on"
        lag = column(
            db,
            "SELECT max(extract(epoch FROM a.finished_at - a.claimed_at) - 2)"
            "  FROM fairsched.attempts AS a WHERE a.lease_owner = %s AND a.outcome = 'expired'",
            frozen.owner,
        )[0]
        print(
            f"\n[frozen in a completion] {len(theirs)} leases ({len(completing)} locked by the held "
            f"transaction) recovered at most {float(lag):.2f} s after their lease ended"
        )

        frozen.send(signal.SIGCONT)
        rejected_query = (
            "SELECT DISTINCT job_id FROM fairsched.job_events"
            " WHERE kind = 'stale_completion_rejected' AND detail->>'owner' = %s"
        )
        wait_for(
            lambda: set(column(db, rejected_query, frozen.owner)) == theirs,
            "the frozen worker's completions, sent after SIGCONT, refused by the fence",
        )
        assert frozen.stop() == 0
        for other in others:
            assert other.stop() == 0
        assert "lease lost before its completion was recorded" in frozen.output()

    assert statuses(db) == {"succeeded": JOBS}
    owners = column(db, "SELECT lease_owner FROM fairsched.jobs WHERE id = ANY(%s)", sorted(theirs))
    assert frozen.owner not in owners, "no stale completion was accepted"
    succeeded = column(
        db, "SELECT count(*) FROM fairsched.attempts WHERE outcome = 'succeeded' GROUP BY job_id"
    )
    assert sorted(succeeded) == [1] * JOBS
    assert set(ids) >= theirs
