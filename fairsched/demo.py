"""``fairsched demo``: a small multi-tenant workload, end to end, on real worker processes.

One tenant floods the queue with a bulk import; several small tenants follow,
with a few flaky jobs (retried), one job that fails permanently, one that
exhausts its budget for unknown errors, and an aggregate with sequence
numbers. Worker processes (``fairsched worker``) run everything to the end;
the report shows, per tenant, the jobs done, its share of the claims made
while every tenant still had work, and the wait until a job's first claim.
"""

from __future__ import annotations

import itertools
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from psycopg.rows import class_row
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fairsched.client import Client
from fairsched.db.connection import redact
from fairsched.db.embedded import default_data_dir
from fairsched.db.sql import QUERIES
from fairsched.engine.enqueue import JobSpec
from fairsched.errors import FairschedError, InvalidInput, PermanentError, RetryableError
from fairsched.policy.registry import resolve
from fairsched.settings import QueueSettings, Settings, TenantSettings
from fairsched.worker.app import App, Job
from fairsched.worker.listener import APPLICATION_NAME as LISTENER_NAME

QUEUE = "demo"
FLOOD_TENANT = "bigco"
SMALL_TENANTS = ("acme", "globex", "initech", "umbrella")
FLOOD_SHARE = 0.7
AGGREGATE_TENANT = "acme"
AGGREGATE_LENGTH = 5
WEIGHTS = {"acme": 2.0}
"""Tenant weights on the demo queue (others weigh 1): acme is entitled to twice the share."""
DEFAULT_POLICIES = ("weighted", "aging", "serial")
FLAKY_SHARE = 0.025
"""The part of the jobs that fail once or twice with a retryable error, then succeed."""
ENQUEUE_BATCH = 1000
MIN_JOBS = 4 * len(SMALL_TENANTS) + AGGREGATE_LENGTH
READY_SECONDS = 60.0
STOP_SECONDS = 20.0
"""How long stopping workers may take before they are killed (grace period included)."""

app = App()


@app.handler(QUEUE)
def handle(job: Job) -> None:
    """Simulated work, failing as the payload asks."""
    task = job.payload
    time.sleep(task["work"])
    if task.get("poison"):
        raise PermanentError("payload version 0 is not supported")
    if task.get("bug"):
        raise ValueError("unexpected field 'legacy_id'")
    if job.attempt <= task.get("flaky", 0):
        raise RetryableError(f"downstream timed out (attempt {job.attempt})")


def demo_queue(policies: Sequence[str] = DEFAULT_POLICIES) -> QueueSettings:
    """The demo queue: the policy stack, tenant weights, and short leases and retry
    delays so that a run takes seconds."""
    return QueueSettings(
        lease_seconds=10,
        max_runtime_seconds=60,
        max_attempts=4,
        unknown_max_attempts=2,
        backoff_base_seconds=0.1,
        backoff_max_seconds=0.5,
        notify=True,
        policies=list(policies),
        tenants={name: TenantSettings(weight=weight) for name, weight in WEIGHTS.items()},
    )


class DemoFailed(FairschedError):
    """The demo could not run to the end."""


@dataclass(frozen=True)
class DemoPlan:
    """How big a demo run is."""

    jobs: int
    workers: int
    slots: int
    policies: tuple[str, ...]
    work_seconds: float
    timeout_seconds: float

    @classmethod
    def make(
        cls,
        *,
        jobs: int | None = None,
        workers: int = 2,
        slots: int = 4,
        policies: Sequence[str] = DEFAULT_POLICIES,
        quick: bool = False,
    ) -> DemoPlan:
        """The default plan (``quick``: a few seconds), with ``jobs`` when given."""
        count = jobs if jobs is not None else (400 if quick else 3000)
        if count < MIN_JOBS or workers < 1 or slots < 1:
            raise InvalidInput(f"the demo needs at least {MIN_JOBS} jobs, one worker and one slot")
        resolve(policies)
        work = 0.002 if quick else 0.01
        estimate = count * work / (workers * slots)
        return cls(count, workers, slots, tuple(policies), work, timeout_seconds=60 + 20 * estimate)


def workload(plan: DemoPlan, aggregate_key: str = "order-1") -> list[JobSpec]:
    """The jobs of a run, in enqueue order: the flood, then the small tenants' jobs.

    Deterministic for a given plan. Each run needs its own ``aggregate_key``: the
    serial policy remembers how far an aggregate got.
    """
    rng = random.Random(7)

    def task(n: int, **extra: Any) -> dict[str, Any]:
        flaky = rng.choice((1, 2)) if rng.random() < FLAKY_SHARE else 0
        return {"n": n, "work": round(plan.work_seconds * rng.uniform(0.5, 1.5), 4), "flaky": flaky, **extra}

    flood = round(plan.jobs * FLOOD_SHARE)
    jobs = [JobSpec(task(n), FLOOD_TENANT) for n in range(flood)]
    small = [JobSpec(task(n), SMALL_TENANTS[n % len(SMALL_TENANTS)]) for n in range(plan.jobs - flood)]
    aggregate = [
        JobSpec(task(0, flaky=0), AGGREGATE_TENANT, aggregate_key=aggregate_key, aggregate_seq=seq)
        for seq in range(1, AGGREGATE_LENGTH + 1)
    ]
    small[: len(aggregate)] = aggregate
    small[-1] = JobSpec(task(0, flaky=0, poison=True), "globex")
    small[-2] = JobSpec(task(0, flaky=0, bug=True), "initech")
    return jobs + small


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


def run_demo(settings: Settings, plan: DemoPlan, console: Console) -> DemoReport:
    """Migrate, declare the demo queue, enqueue the workload, run workers to the end, report."""
    with Client.from_settings(settings) as client:
        client.migrate()
        client.declare_queue(QUEUE, demo_queue(plan.policies))
        aggregate_key = f"order-{secrets.token_hex(4)}"
        jobs = workload(plan, aggregate_key)
        tenants = len({job.tenant for job in jobs})
        console.print(f"[bold]fairsched demo[/] on {describe_database(settings)}")
        processes = "process" if plan.workers == 1 else "processes"
        console.print(
            f"queue {QUEUE!r} with policies {', '.join(plan.policies)}; "
            f"starting {plan.workers} worker {processes} x {plan.slots} slots"
        )
        with worker_processes(client.dsn, plan, settings) as workers:
            wait_until_ready(client, workers)
            started = time.monotonic()
            first, last = enqueue_all(client, jobs)
            console.print(
                f"enqueued {len(jobs)} jobs for {tenants} tenants: {FLOOD_TENANT} floods "
                f"{FLOOD_SHARE:.0%} of them first, then the small tenants"
            )
            wait_until_done(client, first, last, workers, plan, console)
            wall = time.monotonic() - started
        return collect(client, settings, plan, aggregate_key, (first, last), wall)


def describe_database(settings: Settings) -> str:
    """Where the demo runs, without passwords."""
    if settings.database_url:
        return f"PostgreSQL {redact(settings.database_url)}"
    return f"the embedded PostgreSQL in {settings.data_dir or default_data_dir()}"


def enqueue_all(client: Client, jobs: Sequence[JobSpec]) -> tuple[int, int]:
    """Enqueue in batches; returns the first and last job id."""
    ids: list[int] = []
    for start in range(0, len(jobs), ENQUEUE_BATCH):
        ids += client.enqueue_many(QUEUE, jobs[start : start + ENQUEUE_BATCH])
    return min(ids), max(ids)


@contextmanager
def worker_processes(dsn: str, plan: DemoPlan, settings: Settings) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start ``plan.workers`` worker processes; on exit stop them (SIGTERM, then SIGKILL)."""
    logs = Path(tempfile.mkdtemp(prefix="fairsched-demo-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSCHED_")}
    env.update(
        FAIRSCHED_DATABASE_URL=dsn,
        FAIRSCHED_POLL_INTERVAL_SECONDS="0.5",
        FAIRSCHED_RECOVERY_INTERVAL_SECONDS="1",
        FAIRSCHED_GRACE_PERIOD_SECONDS="5",
        FAIRSCHED_MAX_PAYLOAD_BYTES=str(settings.max_payload_bytes),
    )
    procs: list[subprocess.Popen[bytes]] = []
    ran = False
    try:
        for i in range(plan.workers):
            command = [sys.executable, "-m", "fairsched.cli.main", "worker", "--app", "fairsched.demo:app"]
            command += ["--queue", f"{QUEUE}={plan.slots}", "--owner", f"demo-{os.getpid()}-{i + 1}"]
            with (logs / f"worker-{i + 1}.log").open("wb") as log:
                procs.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
        yield procs
        ran = True
    finally:
        if stop_workers(procs) and ran:
            shutil.rmtree(logs, ignore_errors=True)
        else:
            print(f"fairsched demo: worker logs are in {logs}", file=sys.stderr)


def stop_workers(procs: Sequence[subprocess.Popen[bytes]]) -> bool:
    """SIGTERM every worker, wait for them, kill the ones that outlive the deadline.

    Returns whether all stopped on their own.
    """
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    clean = True
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            clean = False
    return clean


def wait_until_ready(client: Client, workers: Sequence[subprocess.Popen[bytes]]) -> None:
    """Wait until every worker listens for jobs, so that waits measure scheduling, not start-up."""
    deadline = time.monotonic() + READY_SECONDS
    with client.connection() as conn:
        while time.monotonic() < deadline:
            check_alive(workers)
            row = conn.execute(QUERIES["workers_listening"], {"application_name": LISTENER_NAME}).fetchone()
            if row is not None and row[0] >= len(workers):
                return
            time.sleep(0.1)
    raise DemoFailed(f"the workers did not start listening within {READY_SECONDS:.0f} s")


def check_alive(workers: Sequence[subprocess.Popen[bytes]]) -> None:
    """Fail when a worker process has exited."""
    for i, proc in enumerate(workers, 1):
        if proc.poll() is not None:
            raise DemoFailed(f"worker {i} exited with status {proc.returncode} before the run ended")


def wait_until_done(
    client: Client,
    first: int,
    last: int,
    workers: Sequence[subprocess.Popen[bytes]],
    plan: DemoPlan,
    console: Console,
) -> None:
    """Show progress until every job of the run has finished; fail when a worker dies or time runs out."""
    params = {"queue": QUEUE, "first": first, "last": last}
    deadline = time.monotonic() + plan.timeout_seconds
    columns = (TextColumn("jobs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress, client.connection() as conn:
        bar = progress.add_task("jobs", total=None)
        while True:
            row = conn.execute(QUERIES["demo_progress"], params).fetchone()
            assert row is not None
            finished, total = row
            progress.update(bar, completed=finished, total=total)
            if finished >= total:
                return
            check_alive(workers)
            if time.monotonic() > deadline:
                raise DemoFailed(
                    f"only {finished} of {total} jobs finished within {plan.timeout_seconds:.0f} s"
                )
            time.sleep(0.2)


def collect(
    client: Client,
    settings: Settings,
    plan: DemoPlan,
    aggregate_key: str,
    ids: tuple[int, int],
    wall: float,
) -> DemoReport:
    """Read the outcome of the run of jobs ``ids`` (first, last) from the database."""
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
        database=describe_database(settings),
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
    console.print(f"retried attempts: {retries}; dead jobs: {dead} (fairsched dead list --queue {QUEUE})")
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
