"""``fairsched bench``: how fast this install runs jobs end to end, on your own server.

Each policy stack measured gets a scratch database on the configured server
(``FAIRSCHED_DATABASE_URL``'s, or the embedded one), created and migrated for the run
and dropped afterwards: nothing is written to your own database. Before any worker
starts, one connection times ``claims`` claims of one job each (the claim-only rate).
Then real ``fairsched worker`` processes running the built-in no-op :data:`app` drain
a backlog of ``jobs`` jobs of 10 tenants: the end-to-end figure is the jobs succeeded
per second from the first claim to the last completion, read from the jobs' own
timestamps (the workers' start-up is left out).

The lab in the repository's ``bench/`` (``python -m bench``) measures the design's bar
against the peers; it runs its workers with :func:`worker_processes` on databases from
:func:`scratch_db`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from fairsched.client import Client
from fairsched.db.sql import QUERIES
from fairsched.engine.enqueue import JobSpec
from fairsched.errors import FairschedError
from fairsched.settings import QueueSettings
from fairsched.worker.app import App, Job

QUEUE = "bench"
"""The queue the no-op handler serves."""
APP_SPEC = "fairsched.bench:app"
TENANTS = 10
CLAIMS = 1000
"""Claims timed for the claim-only rate (at most ``jobs``)."""
DRAIN_POLL_SECONDS = 0.5
"""How often the drain is checked: the figure comes from the jobs' timestamps, so a slow
poll only delays the end of the wait, and takes less server time from the workers."""

app = App()


@app.handler(QUEUE)
def noop(job: Job) -> None:
    """Do nothing, or sleep for the payload's ``ms``."""
    ms = job.payload.get("ms") if isinstance(job.payload, dict) else None
    if ms:
        time.sleep(ms / 1000)


class BenchFailed(FairschedError):
    """The bench could not run to the end."""


# -- scratch databases and worker processes --------------------------------------------


@contextmanager
def scratch_db(admin_dsn: str, *, migrate: bool = True) -> Iterator[str]:
    """A new database on ``admin_dsn``'s server (migrated unless ``migrate`` is false),
    dropped afterwards; yields its DSN."""
    name = "fairsched_bench_" + uuid.uuid4().hex[:10]
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = make_conninfo("", **{**conninfo_to_dict(admin_dsn), "dbname": name})
    try:
        if migrate:
            with Client(dsn) as client:
                client.migrate()
        yield dsn
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@contextmanager
def worker_processes(
    dsn: str, count: int, slots: int, *, app_spec: str = APP_SPEC
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` real ``fairsched worker`` processes of ``slots`` slots on the bench queue,
    running ``app_spec``; stopped on exit (SIGTERM, then SIGKILL). Their logs go to a
    temporary file, kept and named when a worker failed."""
    from fairsched.demo import stop_workers  # the parent's only: the workers import this module

    env = {
        **os.environ,
        "FAIRSCHED_DATABASE_URL": dsn,
        "FAIRSCHED_POLL_INTERVAL_SECONDS": "0.05",
        "FAIRSCHED_RECOVERY_INTERVAL_SECONDS": "5",
    }
    env.pop("FAIRSCHED_CONFIG", None)
    cmd = [sys.executable, "-m", "fairsched", "worker", "--app", app_spec, "--queue", f"{QUEUE}={slots}"]
    log = tempfile.NamedTemporaryFile(prefix="fairsched-bench-", suffix=".log", delete=False)  # noqa: SIM115
    procs: list[subprocess.Popen[bytes]] = []
    clean = False
    try:
        procs += [subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT) for _ in range(count)]
        yield procs
        clean = True
    finally:
        log.close()
        if stop_workers(procs) and clean:
            os.unlink(log.name)
        else:
            print(f"fairsched bench: worker logs are in {log.name}", file=sys.stderr)


def wait_finished(
    conn: psycopg.Connection,
    ids: tuple[int, int],
    procs: Sequence[subprocess.Popen[bytes]],
    timeout: float,
) -> None:
    """Poll until every job with an id in ``ids`` (first, last) has finished; fail when a
    worker exits or ``timeout`` seconds pass."""
    params = {"queue": QUEUE, "first": ids[0], "last": ids[1]}
    deadline = time.monotonic() + timeout
    while True:
        row = conn.execute(QUERIES["demo_progress"], params).fetchone()
        finished, total = row if row else (0, 0)
        if finished >= total:
            return
        gone = [p.returncode for p in procs if p.poll() is not None]
        if gone:
            raise BenchFailed(f"a worker exited with status {gone[0]} before the backlog drained")
        if time.monotonic() > deadline:
            raise BenchFailed(f"only {finished:,} of {total:,} jobs finished within {timeout:.0f} s")
        time.sleep(DRAIN_POLL_SECONDS)


# -- the measurement --------------------------------------------------------------------


@dataclass(frozen=True)
class StackResult:
    """One policy stack's figures."""

    policies: tuple[str, ...]
    jobs: int
    seconds: float
    jobs_per_second: float
    claims: int
    claims_per_second: float
    database: str
    """The scratch database it ran on (dropped when the run ended)."""


def enqueue_backlog(client: Client, jobs: int) -> tuple[int, int]:
    """``jobs`` no-op jobs of :data:`TENANTS` tenants, in batches; their first and last id."""
    ids: list[int] = []
    for start in range(0, jobs, 1000):
        specs = [JobSpec({}, f"t{n % TENANTS}") for n in range(start, min(jobs, start + 1000))]
        ids += client.enqueue_many(QUEUE, specs)
    return min(ids), max(ids)


def claim_rate(client: Client, claims: int) -> float:
    """Claims per second of ``claims`` claims of one job each on one connection (each its
    own transaction, after one untimed), on jobs enqueued for them and completed afterwards."""
    enqueue_backlog(client, claims + 1)
    client.heads_refresh()
    warm = client.claim(QUEUE, owner="bench-claims", limit=1)  # a connection made, the plan cached
    leases = []
    start = time.perf_counter()
    for _ in range(claims):
        leases += client.claim(QUEUE, owner="bench-claims", limit=1)
    seconds = time.perf_counter() - start
    client.complete_many(warm + leases)
    return len(leases) / seconds


def measure(
    admin_dsn: str, policies: Sequence[str], *, jobs: int, workers: int, slots: int, timeout: float = 600.0
) -> StackResult:
    """The claim-only and end-to-end figures of one stack, on a scratch database."""
    claims = min(CLAIMS, jobs)
    with scratch_db(admin_dsn) as dsn, Client(dsn) as client:
        client.declare_queue(QUEUE, QueueSettings(notify=False, lease_seconds=60, policies=list(policies)))
        claims_per_second = claim_rate(client, claims)
        ids = enqueue_backlog(client, jobs)
        with worker_processes(dsn, workers, slots) as procs, client.connection() as conn:
            wait_finished(conn, ids, procs, timeout)
        with client.connection() as conn:
            conn.execute("ANALYZE")  # fresh statistics for the figure's join (the backlog is gone)
            row = conn.execute(QUERIES["demo_run_summary"], {"queue": QUEUE, "first": ids[0], "last": ids[1]})
            summary = row.fetchone()
        seconds = float(summary[0]) if summary and summary[0] else float("nan")
        return StackResult(
            tuple(policies),
            jobs,
            seconds,
            jobs / seconds,
            claims,
            claims_per_second,
            str(conninfo_to_dict(dsn)["dbname"]),
        )


def to_dict(results: Sequence[StackResult], *, jobs: int, workers: int, slots: int) -> dict[str, Any]:
    """The results as JSON-ready data; with the last stack's rate over the first's."""
    data: dict[str, Any] = {
        "config": {"jobs": jobs, "workers": workers, "slots": slots},
        "stacks": [{**asdict(r), "policies": list(r.policies)} for r in results],
    }
    if len(results) > 1:
        first, last = results[0], results[-1]
        data["ratio"] = {
            "stacks": ["+".join(last.policies), "+".join(first.policies)],
            "jobs_per_second": last.jobs_per_second / first.jobs_per_second,
            "claims_per_second": last.claims_per_second / first.claims_per_second,
        }
    return data
