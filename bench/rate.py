"""The lab's ``rate`` scenario: per-tenant rate limits on real workers, and the throughput
they leave to the tenants without one.

One queue of stack ``weighted`` + ``ratelimit``, :data:`RATE_WORKERS` real ``fairsched
worker`` processes, ten tenants limited from 5 to 200 jobs/s (:data:`LIMITS`) and
:data:`FREE_TENANTS` without a limit, every one with more no-op jobs queued than it can
run. Two phases on one scratch database, each with its own start of the same workers:

1. no limit set, over as long a window as the second phase's: the workers' throughput
   without limits, the reference, measured on a table churned as much as the second
   phase's (a shorter reference reads a fresher table: over 15 s
   against 60 s, the ratio read 0.75 where equal windows read 0.95);
2. the limits set, over ``rate_seconds``: each limited tenant's jobs started per second
   against its limit, and what the tenants without a limit ran meanwhile.

Each window opens :data:`SETTLE_SECONDS` after every worker of the phase listens (their
start-up, and the burst of the buckets' first, full, second of tokens, are left out) and
counts the jobs by their ``started_at``, on the database's clock, where the buckets are
charged.
A tenant that ran out of queued jobs before a window closed fails the run: its figures
would measure the backlog, not the limits.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import psycopg
from fairsched_policies.ratelimit import Rate, rate_set

from bench.bench import BenchConfig, Figure, declare_bench_queue, wait_listening
from bench.commitprobe import db_clock
from bench.sql import QUERIES
from fairsched.bench import QUEUE, BenchFailed, scratch_db, worker_processes
from fairsched.client import Client
from fairsched.engine.enqueue import JobSpec

STACK = ("weighted", "ratelimit")
LIMITS = (5, 10, 20, 35, 50, 75, 100, 130, 160, 200)
"""The limited tenants' limits in jobs per second (tenant ``r<N>`` is limited to N/s)."""
FREE_TENANTS = ("free0", "free1", "free2")
"""The tenants without a limit: they absorb what the limits leave of the workers."""
RATE_WORKERS = 4
"""Worker processes of both phases (each of the lab's ``--slots``)."""
SETTLE_SECONDS = 3.0
"""How long a phase's workers run, once they all listen, before its window opens: at
the start the limited tenants' buckets are full, and the bigger ones take a second or
two to spend their burst (at most one second of their limit, on top of it)."""
ASSUMED_CAPACITY = 20_000
"""Jobs per second the reference's backlog is sized for (every tenant an equal part):
more than the scenario's workers have run on the lab's machines. A faster machine fails
the run with a tenant out of jobs rather than measuring a short backlog."""
BACKLOG_MARGIN = 1.3
"""The limited phase's backlog, over what each tenant can run in it: its limit, or for
the tenants without one their part of the reference's throughput."""
BATCH = 5000
"""Jobs per enqueue statement."""


def limited_tenant(limit: int) -> str:
    """The tenant limited to ``limit`` jobs per second."""
    return f"r{limit}"


@dataclass(frozen=True)
class Window:
    """The jobs started per tenant in a window of ``seconds`` on the database's clock."""

    started: Mapping[str, int]
    seconds: float

    def rate(self, tenants: Iterable[str] | None = None) -> float:
        """Jobs started per second by ``tenants`` together (every tenant by default)."""
        chosen = self.started if tenants is None else tenants
        return sum(self.started.get(tenant, 0) for tenant in chosen) / self.seconds


def backlog_top_up(client: Client, conn: psycopg.Connection, wanted: Mapping[str, int]) -> None:
    """Enqueue no-op jobs until each tenant of ``wanted`` has that many pending (no worker
    may run meanwhile), then VACUUM ANALYZE the jobs: each phase starts on a table
    without dead rows and on fresh statistics."""
    pending = {tenant: int(n) for tenant, n in conn.execute(QUERIES["rate_pending"], {"queue": QUEUE})}
    for tenant, jobs in wanted.items():
        missing = jobs - pending.get(tenant, 0)
        for start in range(0, missing, BATCH):
            client.enqueue_many(QUEUE, [JobSpec({}, tenant)] * min(BATCH, missing - start))
    conn.execute("VACUUM ANALYZE fairsched.jobs")


def run_window(dsn: str, slots: int, seconds: float, tenants: Sequence[str], phase: str) -> Window:
    """Start :data:`RATE_WORKERS` workers of ``slots`` slots, wait until they all listen
    and :data:`SETTLE_SECONDS` more, count the jobs each tenant started over ``seconds``,
    then stop them; :class:`BenchFailed` when one of ``tenants`` ran out of pending jobs."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        with worker_processes(dsn, RATE_WORKERS, slots):
            wait_listening(conn, RATE_WORKERS)
            time.sleep(SETTLE_SECONDS)
            start = db_clock(conn)
            time.sleep(seconds)
            end = db_clock(conn)
            dry = [
                t for (t,) in conn.execute(QUERIES["rate_dry"], {"queue": QUEUE, "tenants": list(tenants)})
            ]
        if dry:
            raise BenchFailed(
                f"rate scenario, {phase}: {', '.join(dry)} ran out of queued jobs before the "
                "window closed, so the figures would measure the backlog; the workers ran "
                f"faster than bench/rate.py sized it for (ASSUMED_CAPACITY, BACKLOG_MARGIN)"
            )
        rows = conn.execute(QUERIES["rate_started"], {"queue": QUEUE, "start": start, "end": end})
        return Window({tenant: int(n) for tenant, n in rows}, end - start)


@dataclass(frozen=True)
class RateRun:
    """One run of the scenario: the reference window without limits, the window with them."""

    reference: Window
    limited: Window


def rate_run(cfg: BenchConfig) -> RateRun:
    """Both phases on a scratch database (see the module's docstring)."""
    limits = {limited_tenant(limit): limit for limit in LIMITS}
    tenants = [*limits, *FREE_TENANTS]
    with (
        scratch_db(cfg.admin_dsn) as dsn,
        Client(dsn) as client,
        psycopg.connect(dsn, autocommit=True) as conn,
    ):
        declare_bench_queue(client, STACK)
        per_tenant = math.ceil(ASSUMED_CAPACITY * (SETTLE_SECONDS + cfg.rate_seconds + 1) / len(tenants))
        backlog_top_up(client, conn, dict.fromkeys(tenants, per_tenant))
        reference = run_window(dsn, cfg.slots, cfg.rate_seconds, tenants, "without limits")
        span = SETTLE_SECONDS + cfg.rate_seconds + 1
        free_part = reference.rate() / len(FREE_TENANTS)
        wanted = {t: math.ceil(limit * span * BACKLOG_MARGIN) for t, limit in limits.items()}
        wanted |= dict.fromkeys(FREE_TENANTS, math.ceil(free_part * span * BACKLOG_MARGIN))
        backlog_top_up(client, conn, wanted)
        for tenant, limit in limits.items():
            rate_set(conn, QUEUE, tenant, Rate(limit, 1))
        limited = run_window(dsn, cfg.slots, cfg.rate_seconds, tenants, "with the limits")
    return RateRun(reference, limited)


def scenario_rate(cfg: BenchConfig, figures: list[Figure]) -> None:
    """Rate limits: each limited tenant's jobs/s over its limit (the bar: within 5 %), and
    the tenants without a limit absorbing the rest of the workers (the queue stays work
    conserving): their share and rate, and the throughput with the limits against the
    same workers' without any."""
    limits = {limited_tenant(limit): limit for limit in LIMITS}
    limited_sum = sum(LIMITS)
    ratios = {
        tenant: Figure("rate", f"tenant {tenant}: jobs/s / its limit of {limit}/s", "ratio", bar="1 ± 0.05")
        for tenant, limit in limits.items()
    }
    share = Figure("rate", "tenants without a limit: share of the jobs started", "%")
    free_rate = Figure("rate", "tenants without a limit: jobs/s together", "jobs/s")
    total = Figure("rate", "jobs/s with the limits", "jobs/s")
    reference = Figure("rate", "jobs/s without limits (reference)", "jobs/s")
    ratio = Figure("rate", "jobs/s with the limits / without", "ratio")
    absorbed = Figure(
        "rate", f"tenants without a limit: jobs/s / (jobs/s without limits - {limited_sum})", "ratio"
    )
    for _ in range(cfg.repeats):
        run = rate_run(cfg)
        window = run.limited
        for tenant, limit in limits.items():
            ratios[tenant].samples.append(window.rate([tenant]) / limit)
        started = sum(window.started.values())
        share.samples.append(100.0 * sum(window.started.get(t, 0) for t in FREE_TENANTS) / started)
        free_rate.samples.append(window.rate(FREE_TENANTS))
        total.samples.append(window.rate())
        reference.samples.append(run.reference.rate())
        ratio.samples.append(window.rate() / run.reference.rate())
        if run.reference.rate() > limited_sum:  # else the workers cannot run every limit
            absorbed.samples.append(window.rate(FREE_TENANTS) / (run.reference.rate() - limited_sum))
    figures.extend([*ratios.values(), share, free_rate, total, reference, ratio, absorbed])
