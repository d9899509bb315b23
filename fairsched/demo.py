"""``fairsched demo``: a small multi-tenant workload, end to end, on real worker processes.

The workload (:mod:`fairsched.demoapp`): one tenant floods the queue with a bulk
import; several small tenants follow, with a few flaky jobs, one job that fails
permanently, one that exhausts its budget for unknown errors, and an aggregate with
sequence numbers. Worker processes (``fairsched worker``) run everything to the end;
the report (:mod:`fairsched.demoreport`) shows, per tenant, the jobs done, its share
of the claims made while every tenant still had work, and the wait until a job's
first claim.

The demo runs in a database of its own on the user's server, never in the user's
database (:func:`demo_database`): its queue would otherwise show up in the user's
``fairsched config diff``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.conninfo import make_conninfo
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fairsched.client import Client
from fairsched.db.connection import connect, operation, redact
from fairsched.db.embedded import DEFAULT_DATABASE, default_data_dir, embedded_dsn
from fairsched.db.sql import QUERIES
from fairsched.demoapp import FLOOD_SHARE, FLOOD_TENANT, QUEUE, DemoPlan, demo_queue, workload
from fairsched.demoreport import DemoReport, collect
from fairsched.engine.enqueue import JobSpec
from fairsched.errors import FairschedError
from fairsched.settings import Settings
from fairsched.worker.listener import APPLICATION_NAME as LISTENER_NAME

DEMO_SUFFIX = "_demo"
"""The demo's database is named like the user's, with this suffix: ``fairsched_demo``
beside the embedded server's ``fairsched``."""
MAX_NAME_BYTES = 63
"""PostgreSQL's longest identifier; a longer database name would be cut silently."""
ENQUEUE_BATCH = 1000
READY_SECONDS = 60.0
STOP_SECONDS = 20.0
"""How long stopping workers may take before they are killed (grace period included)."""


class DemoFailed(FairschedError):
    """The demo could not run to the end."""


def run_demo(settings: Settings, plan: DemoPlan, console: Console) -> DemoReport:
    """Migrate the demo's database, declare the demo queue, enqueue the workload, run
    workers to the end, report. The user's database is not written to."""
    dsn, database = demo_database(settings)
    with Client(dsn, settings=settings) as client:
        client.migrate()
        client.declare_queue(QUEUE, demo_queue(plan.policies))
        aggregate_key = f"order-{secrets.token_hex(4)}"
        jobs = workload(plan, aggregate_key)
        tenants = len({job.tenant for job in jobs})
        console.print(f"[bold]fairsched demo[/] in {database}")
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
        return collect(client, database, plan, aggregate_key, (first, last), wall)


def demo_database(settings: Settings) -> tuple[str, str]:
    """The DSN of the demo's own database, created if missing, and where it is (no passwords).

    On the embedded server: ``fairsched_demo``, beside the ``fairsched`` database.
    With ``FAIRSCHED_DATABASE_URL``: the URL's database name plus ``_demo``, on the
    same server, as the same role; when it is missing and the role may not create
    databases, :class:`DemoFailed` says how to have it created or to point the demo
    at another server.
    """
    if settings.database_url is None:
        name = DEFAULT_DATABASE + DEMO_SUFFIX
        where = f"database {name} of the embedded PostgreSQL in {settings.data_dir or default_data_dir()}"
        return embedded_dsn(settings.data_dir, name), where
    url = settings.database_url
    with connect(url) as conn:
        with operation("demo_database_get"):
            row = conn.execute(QUERIES["demo_database_get"], {"suffix": DEMO_SUFFIX}).fetchone()
        assert row is not None
        name, present, role = row
        if len(name.encode()) > MAX_NAME_BYTES:
            raise DemoFailed(
                f"the demo's database would be named {name!r}, longer than PostgreSQL allows: "
                "set FAIRSCHED_DATABASE_URL to a database with a shorter name for the demo"
            )
        if not present:
            database_create(conn, name, role, url)
    return make_conninfo(url, dbname=name), f"database {name} beside {redact(url)}"


def database_create(conn: psycopg.Connection, name: str, role: str, url: str) -> None:
    """``CREATE DATABASE name`` (one made meanwhile by another demo will do)."""
    with operation("demo_database_create"):
        try:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except (pg_errors.DuplicateDatabase, pg_errors.UniqueViolation):
            return
        except pg_errors.InsufficientPrivilege:
            create = sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(role))
            raise DemoFailed(
                f"the demo runs in a database of its own, {name!r}, beside {redact(url)}, and role "
                f"{role!r} may not create it: have it created once ({create.as_string(conn)}), "
                "or set FAIRSCHED_DATABASE_URL to a database on a server where you may create "
                "databases (the demo then uses that database's name plus '_demo')"
            ) from None


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
            command = [sys.executable, "-m", "fairsched", "worker", "--app", "fairsched.demoapp:app"]
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
