"""The chaos ledger and its checker: what a queue checker counts after faults (as in Jepsen).

A handler under test records each execution in ``fairsched_lab.ledger`` (keyed by
job id and lease token, in database time) when it starts and when its work is
done; the test records each killed worker in ``fairsched_lab.ledger_deaths``. The
tables live in the lab's own schema (:data:`bench.sql.LAB_SCHEMA`), never in
``fairsched``: :func:`ledger_create` makes them, :func:`ledger_drop` removes them. The
checker then compares the ledger with what producers were told (acknowledged
job ids) and with the job table:

- **lost**: acknowledged, never executed to the end (must be 0);
- **duplicated**: executed more than once, with the longest time two executions
  of one job ran at once, against the lease;
- **premature**: a re-execution claimed while the earlier one still ran under
  its first lease (must be 0: the fence and database time forbid it);
- **unexpected**: executed, never enqueued (must be 0);
- **stale-accepted**: a completion accepted with an old token, or twice (must be 0);
- **ordering violations**: within an aggregate, a later sequence number finished
  its successful execution before an earlier one started, or two of them
  overlapped (must be 0 on a serial queue).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise

import psycopg
from psycopg.rows import class_row

from bench.sql import QUERIES
from fairsched.db.connection import operation
from fairsched.engine.lease import Lease


@dataclass(frozen=True)
class Execution:
    """One handler execution as the ledger saw it."""

    job_id: int
    lease_token: int
    owner: str
    tenant: str
    aggregate_key: str | None
    aggregate_seq: int | None
    claimed_at: datetime
    started_at: datetime
    ended_at: datetime | None
    finished: bool


@dataclass(frozen=True)
class LedgerReport:
    """The checker's counts for one run."""

    acknowledged: int
    executions: int
    succeeded: int
    lost: int
    not_succeeded: int
    duplicated: int
    duplicate_executions: int
    longest_overlap_seconds: float
    premature: int
    shortest_redelivery_seconds: float | None
    longest_redelivery_seconds: float | None
    unexpected: int
    stale_accepted: int
    ordering_violations: int
    lease_seconds: float

    @property
    def ok(self) -> bool:
        """No job lost or unfinished, none unexpected, no stale completion, order kept,
        and duplicates only after a lease ran out."""
        return (
            self.lost == 0
            and self.not_succeeded == 0
            and self.unexpected == 0
            and self.stale_accepted == 0
            and self.ordering_violations == 0
            and self.premature == 0
            and self.longest_overlap_seconds <= self.lease_seconds
        )

    def summary(self) -> str:
        """The figures on one line."""
        return (
            f"acknowledged={self.acknowledged} succeeded={self.succeeded} executions={self.executions} "
            f"lost={self.lost} not_succeeded={self.not_succeeded} duplicated={self.duplicated} "
            f"(extra executions {self.duplicate_executions}, longest overlap "
            f"{self.longest_overlap_seconds:.3f}s vs lease {self.lease_seconds:g}s, "
            f"premature {self.premature}, redelivered after {_span(self)}) unexpected={self.unexpected} "
            f"stale_accepted={self.stale_accepted} ordering_violations={self.ordering_violations}"
        )


def _span(report: LedgerReport) -> str:
    low, high = report.shortest_redelivery_seconds, report.longest_redelivery_seconds
    return "-" if low is None or high is None else f"{low:.3f}-{high:.3f}s"


def ledger_create(conn: psycopg.Connection, *, reset: bool = False) -> None:
    """Create the lab's schema and the ledger tables in it (``reset``: empty them)."""
    with operation("ledger_create"):
        conn.execute(QUERIES["ledger_create"])
        if reset:
            conn.execute(QUERIES["ledger_reset"])


def ledger_drop(conn: psycopg.Connection) -> None:
    """Drop the ledger tables, and the lab's schema when nothing else of the lab is in it."""
    with operation("ledger_drop"):
        conn.execute(QUERIES["ledger_drop"])


def ledger_start(conn: psycopg.Connection, lease: Lease) -> None:
    """Record that a handler began executing ``lease``."""
    with operation("ledger_start"):
        conn.execute(
            QUERIES["ledger_start"],
            {
                "job_id": lease.id,
                "token": lease.token,
                "owner": lease.owner,
                "tenant": lease.tenant,
                "aggregate_key": lease.aggregate_key,
                "aggregate_seq": lease.aggregate_seq,
                "claimed_at": lease.started_at,
                "expires_at": lease.expires_at,
            },
        )


def ledger_end(conn: psycopg.Connection, lease: Lease, *, finished: bool) -> None:
    """Record that a handler stopped executing ``lease``: its work done, or abandoned."""
    with operation("ledger_end"):
        conn.execute(QUERIES["ledger_end"], {"job_id": lease.id, "token": lease.token, "finished": finished})


def ledger_death(conn: psycopg.Connection, owner: str) -> None:
    """Record that the worker named ``owner`` was killed (call after it died)."""
    with operation("ledger_death"):
        conn.execute(QUERIES["ledger_death"], {"owner": owner})


def ledger_pause(conn: psycopg.Connection, owner: str) -> int:
    """Record that the worker ``owner`` was just stopped; returns the pause's id."""
    with operation("ledger_pause"):
        row = conn.execute(QUERIES["ledger_pause"], {"owner": owner}).fetchone()
    assert row is not None
    pause_id: int = row[0]
    return pause_id


def ledger_resume(conn: psycopg.Connection, pause_id: int) -> None:
    """Record that a stopped worker is about to continue."""
    with operation("ledger_resume"):
        conn.execute(QUERIES["ledger_resume"], {"id": pause_id})


def ledger_check(
    conn: psycopg.Connection,
    acknowledged: Collection[int],
    *,
    lease_seconds: float,
    serial: bool = False,
) -> LedgerReport:
    """Check the ledger against the ``acknowledged`` job ids and the job table."""
    with operation("ledger_check"), conn.cursor(row_factory=class_row(Execution)) as cur:
        executions = cur.execute(QUERIES["ledger_executions"]).fetchall()
    by_job: dict[int, list[Execution]] = defaultdict(list)
    for execution in executions:
        by_job[execution.job_id].append(execution)
    ids = sorted(set(acknowledged) | set(by_job))
    with operation("ledger_check"):
        rows = conn.execute(QUERIES["ledger_job_states"], {"ids": ids}).fetchall()
        pause_rows = conn.execute(QUERIES["ledger_pause_intervals"]).fetchall()
    pauses: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    for owner, paused_at, resumed_at in pause_rows:
        pauses[owner].append((paused_at, resumed_at))
    states: dict[int, tuple[str, int, list[int]]] = {row[0]: (row[1], row[2], row[3]) for row in rows}

    finished = {job_id for job_id, runs in by_job.items() if any(run.finished for run in runs)}
    duplicated = {job_id: runs for job_id, runs in by_job.items() if len(runs) > 1}
    longest, premature, gaps = _overlaps(duplicated.values(), pauses, lease_seconds)
    stale_accepted = sum(
        1
        for status, token, succeeded in states.values()
        if len(succeeded) > 1 or (succeeded and (status != "succeeded" or succeeded[0] != token))
    )
    winners = [
        run
        for job_id, runs in by_job.items()
        for run in runs
        if job_id in states and states[job_id][0] == "succeeded" and run.lease_token == states[job_id][1]
    ]
    return LedgerReport(
        acknowledged=len(acknowledged),
        executions=len(executions),
        succeeded=sum(1 for job_id in acknowledged if states.get(job_id, ("",))[0] == "succeeded"),
        lost=sum(1 for job_id in acknowledged if job_id not in finished),
        not_succeeded=sum(1 for job_id in acknowledged if states.get(job_id, ("",))[0] != "succeeded"),
        duplicated=len(duplicated),
        duplicate_executions=sum(len(runs) - 1 for runs in duplicated.values()),
        longest_overlap_seconds=longest,
        premature=premature,
        shortest_redelivery_seconds=min(gaps, default=None),
        longest_redelivery_seconds=max(gaps, default=None),
        unexpected=sum(1 for job_id in by_job if job_id not in states),
        stale_accepted=stale_accepted,
        ordering_violations=_ordering_violations(winners) if serial else 0,
        lease_seconds=lease_seconds,
    )


CLOCK_SLACK_SECONDS = 0.05
"""Tolerance between two transactions' ``now()`` (each is its transaction's start)."""


def _overlaps(
    groups: Iterable[list[Execution]],
    pauses: dict[str, list[tuple[datetime, datetime]]],
    lease_seconds: float,
) -> tuple[float, int, list[float]]:
    """The longest time two executions of one job both ran (time a worker spent stopped
    does not count), how many re-executions were claimed while the earlier execution
    still ran under its first lease, and each re-execution's delay after the claim before."""
    longest = 0.0
    premature = 0
    gaps: list[float] = []
    for runs in groups:
        ordered = sorted(runs, key=lambda run: run.claimed_at)
        gaps.extend((b.claimed_at - a.claimed_at).total_seconds() for a, b in pairwise(ordered))
        for i, later in enumerate(ordered):
            for earlier in ordered[:i]:
                end = earlier.ended_at or earlier.started_at
                both_until = min(end, later.ended_at or later.started_at)
                stopped = pauses.get(earlier.owner, []) + pauses.get(later.owner, [])
                longest = max(longest, _running_seconds(later.started_at, both_until, stopped))
                gap = (later.claimed_at - earlier.claimed_at).total_seconds()
                if gap < lease_seconds - CLOCK_SLACK_SECONDS and later.claimed_at < end:
                    premature += 1
    return longest, premature, gaps


def _running_seconds(start: datetime, end: datetime, stopped: list[tuple[datetime, datetime]]) -> float:
    """Seconds of ``[start, end]`` outside every ``stopped`` interval."""
    total = (end - start).total_seconds()
    if total <= 0:
        return 0.0
    cursor = start
    for paused_at, resumed_at in sorted(stopped):
        lo, hi = max(paused_at, cursor), min(resumed_at, end)
        if hi > lo:
            total -= (hi - lo).total_seconds()
            cursor = hi
    return max(0.0, total)


def _ordering_violations(winners: list[Execution]) -> int:
    """Successful executions of one aggregate out of sequence order, or overlapping."""
    by_aggregate: dict[tuple[str, str], list[Execution]] = defaultdict(list)
    for run in winners:
        if run.aggregate_key is not None:
            by_aggregate[(run.tenant, run.aggregate_key)].append(run)
    violations = 0
    for runs in by_aggregate.values():
        ordered = sorted(runs, key=lambda run: run.started_at)
        for earlier, later in pairwise(ordered):
            out_of_order = (later.aggregate_seq or 0) < (earlier.aggregate_seq or 0)
            overlapping = earlier.ended_at is None or later.started_at < earlier.ended_at
            violations += out_of_order or overlapping
    return violations
