"""Retry delays, whichever way an attempt ended (a recorded failure, an expired lease):
full jitter, under the exponential ceiling, never past the cap, and no retry once the
attempts are spent.

Each delay is measured in the transaction that set it: ``available_at - now()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import psycopg
import pytest

from fairsched import Client, JobSpec, QueueSettings
from fairsched.engine.claim import jobs_claim
from fairsched.engine.lease import Failure, FailureKind, Lease, leases_fail
from fairsched.engine.recovery import recovery_sweep

JOBS = 40


def delays(fresh_db: str, attempts: Sequence[int], *, base: float, cap: float, path: str) -> list[float]:
    """The retry delays of ``len(attempts)`` jobs whose attempt (1-based) ends in ``path``
    (``fail``: a retryable failure; ``expire``: recovery of an expired lease), the n-th
    job on its ``attempts[n]``-th attempt."""
    settings = QueueSettings(backoff_base_seconds=base, backoff_max_seconds=cap, max_attempts=1000)
    with Client(fresh_db) as client:
        client.declare_queue("r", settings)
        client.enqueue_many("r", [JobSpec({}, tenant="t") for _ in attempts])
    with psycopg.connect(fresh_db) as conn:
        leases = jobs_claim(conn, "r", owner="host:1", limit=len(attempts))
        assert len(leases) == len(attempts)
        conn.execute(
            "UPDATE fairsched.jobs AS j SET attempt_count = a.n"
            " FROM unnest(%s::bigint[], %s::int[]) AS a(id, n) WHERE j.id = a.id",
            ([lease.id for lease in leases], list(attempts)),
        )
        conn.commit()
        now = _now(conn)
        if path == "fail":
            held = _fail(conn, leases)
        else:
            conn.execute("UPDATE fairsched.jobs SET lease_expires_at = now() - interval '1 second'")
            held = recovery_sweep(conn).retried
        assert held == len(attempts)
        rows = conn.execute(
            "SELECT available_at FROM fairsched.jobs WHERE id = ANY(%s) ORDER BY id",
            ([x.id for x in leases],),
        ).fetchall()
    return [(available_at - now).total_seconds() for (available_at,) in rows]


def _now(conn: psycopg.Connection) -> datetime:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def _fail(conn: psycopg.Connection, leases: list[Lease]) -> int:
    failures = [Failure(lease, FailureKind.RETRYABLE, "TimeoutError", "slow") for lease in leases]
    outcomes = leases_fail(conn, failures)
    return sum(1 for o in outcomes.values() if o.held and o.status == "pending")


@pytest.mark.parametrize("path", ["fail", "expire"])
def test_retry_delays_are_jittered_under_their_ceiling(fresh_db: str, path: str) -> None:
    """40 first attempts with a ceiling of 10 s: each waits between 0 and 10 s, and the
    waits are spread (full jitter), not one value for all."""
    waits = delays(fresh_db, [1] * JOBS, base=10, cap=300, path=path)
    assert all(0 <= w <= 10 for w in waits), waits
    assert len({round(w, 3) for w in waits}) > 10, waits


@pytest.mark.parametrize("path", ["fail", "expire"])
def test_retry_delays_never_pass_the_cap(fresh_db: str, path: str) -> None:
    """Attempts 1 to 40 with a base of 0.5 s and a cap of 2 s: the exponential ceiling
    passes the cap from the fourth attempt on; no delay does."""
    waits = delays(fresh_db, range(1, JOBS + 1), base=0.5, cap=2, path=path)
    ceilings = [min(2, 0.5 * 2 ** (n - 1)) for n in range(1, JOBS + 1)]
    assert all(0 <= w <= c for w, c in zip(waits, ceilings, strict=True)), waits
