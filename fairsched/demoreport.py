"""The demo's report: what a run did, read from the database, and its rendering.

Per tenant: the jobs done and dead, the retried attempts, its share of the claims
made while every tenant still had work (against its entitled share by weight), and
the wait from enqueue to a job's first claim; then the run's span and rate, the dead
jobs, whether the aggregate ran in sequence and one at a time, and the stale
completions rejected.
"""

from __future__ import annotations

import itertools
import shlex
from dataclasses import asdict, dataclass
from typing import Any

from psycopg.rows import class_row
from rich import box
from rich.console import Console
from rich.table import Table

from fairsched.client import Client
from fairsched.db.connection import redact
from fairsched.db.sql import QUERIES
from fairsched.demoapp import AGGREGATE_TENANT, QUEUE, WEIGHTS, DemoPlan


@dataclass(frozen=True)
class TenantRow:
    """One tenant's part of a run."""

    tenant: str
    jobs: int
    succeeded: int
    dead: int
    retries: int
    contended_claims: int
    p50_wait: float | None
    p99_wait: float | None


@dataclass(frozen=True)
class DemoReport:
    """What happened in a run."""

    database: str
    database_url: str
    plan: DemoPlan
    tenants: list[TenantRow]
    wall_seconds: float
    span_seconds: float
    stale_rejected: int
    dead_ids: list[int]
    aggregate_key: str
    aggregate_seqs: list[int]
    aggregate_one_at_a_time: bool

    @property
    def aggregate_in_order(self) -> bool:
        return self.aggregate_seqs == sorted(self.aggregate_seqs)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["aggregate_in_order"] = self.aggregate_in_order
        return data


def collect(
    client: Client,
    database: str,
    plan: DemoPlan,
    aggregate_key: str,
    ids: tuple[int, int],
    wall: float,
) -> DemoReport:
    """Read the outcome of the run of jobs ``ids`` (first, last) from the demo's database
    (``database`` says which, for the report)."""
    params = {"queue": QUEUE, "first": ids[0], "last": ids[1]}
    with client.connection() as conn:
        with conn.cursor(row_factory=class_row(TenantRow)) as cur:
            tenants = cur.execute(QUERIES["demo_tenant_report"], params).fetchall()
        summary = conn.execute(QUERIES["demo_run_summary"], params).fetchone()
        attempts = conn.execute(
            QUERIES["demo_aggregate_attempts"],
            {**params, "tenant": AGGREGATE_TENANT, "aggregate_key": aggregate_key},
        ).fetchall()
    assert summary is not None
    span, stale, dead_ids = summary
    one_at_a_time = all(later[1] >= earlier[2] for earlier, later in itertools.pairwise(attempts))
    return DemoReport(
        database=database,
        database_url=redact(client.dsn),
        plan=plan,
        tenants=tenants,
        wall_seconds=round(wall, 3),
        span_seconds=round(float(span or 0), 3),
        stale_rejected=int(stale),
        dead_ids=list(dead_ids),
        aggregate_key=aggregate_key,
        aggregate_seqs=[int(seq) for seq, _, _, outcome in attempts if outcome == "succeeded"],
        aggregate_one_at_a_time=one_at_a_time,
    )


def print_report(report: DemoReport, console: Console) -> None:
    """The run as tables and a few lines of summary."""
    contended = sum(row.contended_claims for row in report.tenants) or 1
    entitled = entitled_shares(report)
    table = Table(title="per tenant", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("tenant", "jobs", "done", "dead", "retries", "share*", "entitled", "p50", "p99"):
        table.add_column(column, justify="left" if column == "tenant" else "right")
    for row in report.tenants:
        table.add_row(
            row.tenant,
            str(row.jobs),
            str(row.succeeded),
            str(row.dead),
            str(row.retries),
            f"{row.contended_claims / contended:.1%}",
            f"{entitled[row.tenant]:.1%}" if row.tenant in entitled else "-",
            _seconds(row.p50_wait),
            _seconds(row.p99_wait),
        )
    console.print(table)
    console.print(
        "* share of the jobs first claimed before any tenant ran out of waiting jobs; "
        "entitled: by weight (weighted policy); p50/p99: wait from enqueue to first claim"
    )
    jobs = sum(row.jobs for row in report.tenants)
    rate = jobs / report.span_seconds if report.span_seconds else 0.0
    retries = sum(row.retries for row in report.tenants)
    plan = report.plan
    console.print(
        f"elapsed {report.wall_seconds:.1f} s ({report.span_seconds:.1f} s from first claim to last "
        f"finish, {rate:.0f} jobs/s) on {plan.workers} workers x {plan.slots} slots"
    )
    dead = ", ".join(str(i) for i in report.dead_ids) or "none"
    look = f"FAIRSCHED_DATABASE_URL={shlex.quote(report.database_url)} fairsched dead list --queue {QUEUE}"
    console.print(f"retried attempts: {retries}; dead jobs: {dead} ({look})", soft_wrap=True)
    seqs = " ".join(str(s) for s in report.aggregate_seqs)
    console.print(
        f"aggregate {AGGREGATE_TENANT}/{report.aggregate_key}: started in sequence order ({seqs}): "
        f"{'yes' if report.aggregate_in_order else 'no'}; "
        f"one at a time: {'yes' if report.aggregate_one_at_a_time else 'no'}"
    )
    console.print(f"stale completions rejected: {report.stale_rejected}")


def entitled_shares(report: DemoReport) -> dict[str, float]:
    """Each tenant's share by weight while all have work; empty without the weighted policy."""
    if "weighted" not in report.plan.policies:
        return {}
    weights = {row.tenant: WEIGHTS.get(row.tenant, 1.0) for row in report.tenants}
    total = sum(weights.values())
    return {tenant: weight / total for tenant, weight in weights.items()}


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"
