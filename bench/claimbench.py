"""Claim measurements for ``fairsched bench`` and the plan tests: build a backlog in one
statement, read a claim's plan and shared buffers, and time claims per policy stack.

Claims measured with :func:`claim_explain` run inside a transaction that is rolled
back, so the backlog is the same for every stack and every repetition.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from bench.sql import QUERIES
from fairsched.db.sql import QUERIES as ENGINE_QUERIES
from fairsched.engine.claim import (
    claim_execute,
    claim_params,
    claim_session_configure,
    claim_statement,
    jobs_claim,
    tenant_first,
)
from fairsched.engine.claimheads import heads_refresh
from fairsched.engine.enqueue import JobSpec, jobs_enqueue
from fairsched.engine.lease import lease_row, leases_complete
from fairsched.policy.registry import forget_stacks
from fairsched.settings import Settings

STACKS: tuple[tuple[str, ...], ...] = (
    ("fifo",),
    ("aging",),
    ("serial",),
    ("weighted",),
    ("fifo", "serial"),
    ("aging", "serial"),
    ("weighted", "aging"),
    ("weighted", "serial"),
    ("weighted", "aging", "serial"),
)
"""Every combination of the built-in policies the tests and the bench cover."""


def backlog_build(
    conn: psycopg.Connection, queue: str, *, jobs: int, tenants: int = 1000, aggregates: int = 10_000
) -> None:
    """Fill ``queue`` with ``jobs`` jobs (see ``claimbench_fill``), share and aggregate rows,
    a few expired leases, then VACUUM ANALYZE. ``conn`` must be in autocommit mode."""
    params = {"queue": queue, "jobs": jobs, "tenants": tenants, "aggregates": aggregates}
    conn.execute(QUERIES["claimbench_fill"], params)
    conn.execute(QUERIES["claimbench_shares"], params)
    conn.execute(QUERIES["claimbench_expired"], {"queue": queue, "count": 1000})
    conn.execute("VACUUM ANALYZE fairsched.jobs")
    conn.execute("VACUUM ANALYZE fairsched.tenant_shares")
    conn.execute("VACUUM ANALYZE fairsched.aggregates")


@dataclass(frozen=True)
class ClaimPlan:
    """What one claim did: its plan (EXPLAIN JSON), rows claimed and shared buffers touched."""

    plan: dict[str, Any]
    rows: int
    shared_buffers: int

    def nodes(self) -> Iterator[dict[str, Any]]:
        """Every node of the plan, depth first."""
        stack = [self.plan]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.get("Plans", []))

    def index_names(self) -> set[str]:
        """The indexes the plan scans."""
        return {n["Index Name"] for n in self.nodes() if "Index Name" in n}

    def seq_scans_over(self, relation: str = "jobs") -> list[dict[str, Any]]:
        """Seq Scan nodes that read ``fairsched.<relation>``."""
        return [
            n for n in self.nodes() if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == relation
        ]

    def sorts_over_jobs(self) -> list[dict[str, Any]]:
        """Sort nodes whose input reads ``fairsched.jobs`` (a sort over the backlog).
        A CTE or subquery evaluated under a sort is not its input: its own sorts count."""
        found = []
        for node in self.nodes():
            if node["Node Type"] != "Sort":
                continue
            stack = list(node.get("Plans", []))
            while stack:
                below = stack.pop()
                if below.get("Parent Relationship") in ("InitPlan", "SubPlan"):
                    continue
                if below.get("Relation Name") == "jobs":
                    found.append(node)
                    break
                stack.extend(below.get("Plans", []))
        return found


def claim_explain(conn: psycopg.Connection, names: Sequence[str], queue: str, *, limit: int = 1) -> ClaimPlan:
    """EXPLAIN (ANALYZE, BUFFERS) one claim of ``names`` on ``queue``, then roll it back.

    EXPLAIN plans for the bound values (a custom plan); ``tests/test_claim_plans.py``
    also checks the generic plans a claim session runs, through auto_explain."""
    params = claim_params(queue, owner="explain", limit=limit, lease_seconds=None)
    statement = sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {}").format(claim_statement(names, params))
    with conn.transaction(force_rollback=True):
        if tenant_first(names):
            conn.execute(ENGINE_QUERIES["claim_plan_generic"])
        row = conn.execute(statement, params).fetchone()
    assert row is not None
    plan = row[0][0]["Plan"]
    buffers = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
    return ClaimPlan(plan, plan.get("Actual Rows", 0), buffers)


def claim_buffers(
    conn: psycopg.Connection, names: Sequence[str], queue: str, *, limit: int = 1, repeat: int = 5
) -> int:
    """Median shared buffers of ``repeat`` rolled-back claims (the first warms the cache)."""
    claim_explain(conn, names, queue, limit=limit)
    return int(
        statistics.median(
            claim_explain(conn, names, queue, limit=limit).shared_buffers for _ in range(repeat)
        )
    )


@contextmanager
def claim_session(dsn: str) -> Iterator[psycopg.Connection]:
    """An autocommit connection whose claims run as a worker's do (a claim session)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        claim_session_configure(conn)
        yield conn


def claims_per_second(
    conn: psycopg.Connection, names: Sequence[str], queue: str, *, claims: int = 500, limit: int = 1
) -> float:
    """Claim rate of one stack on ``queue``: ``claims`` committed claims of ``limit`` jobs
    (the claimed jobs stay running) on ``conn``, a :func:`claim_session` as the workers'.
    Run stacks one after the other on one backlog: each run starts at claim heads
    refreshed past the jobs earlier runs claimed, as a worker's head keeper keeps them."""
    done, seconds = _claims_timed(conn, names, queue, claims=claims, limit=limit)
    return done / seconds


def claim_rates_alternated(
    conn: psycopg.Connection,
    base: Sequence[str],
    names: Sequence[str],
    queue: str,
    *,
    claims: int = 1200,
    blocks: int = 12,
) -> tuple[float, float]:
    """Claim rates of the stacks ``base`` and ``names`` on ``queue`` (as
    :func:`claims_per_second`), ``claims`` each, timed in ``blocks`` alternating blocks:
    whatever the server does meanwhile (a checkpoint, autovacuum) weighs on both alike."""
    totals = [(0, 0.0), (0, 0.0)]
    for _ in range(blocks):
        for i, stack in enumerate((base, names)):
            done, seconds = _claims_timed(conn, stack, queue, claims=max(1, claims // blocks), limit=1)
            totals[i] = (totals[i][0] + done, totals[i][1] + seconds)
    return totals[0][0] / totals[0][1], totals[1][0] / totals[1][1]


def _claims_timed(
    conn: psycopg.Connection, names: Sequence[str], queue: str, *, claims: int, limit: int
) -> tuple[int, float]:
    """Up to ``claims`` claims of ``names`` (stopping at the first empty one): how many
    claimed, in how many seconds."""
    queue_policies_set(conn, queue, names)
    heads_refresh(conn)
    params = claim_params(queue, owner="bench", limit=limit, lease_seconds=None)
    done = 0
    start = time.perf_counter()
    for _ in range(claims):
        with conn.cursor(row_factory=lease_row) as cur:
            if not claim_execute(cur, names, params):
                break
        done += 1
    return done, time.perf_counter() - start


def queue_policies_set(conn: psycopg.Connection, queue: str, names: Sequence[str]) -> None:
    """Switch a queue's stack in the database (and in this process at once)."""
    conn.execute(QUERIES["queue_policies_set"], {"queue": queue, "policies": list(names)})
    forget_stacks()


@dataclass(frozen=True)
class ChurnFigure:
    """Shared buffers per claim on a fresh backlog and after churn, with what ran between."""

    names: tuple[str, ...]
    backlog: int
    churned: int
    fresh_buffers: int
    churned_buffers: int
    autovacuums: int
    seconds: float
    plan: ClaimPlan

    @property
    def ratio(self) -> float:
        return self.churned_buffers / max(1, self.fresh_buffers)


def claim_buffers_under_churn(
    conn: psycopg.Connection,
    names: Sequence[str],
    queue: str,
    *,
    backlog: int,
    churn: int | None = None,
    batch: int = 500,
    limit: int = 1,
    tenants: int = 1000,
    refresh_seconds: float | None = None,
) -> ChurnFigure:
    """Claim cost on a fresh backlog of ``backlog`` jobs, then again after ``churn`` jobs
    (default: as many as the backlog holds) were claimed and completed through the
    engine's own statements, ``batch`` at a time, with as many enqueued to keep the
    backlog's size. No VACUUM runs after the fresh figure: only autovacuum, with the
    table settings as shipped. The claim heads are refreshed every ``refresh_seconds``
    (default: a worker's ``head_refresh_seconds``) while it churns, as a worker's head
    keeper does; the figure is taken when the churn ends, wherever the refresh timer
    stands. ``conn`` must be in autocommit mode on a database with ``queue`` declared
    and empty."""
    queue_policies_set(conn, queue, names)
    backlog_build(conn, queue, jobs=backlog, tenants=tenants)
    fresh = claim_buffers(conn, names, queue, limit=limit)
    vacuums_before = _autovacuums(conn)
    target = backlog if churn is None else churn
    every = Settings().head_refresh_seconds if refresh_seconds is None else refresh_seconds
    done = 0
    start = refreshed = time.perf_counter()
    while done < target:
        if time.perf_counter() - refreshed >= every:
            heads_refresh(conn)
            refreshed = time.perf_counter()
        size = min(batch, target - done)
        leases = jobs_claim(conn, queue, owner="churn", limit=size)
        if not leases:
            break
        leases_complete(conn, leases)
        refill = [JobSpec({}, f"t{n % tenants}", priority=n % 3) for n in range(done, done + len(leases))]
        jobs_enqueue(conn, queue, refill, max_payload_bytes=1024)
        done += len(leases)
    seconds = time.perf_counter() - start
    churned = claim_buffers(conn, names, queue, limit=limit)
    plan = claim_explain(conn, names, queue, limit=limit)
    return ChurnFigure(
        tuple(names), backlog, done, fresh, churned, _autovacuums(conn) - vacuums_before, seconds, plan
    )


def _autovacuums(conn: psycopg.Connection) -> int:
    row = conn.execute(QUERIES["claimbench_autovacuums"]).fetchone()
    return int(row[0]) if row else 0
