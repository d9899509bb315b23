"""Cancellation: withdraw a job that has not run, or ask a running one to stop.

A pending or waiting job becomes ``cancelled`` at once; a cancelled head goes to its
queue's policies to settle (an aggregate held in order moves past it; in gap mode
``strict`` a cancelled waiting number counts as passed). A running job gets a
request: its worker sees it at the next heartbeat or progress call, the handler stops,
and the fenced failure path ends the attempt ``cancelled``. Any way a requested job
leaves ``running`` other than succeeding (failure, release, lease expiry) ends it
``cancelled``; a completion that came first stands. A finished job is not changed.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg

from fairsched import metrics
from fairsched.db.connection import operation
from fairsched.db.sql import QUERIES
from fairsched.engine.settle import jobs_settle
from fairsched.errors import InvalidInput, JobFinished, JobNotFound

MAX_IDS = 10_000
"""Most job ids one cancel takes."""
BATCH = 1_000
"""Jobs one transaction of a tenant's cancel changes."""


def check_ids(ids: Sequence[object]) -> list[int]:
    """Job ids as a cancel takes them: 1 to :data:`MAX_IDS` positive 64-bit integers."""
    if not 1 <= len(ids) <= MAX_IDS:
        raise InvalidInput(f"cancel takes 1 to {MAX_IDS} job ids, got {len(ids)}")
    for job_id in ids:
        if isinstance(job_id, bool) or not isinstance(job_id, int) or not 1 <= job_id < 2**63:
            raise InvalidInput(f"a job id is an integer from 1 to 2^63-1, got {job_id!r}")
    return [int(job_id) for job_id in ids]  # type: ignore[call-overload]


class CancelOutcome(enum.StrEnum):
    """What a cancel did to one job."""

    CANCELLED = "cancelled"
    """It had not run (pending or waiting): it is cancelled now."""
    REQUESTED = "requested"
    """It runs: its worker is asked to stop, and the job ends cancelled unless it succeeds first."""


@dataclass
class CancelResult:
    """What a cancel of many jobs did: ids by outcome, and the finished jobs it left alone
    (with their status)."""

    cancelled: list[int] = field(default_factory=list)
    requested: list[int] = field(default_factory=list)
    finished: dict[int, str] = field(default_factory=dict)
    not_found: list[int] = field(default_factory=list)

    def add(self, other: CancelResult) -> None:
        self.cancelled += other.cancelled
        self.requested += other.requested
        self.finished.update(other.finished)
        self.not_found += other.not_found


def jobs_cancel(conn: psycopg.Connection, ids: Sequence[int], *, by: str) -> CancelResult:
    """Cancel jobs by id in one transaction (see the module docstring); ``by`` names who
    did it in each job's audit trail."""
    result = CancelResult()
    if not ids:
        return result
    with conn.transaction():
        with operation("jobs_cancel"):
            rows = conn.execute(QUERIES["jobs_cancel"], {"ids": list(ids), "by": by}).fetchall()
        heads = []
        for job_id, outcome, status, queue in rows:
            if outcome == CancelOutcome.CANCELLED:
                result.cancelled.append(job_id)
                if status == "pending":
                    heads.append(job_id)
            elif outcome == CancelOutcome.REQUESTED:
                result.requested.append(job_id)
            else:
                result.finished[job_id] = status
                continue
            metrics.CANCELLATIONS.labels(queue, outcome).inc()
        # A cancelled head lets its aggregate's next job run; a waiting job leaves its
        # aggregate as it is (its number counts as passed when the aggregate gets there).
        jobs_settle(conn, sorted(heads), left_running=False)
    found = {row[0] for row in rows}
    result.not_found = [job_id for job_id in dict.fromkeys(ids) if job_id not in found]
    return result


def job_cancel(conn: psycopg.Connection, job_id: int, *, by: str) -> CancelOutcome:
    """Cancel one job; :class:`JobNotFound` for an unknown id, :class:`JobFinished` for a
    job that already finished (nothing changes)."""
    result = jobs_cancel(conn, [job_id], by=by)
    if result.not_found:
        raise JobNotFound(f"no job with id {job_id}")
    if result.finished:
        status = result.finished[job_id]
        raise JobFinished(f"job {job_id} already finished ({status}): there is nothing to cancel")
    return CancelOutcome.CANCELLED if result.cancelled else CancelOutcome.REQUESTED


def tenant_cancel(conn: psycopg.Connection, queue: str, tenant: str, *, by: str) -> CancelResult:
    """Cancel every unfinished job of ``tenant`` on ``queue``, :data:`BATCH` jobs a
    transaction, until none is left that a cancel changes. Jobs enqueued meanwhile may
    be cancelled too or not."""
    total = CancelResult()
    while True:
        with operation("jobs_cancel_pick"):
            rows = conn.execute(
                QUERIES["jobs_cancel_pick"], {"queue": queue, "tenant": tenant, "batch": BATCH}
            ).fetchall()
        if not rows:
            return total
        batch = jobs_cancel(conn, [row[0] for row in rows], by=by)
        total.add(batch)
        if not (batch.cancelled or batch.requested):
            return total  # only jobs that finished meanwhile: nothing left to change


def cancel_requested(conn: psycopg.Connection, ids: Sequence[int], *, owner: str) -> set[int]:
    """Which of these running jobs of ``owner`` have a cancel request."""
    if not ids:
        return set()
    with operation("jobs_cancel_requested"):
        rows = conn.execute(QUERIES["jobs_cancel_requested"], {"ids": list(ids), "owner": owner}).fetchall()
    return {row[0] for row in rows}
