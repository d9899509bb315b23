"""The lab (``python -m bench``): the performance bar of DESIGN.md §7, measured side by side
in one run.

Each scenario runs on scratch databases of one PostgreSQL server (the embedded
one by default) and reports ratios against a reference measured in the same
run. Every figure is the median over ``repeats`` runs, with min and max. The
scratch databases and the worker processes are the product's
(:mod:`fairsched.bench`, which ``fairsched bench`` runs for users).
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, LiteralString

import psycopg

from bench import claimbench, commitprobe, peers
from bench.commitprobe import Commit, commit_probe, db_clock
from bench.cputime import CpuMeter, local_backends
from bench.sql import QUERIES
from fairsched.bench import QUEUE, scratch_db, worker_processes
from fairsched.client import Client
from fairsched.db.sql import QUERIES as ENGINE_QUERIES
from fairsched.engine.claim import jobs_claim
from fairsched.engine.enqueue import JobSpec
from fairsched.engine.lease import leases_complete
from fairsched.errors import InvalidInput
from fairsched.settings import QueueSettings, Settings
from fairsched.worker.headkeeper import HeadKeeper
from fairsched.worker.listener import APPLICATION_NAME as LISTENER_NAME
from fairsched.worker.pruner import Pruner

BIG = "big"
"""The noisy-neighbour scenario's flooding tenant."""


@dataclass
class Figure:
    """One measured line of the results table."""

    scenario: str
    name: str
    unit: str
    samples: list[float] = field(default_factory=list)
    bar: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            median=self.median, min=min(self.samples, default=None), max=max(self.samples, default=None)
        )
        return data


@dataclass(frozen=True)
class BenchConfig:
    """What to run and how big."""

    admin_dsn: str
    jobs: int = 20_000
    workers: int = 2
    slots: int = 50
    repeats: int = 3
    policies: tuple[str, ...] = ("weighted", "aging", "serial")
    churn_backlog: int = 1_000_000
    large_backlog: int = 1_000_000
    claims_backlog: int = 100_000
    backlogs: tuple[int, ...] = (10_000, 100_000, 1_000_000)
    noisy_seconds: float = 15.0
    shares_claims: int = 10_000
    rate_seconds: float = 60.0


MIN_BACKLOG = 5_000
"""The smallest backlog of the backlog scenario: it parks 1,000 jobs as expired leases
and times 300 claims per stack on what is left."""


def parse_backlogs(text: str) -> tuple[int, ...]:
    """``"10000,100000,1000000"`` → the backlog scenario's sizes: two or more, ascending,
    each at least :data:`MIN_BACKLOG`."""
    parts = [part.strip().replace("_", "") for part in text.split(",")]
    if not all(part.isdigit() for part in parts):
        raise InvalidInput(f"--backlogs {text[:80]!r}: expected whole numbers separated by commas")
    sizes = tuple(int(part) for part in parts)
    if len(sizes) < 2 or any(a >= b for a, b in itertools.pairwise(sizes)):
        raise InvalidInput(f"--backlogs {text[:80]!r}: give two or more sizes, ascending")
    if sizes[0] < MIN_BACKLOG:
        raise InvalidInput(f"--backlogs {text[:80]!r}: each size must be at least {MIN_BACKLOG:,}")
    return sizes


def short_count(n: int) -> str:
    """``n`` as the backlog figures name it: 10k, 1M, or in full when not round."""
    for unit, suffix in ((1_000_000, "M"), (1_000, "k")):
        if n % unit == 0:
            return f"{n // unit:,}{suffix}"
    return f"{n:,}"


# -- scratch databases and workers --------------------------------------------


def declare_bench_queue(client: Client, policies: Sequence[str], *, notify: bool = False) -> None:
    """The bench queue with the given policy stack; no NOTIFY unless asked (the throughput
    scenarios enqueue whole backlogs, where a notification per batch wakes nobody new)."""
    client.declare_queue(QUEUE, QueueSettings(notify=notify, lease_seconds=60, policies=list(policies)))


STARTED_POLL_SECONDS = 0.02
"""How often :func:`wait_started` looks, while the workers start up."""
DRAIN_POLL_SECONDS = 0.5
"""How often :func:`wait_drained` looks. Windows are measured from the jobs' own
timestamps, so a slower poll delays only the end of the wait, and takes less server
time from the workers measured (each poll walks the claim index's dead head)."""


def poll(
    conn: psycopg.Connection,
    query: LiteralString,
    params: dict[str, Any],
    ready: Callable[[Any], bool],
    *,
    interval: float,
    timeout: float,
    what: str,
) -> Any:
    """Run the one-value ``query`` (its text) every ``interval`` seconds until ``ready`` holds for its
    value, and return that value; ``TimeoutError`` ("<what> within <timeout> s") after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(query, params).fetchone()
        if row and ready(row[0]):
            return row[0]
        time.sleep(interval)
    raise TimeoutError(f"{what} within {timeout:.0f} s")


def wait_drained(dsn: str, left: int = 0, timeout: float = 600.0) -> None:
    """Poll until at most ``left`` bench jobs are unfinished (pending, waiting or running)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        poll(
            conn,
            QUERIES["bench_unfinished"],
            {"queue": QUEUE, "cap": left + 1},
            lambda unfinished: unfinished <= left,
            interval=DRAIN_POLL_SECONDS,
            timeout=timeout,
            what="bench jobs did not finish",
        )


def enqueue_jobs(client: Client, specs: Sequence[JobSpec], batch: int = 1000) -> None:
    """Enqueue ``specs`` in batches (one statement each)."""
    for start in range(0, len(specs), batch):
        client.enqueue_many(QUEUE, specs[start : start + batch])


def nearest_rank(count: int, q: float) -> int:
    """The index, in ``count`` sorted values, of their ``q`` quantile (0..1) by nearest rank."""
    return min(count - 1, max(0, round(q * count) - 1))


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank."""
    if not values:
        return float("nan")
    return sorted(values)[nearest_rank(len(values), q)]


# -- scenario: end-to-end no-op throughput -----------------------------------


@contextmanager
def no_op_backlog(cfg: BenchConfig) -> Iterator[str]:
    """A scratch database whose bench queue holds ``cfg.jobs`` no-op jobs of 10 tenants."""
    with scratch_db(cfg.admin_dsn) as dsn:
        with Client(dsn) as client:
            declare_bench_queue(client, cfg.policies)
            enqueue_jobs(client, [JobSpec({}, f"t{n % 10}") for n in range(cfg.jobs)])
        yield dsn


def figure_rows(dsn: str, query: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The rows of a figure query over a finished run, on fresh statistics: right after a
    drain, ANALYZE still counts the jobs pending, and the plan of a join to the attempts
    view that expects one succeeded job is a nested loop over all of them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")  # a scratch database: its every table, none named
        return conn.execute(QUERIES[query], params).fetchall()


def drain_rate(dsn: str) -> float:
    """Jobs succeeded per second, from the first claim to the last completion."""
    ((succeeded, seconds),) = figure_rows(dsn, "bench_window", {"queue": QUEUE})
    return float(succeeded) / float(seconds)


def wait_started(conn: psycopg.Connection, jobs: int, timeout: float = 120.0) -> int:
    """Poll until the workers finished a first job (they have started); returns how many
    jobs were unfinished then."""
    unfinished = poll(
        conn,
        QUERIES["bench_unfinished"],
        {"queue": QUEUE, "cap": jobs},
        lambda unfinished: unfinished < jobs,
        interval=STARTED_POLL_SECONDS,
        timeout=timeout,
        what="no bench job finished",
    )
    return int(unfinished)


@dataclass(frozen=True)
class CpuPerJob:
    """CPU milliseconds per 1,000 jobs of a runner's clients and of its server backends
    (``None`` unless the server runs on this machine)."""

    client: float
    server: float | None

    @property
    def total(self) -> float | None:
        """Clients and backends together, when both were measured."""
        return None if self.server is None else self.client + self.server

    @classmethod
    def of(cls, jobs: int, client: float, server: float | None) -> CpuPerJob:
        return cls(client * 1e6 / jobs, None if server is None else server * 1e6 / jobs)


def fairsched_e2e(cfg: BenchConfig) -> tuple[float, CpuPerJob | None]:
    """Jobs/s of real worker processes draining the no-op backlog, and the CPU per job the
    workers and their backends used from their first finished job to the end of the drain
    (their start-up left out); ``None`` when the drain ended before a first look."""
    with no_op_backlog(cfg) as dsn:
        with (
            worker_processes(dsn, cfg.workers, cfg.slots) as procs,
            psycopg.connect(dsn, autocommit=True) as watch,
        ):
            left = wait_started(watch, cfg.jobs)
            pids = [p.pid for p in procs]
            workers, backends = CpuMeter(pids), CpuMeter(local_backends(watch))
            wait_drained(dsn)
            serving = local_backends(watch)
            server = backends.used(serving) if serving else None
            cpu = CpuPerJob.of(left, workers.used(pids), server) if left else None
        return drain_rate(dsn), cpu


LARGE_WINDOW_SECONDS = 5.0
"""How long the workers drain the large backlog: a few hundred claims each, while the
backlog stays about as large as it started."""


def wait_claiming(conn: psycopg.Connection, timeout: float = 120.0) -> None:
    """Poll until a bench job is running (the workers have started claiming)."""
    poll(
        conn,
        QUERIES["bench_running"],
        {"queue": QUEUE},
        bool,
        interval=STARTED_POLL_SECONDS,
        timeout=timeout,
        what="no bench job was claimed",
    )


def fairsched_window(cfg: BenchConfig, jobs: int, seconds: float) -> float:
    """Jobs/s of real worker processes over their first ``seconds`` on a no-op backlog of
    ``jobs``, from their first claim to their last completion once stopped. Nothing
    counts the backlog while they run: on a large one, every count would take server
    time from the workers measured."""
    with no_op_backlog(replace(cfg, jobs=jobs)) as dsn:
        with (
            worker_processes(dsn, cfg.workers, cfg.slots),
            psycopg.connect(dsn, autocommit=True) as watch,
        ):
            wait_claiming(watch)
            time.sleep(seconds)
        return drain_rate(dsn)


def statements_loop(cfg: BenchConfig, connections: int, batch: int = 50) -> float:
    """Jobs/s of the engine's claim and completion statements alone draining the no-op
    backlog: ``connections`` threads, each claiming ``batch`` and completing them in a
    loop on a claim session, no worker runtime (the plain loop's shape, on fairsched's
    table and policy stack). Tells the statements' share of an end-to-end miss from the
    runtime's.

    A head keeper raises the claim heads meanwhile, as every worker's does: without
    one, each claim walks the index entries of every job claimed before it."""
    with no_op_backlog(cfg) as dsn, Client(dsn) as client:

        def loop(n: int) -> None:
            with claimbench.claim_session(dsn) as conn:
                while leases := jobs_claim(conn, QUEUE, owner=f"loop-{n}", limit=batch):
                    leases_complete(conn, leases)

        keeper = HeadKeeper(client, Settings().head_refresh_seconds)
        keeper.start()
        try:
            with ThreadPoolExecutor(connections) as pool:
                list(pool.map(loop, range(connections)))  # re-raises a loop's error
        finally:
            keeper.stop()
        return drain_rate(dsn)


def scenario_e2e(cfg: BenchConfig, figures: list[Figure]) -> None:
    """(3) and (7): fairsched vs a plain SKIP LOCKED loop vs the peers, no-op jobs; and
    fairsched again on a large backlog, where claims must cost what they cost on a small one."""
    ours = Figure("e2e", "fairsched jobs/s (" + "+".join(cfg.policies) + ")", "jobs/s")
    plain = Figure("e2e", "plain SKIP LOCKED loop, 50/txn, jobs/s", "jobs/s")
    ratio = Figure("e2e", "fairsched / plain loop", "ratio", bar=">= 0.6")
    alone = Figure("e2e", "fairsched statements alone, 50/txn, no worker, jobs/s", "jobs/s")
    alone_ratio = Figure("e2e", "fairsched statements alone / plain loop", "ratio")
    cpu = {  # per runner: its clients' figure, its backends' figure
        runner: [Figure("e2e", f"{runner} {side}, CPU ms per 1k jobs", "ms") for side in (who, "backends")]
        for runner, who in (("fairsched", "workers"), ("plain loop", "client"))
    }
    cpu_ratio = Figure("e2e", "fairsched / plain loop, CPU per job (clients + backends)", "ratio")
    large_name = f"fairsched jobs/s, first {LARGE_WINDOW_SECONDS:g} s on a {cfg.large_backlog:,} backlog"
    large = Figure("e2e", large_name, "jobs/s")
    large_ratio = Figure("e2e", f"fairsched jobs/s, {cfg.large_backlog:,} backlog / {cfg.jobs:,}", "ratio")
    available = peers.peers_available()
    peer_figs = {
        name: (
            Figure("e2e", f"{name} jobs/s", "jobs/s"),
            Figure("e2e", f"fairsched / {name}", "ratio", bar=">= 2"),
        )
        for name, ok in available.items()
        if ok
    }
    for _ in range(cfg.repeats):
        ours_rate, ours_cpu = fairsched_e2e(cfg)
        ours.samples.append(ours_rate)
        with scratch_db(cfg.admin_dsn, migrate=False) as dsn:
            plain_run = peers.plain_loop(dsn, jobs=cfg.jobs, workers=cfg.workers * 2)
        plain_rate = plain_run.per_second
        plain.samples.append(plain_rate)
        plain_cpu = (
            None
            if plain_run.client_cpu is None
            else CpuPerJob.of(plain_run.jobs, plain_run.client_cpu, plain_run.server_cpu)
        )
        for runner, measured in (("fairsched", ours_cpu), ("plain loop", plain_cpu)):
            clients_fig, backends_fig = cpu[runner]
            if measured is not None:
                clients_fig.samples.append(measured.client)
            if measured is not None and measured.server is not None:
                backends_fig.samples.append(measured.server)
        if ours_cpu and plain_cpu and ours_cpu.total and plain_cpu.total:
            cpu_ratio.samples.append(ours_cpu.total / plain_cpu.total)
        ratio.samples.append(ours_rate / plain_rate)
        large_rate = fairsched_window(cfg, cfg.large_backlog, LARGE_WINDOW_SECONDS)
        large.samples.append(large_rate)
        large_ratio.samples.append(large_rate / ours_rate)
        alone_rate = statements_loop(cfg, connections=cfg.workers * 2)
        alone.samples.append(alone_rate)
        alone_ratio.samples.append(alone_rate / plain_rate)
        for name, (fig, fig_ratio) in peer_figs.items():
            with scratch_db(cfg.admin_dsn, migrate=False) as dsn:  # as many at once as our workers' slots
                result = (
                    peers.pgqueuer_run(dsn, jobs=cfg.jobs, workers=cfg.workers, batch_size=cfg.slots)
                    if name == "pgqueuer"
                    else peers.procrastinate_run(
                        dsn, jobs=max(1000, cfg.jobs // 10), workers=cfg.workers, concurrency=cfg.slots
                    )
                )
            rate = result.per_second
            fig.samples.append(rate)
            fig_ratio.samples.append(ours_rate / rate)
    figures.extend([ours, plain, ratio, alone, alone_ratio, large, large_ratio])
    figures.extend(fig for fig in [*cpu["fairsched"], *cpu["plain loop"], cpu_ratio] if fig.samples)
    for fig, fig_ratio in peer_figs.values():
        figures.extend([fig, fig_ratio])


# -- scenario: noisy neighbour ------------------------------------------------


@dataclass(frozen=True)
class NoisyRun:
    """Every started job's wait per tenant, the flooding tenant's throughput over the window,
    and how many of its jobs had not started when the window ended, in one run; with the
    small tenants' waits as spans on the database's clock and the commit probe's commits
    (fairsched's runs only)."""

    tenant_waits: dict[str, list[float]]
    big_rate: float
    big_left: int
    small_spans: list[tuple[float, float]] = field(default_factory=list)
    commits: Sequence[Commit] = ()

    @property
    def small_waits(self) -> list[float]:
        """The waits of the small tenants' jobs."""
        return [w for tenant, waits in self.tenant_waits.items() if tenant != BIG for w in waits]

    @property
    def tail_stalled(self) -> float:
        """Of the small tenants' waits from their p99's rank up (the waits that make the
        p99), the share that overlapped a stalled commit of the probe."""
        if not self.small_spans:
            return float("nan")
        by_wait = sorted(self.small_spans, key=lambda span: span[1] - span[0])
        tail = by_wait[nearest_rank(len(by_wait), 0.99) :]
        stalled = commitprobe.stalls(self.commits)
        return sum(commitprobe.overlapping(span, stalled) for span in tail) / len(tail)

    @classmethod
    def of(
        cls,
        jobs: Iterable[Sequence[Any]],
        window: tuple[float, float],
        flood: int,
        commits: Sequence[Commit] = (),
    ) -> NoisyRun:
        """From each started job's ``(tenant, wait, started at)`` (seconds; epoch seconds),
        the window's start and end, how many flood jobs were queued, and the commit
        probe's commits."""
        start, end = window
        waits: dict[str, list[float]] = {}
        big_starts: list[float] = []
        small_spans: list[tuple[float, float]] = []
        for tenant, wait, at in jobs:
            waits.setdefault(tenant, []).append(float(wait))
            if tenant == BIG:
                big_starts.append(float(at))
            else:
                small_spans.append((float(at) - float(wait), float(at)))
        in_window = sum(1 for at in big_starts if start <= at <= end)
        left = flood - sum(1 for at in big_starts if at <= end)
        return cls(waits, in_window / (end - start), left, small_spans, tuple(commits))


FLOOD_FACTOR = 100
"""The flooding tenant's volume, in small tenants' volumes (DESIGN.md section 7)."""
FLOOD_SATURATION = 1.2
"""How many windows' worth of work the flood alone gives every slot of the workers."""
SMALL_TENANTS = tuple(f"small{n}" for n in range(5))
SMALL_RATE = 10.0
"""Jobs per second each small tenant enqueues."""
NOISY_SETTLE_SECONDS = 1.0
"""How long the workers run before the window starts: their start-up (first claims on new
connections, first plans, slots filling) is not what the window measures."""


def noisy_job_ms(cfg: BenchConfig) -> int:
    """How long each job of the noisy-neighbour runs sleeps: long enough that the flood
    keeps every slot busy through :data:`NOISY_SETTLE_SECONDS` and past the end of the
    window, so that the small tenants compete with it throughout and its throughput is the
    workers' capacity, not its volume."""
    flood = FLOOD_FACTOR * SMALL_RATE * cfg.noisy_seconds  # the flood's jobs
    busy = cfg.workers * cfg.slots * (NOISY_SETTLE_SECONDS + cfg.noisy_seconds)  # slot-seconds
    return math.ceil(1000 * FLOOD_SATURATION * busy / flood)


def noisy_run(cfg: BenchConfig, runner: str, *, small: bool, flood: bool) -> NoisyRun:
    """One phase of the noisy neighbour on ``runner`` (fairsched, or a peer run as it
    ships): the small tenants each enqueueing :data:`SMALL_RATE` jobs/s over
    ``cfg.noisy_seconds``, and/or one tenant with a backlog of :data:`FLOOD_FACTOR` times a
    small tenant's volume queued first; every job sleeps :func:`noisy_job_ms`."""
    per_small = int(SMALL_RATE * cfg.noisy_seconds)
    flood_jobs = FLOOD_FACTOR * per_small if flood else 0
    if runner != "fairsched":
        with scratch_db(cfg.admin_dsn, migrate=False) as dsn:
            run = peers.peer_noisy_run(
                runner,
                dsn,
                workers=cfg.workers,
                slots=cfg.slots,
                job_ms=noisy_job_ms(cfg),
                flood=flood_jobs,
                small_tenants=SMALL_TENANTS if small else (),
                small_rate=SMALL_RATE,
                seconds=cfg.noisy_seconds,
                settle=NOISY_SETTLE_SECONDS,
                flood_tenant=BIG,
            )
        return NoisyRun.of(run.started, run.window, flood_jobs)
    job = {"ms": noisy_job_ms(cfg)}
    with scratch_db(cfg.admin_dsn) as dsn, Client(dsn) as client:
        # As queues are declared by default: the small tenants' jobs wake the workers.
        declare_bench_queue(client, cfg.policies, notify=True)
        enqueue_jobs(client, [JobSpec(job, BIG) for _ in range(flood_jobs)])
        with (
            worker_processes(dsn, cfg.workers, cfg.slots),
            psycopg.connect(dsn, autocommit=True) as clock,
        ):
            wait_listening(clock, cfg.workers)
            time.sleep(NOISY_SETTLE_SECONDS)  # the window leaves their start-up out
            with commit_probe(dsn) as commits:
                begin, started = time.monotonic(), db_clock(clock)
                for i in range(per_small if small else 0):
                    client.enqueue_many(QUEUE, [JobSpec(job, tenant) for tenant in SMALL_TENANTS])
                    time.sleep(max(0.0, begin + (i + 1) / SMALL_RATE - time.monotonic()))
                time.sleep(max(0.0, begin + cfg.noisy_seconds - time.monotonic()))
                window_end = db_clock(clock)
                if small:
                    wait_small_done(dsn, len(SMALL_TENANTS) * per_small)
        rows = figure_rows(dsn, "bench_waits", {"queue": QUEUE})
    return NoisyRun.of(rows, (started, window_end), flood_jobs, commits)


def wait_listening(conn: psycopg.Connection, workers: int, timeout: float = 120.0) -> None:
    """Poll until ``workers`` worker processes listen for jobs (their claimers run)."""
    poll(
        conn,
        ENGINE_QUERIES["workers_listening"],
        {"application_name": LISTENER_NAME},
        lambda listening: listening >= workers,
        interval=STARTED_POLL_SECONDS,
        timeout=timeout,
        what=f"{workers} workers were not listening",
    )


def wait_small_done(dsn: str, target: int, timeout: float = 300.0) -> None:
    """Poll until ``target`` small-tenant jobs have been claimed, or ``timeout`` passed
    (the figures then count the waits of the jobs claimed by then)."""
    with psycopg.connect(dsn, autocommit=True) as conn, suppress(TimeoutError):
        poll(
            conn,
            QUERIES["bench_claimed_except"],
            {"queue": QUEUE, "tenant": BIG},
            lambda claimed: claimed >= target,
            interval=0.1,
            timeout=timeout,
            what="the small tenants' jobs were not claimed",
        )


@dataclass
class NoisyFigures:
    """The noisy-neighbour figures of one runner (the bars are fairsched's)."""

    p50_base: Figure
    p99_base: Figure
    p50_flood: Figure
    p99_flood: Figure
    p99_ratio: Figure
    big_alone: Figure
    big_flood: Figure
    conserve: Figure
    big_left: Figure

    @classmethod
    def of(cls, runner: str) -> NoisyFigures:
        ours = runner == "fairsched"
        prefix = "" if ours else f"{runner} "

        def fig(name: str, unit: str, bar: str = "") -> Figure:
            return Figure("noisy", prefix + name, unit, bar=bar if ours else "")

        return cls(
            fig("small tenants p50 wait, no flood", "s"),
            fig("small tenants p99 wait, no flood", "s"),
            fig("small tenants p50 wait, flood", "s"),
            fig("small tenants p99 wait, flood", "s"),
            fig("p99 wait flood / no flood", "ratio", "<= 2"),
            fig("flooding tenant alone", "jobs/s"),
            fig("flooding tenant during flood", "jobs/s"),
            fig("flood throughput during / alone", "ratio", ">= 0.8"),
            fig("flood jobs unclaimed when the window ended, alone", "jobs"),
        )

    def add(self, base: NoisyRun, mixed: NoisyRun, alone: NoisyRun) -> None:
        self.p50_base.samples.append(percentile(base.small_waits, 0.5))
        self.p99_base.samples.append(percentile(base.small_waits, 0.99))
        self.p50_flood.samples.append(percentile(mixed.small_waits, 0.5))
        self.p99_flood.samples.append(percentile(mixed.small_waits, 0.99))
        self.p99_ratio.samples.append(self.p99_flood.samples[-1] / self.p99_base.samples[-1])
        self.big_alone.samples.append(alone.big_rate)
        self.big_flood.samples.append(mixed.big_rate)
        self.conserve.samples.append(mixed.big_rate / alone.big_rate)
        self.big_left.samples.append(alone.big_left)


@dataclass
class StallFigures:
    """What the commit probe met in fairsched's phases without and with the flood: the
    probe commits' p99 and slowest, and the share of the small tenants' top 1% waits that
    overlapped a commit of :data:`commitprobe.STALL_SECONDS` or longer."""

    p99: dict[str, Figure]
    slowest: dict[str, Figure]
    tail_stalled: dict[str, Figure]

    @classmethod
    def of(cls) -> StallFigures:
        stall_ms = f"{commitprobe.STALL_SECONDS * 1000:.0f} ms"

        def per_phase(name: str, unit: str) -> dict[str, Figure]:
            return {when: Figure("noisy", f"{name}, {when}", unit) for when in ("no flood", "flood")}

        return cls(
            per_phase("commit probe p99", "s"),
            per_phase("commit probe slowest", "s"),
            per_phase(f"small tenants' top 1% waits met a commit over {stall_ms}", "share"),
        )

    def add(self, base: NoisyRun, mixed: NoisyRun) -> None:
        for when, run in (("no flood", base), ("flood", mixed)):
            latencies = [c.seconds for c in run.commits]
            self.p99[when].samples.append(percentile(latencies, 0.99))
            self.slowest[when].samples.append(max(latencies, default=float("nan")))
            self.tail_stalled[when].samples.append(run.tail_stalled)

    def figures(self) -> list[Figure]:
        return [fig for group in (self.p99, self.slowest, self.tail_stalled) for fig in group.values()]


def scenario_noisy(cfg: BenchConfig, figures: list[Figure], plots: dict[str, Any]) -> None:
    """(4) and (7): small tenants' p50/p99 wait with and without one tenant flooding 100x
    their volume, and the flooding tenant's throughput during the flood vs alone (work
    conservation); on fairsched, then on each peer installed, in every repeat. Beside
    fairsched's phases a commit probe records the server's commit latency, so that a tail
    made by stalled WAL flushes shows as such."""
    runners = ["fairsched", *(name for name, found in peers.peers_available().items() if found)]
    figs = {runner: NoisyFigures.of(runner) for runner in runners}
    stalls = StallFigures.of()
    for _ in range(cfg.repeats):
        for runner in runners:
            base = noisy_run(cfg, runner, small=True, flood=False)
            mixed = noisy_run(cfg, runner, small=True, flood=True)
            alone = noisy_run(cfg, runner, small=False, flood=True)
            figs[runner].add(base, mixed, alone)
            if runner == "fairsched":
                stalls.add(base, mixed)
                plots["noisy_waits"] = {"no flood": base.tenant_waits, "flood": mixed.tenant_waits}
    figures.extend(fig for group in figs.values() for fig in vars(group).values())
    figures.extend(stalls.figures())


# -- scenario: weighted shares ------------------------------------------------


def scenario_shares(cfg: BenchConfig, figures: list[Figure]) -> None:
    """(5): shares of the first ``shares_claims`` claims for weights 1:2:5 under saturation
    (each tenant has as many jobs queued)."""
    claims = cfg.shares_claims
    weights = {"w1": 1.0, "w2": 2.0, "w5": 5.0}
    total = sum(weights.values())
    figs = {
        t: Figure(
            "shares",
            f"tenant {t} share (entitled {100 * w / total:.1f}%)",
            "%",
            bar=f"{100 * w / total:.1f} ± 2",
        )
        for t, w in weights.items()
    }
    for _ in range(cfg.repeats):
        with scratch_db(cfg.admin_dsn) as dsn, Client(dsn) as client:
            declare_bench_queue(client, ("weighted",))
            for tenant, weight in weights.items():
                client.set_tenant_share(QUEUE, tenant, weight=weight)
                enqueue_jobs(client, [JobSpec({}, tenant) for _ in range(claims)])
            with worker_processes(dsn, cfg.workers, cfg.slots):
                wait_drained(dsn)
            rows = figure_rows(dsn, "bench_first_claims", {"queue": QUEUE, "limit": claims})
        for tenant, fig in figs.items():
            fig.samples.append(100.0 * sum(1 for (t,) in rows if t == tenant) / len(rows))
    figures.extend(figs.values())


# -- scenario: worker memory --------------------------------------------------


def rss_mb(pid: int) -> float:
    """Resident memory of a process, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def scenario_memory(cfg: BenchConfig, figures: list[Figure]) -> None:
    """(6): resident memory of one worker process with 64 busy slots."""
    fig = Figure("memory", "worker RSS at 64 slots", "MB", bar="<= 150")
    for _ in range(cfg.repeats):
        with scratch_db(cfg.admin_dsn) as dsn:
            with Client(dsn) as client:
                declare_bench_queue(client, cfg.policies)
                enqueue_jobs(client, [JobSpec({"ms": 50}, f"t{n % 64}") for n in range(5000)])
            with worker_processes(dsn, 1, 64) as [proc]:
                wait_drained(dsn, left=4000)
                peak = 0.0
                for _ in range(5):
                    peak = max(peak, rss_mb(proc.pid))
                    time.sleep(0.2)
                fig.samples.append(peak)
    figures.append(fig)


# -- scenarios: claim throughput per stack, claim cost vs backlog ------------


def scenario_claims(cfg: BenchConfig, figures: list[Figure]) -> None:
    """(1): claim throughput of every policy stack against plain fifo on the same data,
    measured in alternating blocks on one backlog of ``claims_backlog`` jobs."""
    fifo = ("fifo",)
    stacks = [stack for stack in claimbench.STACKS if stack != fifo]
    figs = {
        stack: Figure(
            "claims",
            f"{'+'.join(stack)} / fifo claim rate",
            "ratio",
            bar=">= 0.8" if stack == ("weighted", "aging", "serial") else "",
        )
        for stack in stacks
    }
    fifo_fig = Figure("claims", "fifo claims/s (limit 1)", "claims/s")
    for _ in range(cfg.repeats):
        with scratch_db(cfg.admin_dsn) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
            with Client(dsn) as client:
                declare_bench_queue(client, fifo)
            claimbench.backlog_build(conn, QUEUE, jobs=cfg.claims_backlog)
            with claimbench.claim_session(dsn) as session:
                for stack in stacks:
                    base, rate = claimbench.claim_rates_alternated(session, fifo, stack, QUEUE)
                    figs[stack].samples.append(rate / base)
                    fifo_fig.samples.append(base)
    figures.append(fifo_fig)
    figures.extend(figs.values())


def scenario_backlog(cfg: BenchConfig, figures: list[Figure], plots: dict[str, Any]) -> None:
    """(2): shared buffers per claim and claim rate as the backlog grows through
    ``backlogs`` (10k -> 100k -> 1M), for plain fifo and the composed stack (1k tenants,
    10k aggregates)."""
    stacks = [("fifo",), cfg.policies]
    sizes = cfg.backlogs
    growth_name = f"{short_count(sizes[-1])} / {short_count(sizes[0])}"
    buffers = {
        (stack, n): Figure("backlog", f"{'+'.join(stack)} buffers/claim at {n:,}", "buffers")
        for stack in stacks
        for n in sizes
    }
    rates = {
        (stack, n): Figure("backlog", f"{'+'.join(stack)} claims/s at {n:,}", "claims/s")
        for stack in stacks
        for n in sizes
    }
    growth = {
        stack: Figure("backlog", f"{'+'.join(stack)} buffers {growth_name}", "ratio", bar="<= 1.5")
        for stack in stacks
    }
    for _ in range(cfg.repeats):
        for n in sizes:
            with scratch_db(cfg.admin_dsn) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
                with Client(dsn) as client:
                    declare_bench_queue(client, ("fifo",))
                claimbench.backlog_build(conn, QUEUE, jobs=n)
                with claimbench.claim_session(dsn) as session:
                    for stack in stacks:
                        claimbench.queue_policies_set(conn, QUEUE, stack)
                        buffers[(stack, n)].samples.append(claimbench.claim_buffers(conn, stack, QUEUE))
                        rates[(stack, n)].samples.append(
                            claimbench.claims_per_second(session, stack, QUEUE, claims=300)
                        )
        for stack in stacks:
            growth[stack].samples.append(
                buffers[(stack, sizes[-1])].samples[-1] / buffers[(stack, sizes[0])].samples[-1]
            )
    plots["backlog"] = {"+".join(stack): [(n, rates[(stack, n)].median) for n in sizes] for stack in stacks}
    figures.extend([*buffers.values(), *rates.values(), *growth.values()])


def scenario_churn(cfg: BenchConfig, figures: list[Figure]) -> None:
    """(2) under churn: shared buffers per claim on a fresh backlog of ``churn_backlog``
    jobs, then again after as many were claimed and completed (refilled as they drain),
    with no VACUUM but autovacuum as the table's settings ship, for fifo and the stack."""
    n = cfg.churn_backlog
    stacks = [("fifo",), cfg.policies]
    figs = {
        stack: (
            Figure("churn", f"{'+'.join(stack)} buffers/claim after churn / fresh", "ratio", bar="<= 1.5"),
            Figure("churn", f"{'+'.join(stack)} buffers/claim, fresh {n:,} backlog", "buffers"),
            Figure("churn", f"{'+'.join(stack)} buffers/claim after {n:,} claims+completions", "buffers"),
            Figure("churn", f"{'+'.join(stack)} claims+completions/s while churning", "jobs/s"),
            Figure("churn", f"{'+'.join(stack)} autovacuum runs finished while churning", "runs"),
        )
        for stack in stacks
    }
    for _ in range(cfg.repeats):
        for stack in stacks:
            with scratch_db(cfg.admin_dsn) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
                with Client(dsn) as client:
                    declare_bench_queue(client, ("fifo",))
                result = claimbench.claim_buffers_under_churn(conn, stack, QUEUE, backlog=n)
            ratio, fresh, churned, rate, vacuums = figs[stack]
            ratio.samples.append(result.ratio)
            fresh.samples.append(result.fresh_buffers)
            churned.samples.append(result.churned_buffers)
            rate.samples.append(result.churned / result.seconds)
            vacuums.samples.append(result.autovacuums)
    figures.extend(fig for group in figs.values() for fig in group)


# -- scenario: retention over a long run ---------------------------------------------

RETENTION_WINDOW = 50_000
"""The most unfinished jobs the retention scenario keeps queued (refilled as they drain)."""
RETENTION_PRUNE_SECONDS = 1.0
"""The interval of the scenario's pruner (a worker's default is 60 s; the run is short)."""


@dataclass(frozen=True)
class TenthMark:
    """Where a retention run stood when one more tenth of its jobs had finished."""

    at: float
    table_bytes: int
    buffers_per_claim: int


def one_value(conn: psycopg.Connection, query: LiteralString, params: dict[str, Any]) -> int:
    """The whole number ``query`` returns."""
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return int(row[0])


def retention_marks(cfg: BenchConfig, dsn: str, total: int) -> list[TenthMark]:
    """Run ``total`` no-op jobs through real workers, at most :data:`RETENTION_WINDOW`
    queued at a time, while a pruner deletes finished jobs a second after they finished;
    a mark when the run starts (first job finished) and at each tenth of ``total``."""
    window = max(min(RETENTION_WINDOW, total // 4), 1000)
    tenth = max(total // 10, 1)
    with Client(dsn) as client:
        client.declare_queue(
            QUEUE,
            QueueSettings(
                notify=False,
                lease_seconds=60,
                policies=list(cfg.policies),
                finished_retention_seconds=1,
                history_retention_seconds=60,
            ),
        )
        tenants = itertools.cycle([f"t{n}" for n in range(10)])
        enqueued = 0

        def refill(unfinished: int) -> None:
            nonlocal enqueued
            # Enqueue past ``total`` by a window, so the last tenth runs on a full backlog too.
            room = min(window - unfinished, total + window - enqueued)
            if room >= window // 2:
                enqueue_jobs(client, [JobSpec({}, next(tenants)) for _ in range(room)])
                enqueued += room

        refill(0)
        pruner = Pruner(client, RETENTION_PRUNE_SECONDS)
        pruner.start()
        marks: list[TenthMark] = []
        try:
            with (
                worker_processes(dsn, cfg.workers, cfg.slots),
                psycopg.connect(dsn, autocommit=True) as watch,
                claimbench.claim_session(dsn) as explain,
            ):
                counted = {"queue": QUEUE, "cap": window + 1}
                while len(marks) < 11:
                    unfinished = one_value(watch, QUERIES["bench_unfinished"], counted)
                    done = enqueued - unfinished
                    if (not marks and done > 0) or (marks and done >= tenth * len(marks)):
                        size = one_value(watch, "SELECT pg_total_relation_size('fairsched.jobs')", {})
                        buffers = claimbench.claim_buffers(explain, cfg.policies, QUEUE)
                        marks.append(TenthMark(time.monotonic(), size, buffers))
                    refill(unfinished)
                    time.sleep(DRAIN_POLL_SECONDS)
        finally:
            pruner.stop()
    return marks


def scenario_retention(cfg: BenchConfig, figures: list[Figure]) -> None:
    """(12) retention on, ``churn_backlog`` jobs through (1M by default): the jobs table's
    size, the shared buffers a claim reads and the end-to-end throughput over the last
    tenth of the run against the first tenth."""
    total = cfg.churn_backlog
    size = Figure("retention", "table size, last tenth / first tenth", "ratio", bar="<= 1.2")
    buffers = Figure("retention", "buffers/claim, last tenth / first tenth", "ratio", bar="<= 1.2")
    slowdown = Figure("retention", "jobs/s, first tenth / last tenth", "ratio", bar="<= 1.2")
    first = Figure("retention", f"jobs/s, first tenth of {total:,}", "jobs/s")
    last = Figure("retention", f"jobs/s, last tenth of {total:,}", "jobs/s")
    table = Figure("retention", "jobs table + indexes at the end", "MB")
    for _ in range(cfg.repeats):
        with scratch_db(cfg.admin_dsn) as dsn:
            marks = retention_marks(cfg, dsn, total)
        tenth = max(total // 10, 1)
        first_rate = tenth / (marks[1].at - marks[0].at)
        last_rate = tenth / (marks[10].at - marks[9].at)
        size.samples.append(marks[10].table_bytes / marks[1].table_bytes)
        buffers.samples.append(marks[10].buffers_per_claim / max(marks[1].buffers_per_claim, 1))
        slowdown.samples.append(first_rate / last_rate)
        first.samples.append(first_rate)
        last.samples.append(last_rate)
        table.samples.append(marks[10].table_bytes / 2**20)
    figures.extend([size, buffers, slowdown, first, last, table])


# -- running and reporting ----------------------------------------------------

SCENARIOS = ("claims", "backlog", "churn", "e2e", "noisy", "shares", "memory", "retention", "rate")


def run(cfg: BenchConfig, scenarios: Sequence[str]) -> tuple[list[Figure], dict[str, Any]]:
    """Run the chosen scenarios; returns the figures and the raw data for plots."""
    figures: list[Figure] = []
    plots: dict[str, Any] = {}
    for name in scenarios:
        if name == "claims":
            scenario_claims(cfg, figures)
        elif name == "backlog":
            scenario_backlog(cfg, figures, plots)
        elif name == "churn":
            scenario_churn(cfg, figures)
        elif name == "e2e":
            scenario_e2e(cfg, figures)
        elif name == "noisy":
            scenario_noisy(cfg, figures, plots)
        elif name == "shares":
            scenario_shares(cfg, figures)
        elif name == "memory":
            scenario_memory(cfg, figures)
        elif name == "retention":
            scenario_retention(cfg, figures)
        elif name == "rate":
            from bench.rate import scenario_rate  # it builds on this module

            scenario_rate(cfg, figures)
        else:
            raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    return figures, plots


def to_json(figures: Sequence[Figure], cfg: BenchConfig) -> str:
    """The results as JSON (configuration without the DSN)."""
    config = {k: v for k, v in asdict(cfg).items() if k != "admin_dsn"}
    return json.dumps({"config": config, "figures": [f.as_dict() for f in figures]}, indent=2)


def render(figures: Sequence[Figure]) -> Any:
    """The results as a rich table: ratios first within each scenario."""
    from rich.table import Table

    table = Table(title="fairsched bench (median of repeats; min..max)")
    for column in ("scenario", "figure", "median", "min..max", "unit", "bar"):
        table.add_column(column, justify="right" if column in ("median", "min..max") else "left")
    ordered = sorted(figures, key=lambda f: (SCENARIOS.index(f.scenario), f.unit != "ratio"))
    for fig in ordered:
        low, high = min(fig.samples, default=float("nan")), max(fig.samples, default=float("nan"))
        table.add_row(
            fig.scenario, fig.name, f"{fig.median:,.3g}", f"{low:,.3g}..{high:,.3g}", fig.unit, fig.bar
        )
    return table


def write_plots(plots: dict[str, Any], folder: Path) -> list[Path]:
    """PNG charts: the noisy-neighbour run's wait distribution per tenant, without and with
    the flood; claim rate vs backlog."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    if "noisy_waits" in plots:
        phases = plots["noisy_waits"]
        fig, axes = plt.subplots(1, len(phases), figsize=(12, 4), sharex=True, sharey=True)
        for ax, (phase, tenant_waits) in zip(axes, phases.items(), strict=True):
            for tenant, waits in sorted(tenant_waits.items()):
                ordered = sorted(max(w, 1e-4) for w in waits)  # a log axis has no 0
                ax.plot(ordered, [i / len(ordered) for i in range(1, len(ordered) + 1)], label=tenant)
            ax.set(xlabel="wait (s)", xscale="log", title=f"wait per tenant, {phase}")
            ax.legend()
        axes[0].set_ylabel("fraction of the tenant's jobs")
        written.append(folder / "noisy_waits.png")
        fig.savefig(written[-1], dpi=100)
        plt.close(fig)
    if "backlog" in plots:
        fig, ax = plt.subplots(figsize=(7, 4))
        for label, points in plots["backlog"].items():
            ax.plot([n for n, _ in points], [r for _, r in points], marker="o", label=label)
        ax.set(xlabel="backlog (jobs)", ylabel="claims/s", xscale="log", title="claim rate vs backlog")
        ax.legend()
        written.append(folder / "backlog.png")
        fig.savefig(written[-1], dpi=100)
        plt.close(fig)
    return written
