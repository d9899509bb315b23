"""Soak: producers and worker processes under random crash injection, then the ledger's verdict.

:func:`run_soak` enqueues jobs at a steady rate for ``duration_seconds`` while
worker processes (``fairsched worker --app bench.soak:app``) execute them
and a chaos thread kills workers with SIGKILL (restarting them under a new
owner) or stops them with SIGSTOP for longer than the lease before SIGCONT.
Then it lets the queue drain, stops the workers, and checks the ledger
(:mod:`bench.ledger`): jobs lost, duplicated (and for how long two
executions of one job both ran, against the lease), stale completions accepted.

:class:`Soak` is the same load without the chaos thread, for tests that inject
their own faults (a server restart, killed connections, PgBouncer, a wrong
clock). Run either on a database of its own: it uses the queue ``soak``, and the
ledger's tables in the lab's schema (``fairsched_lab``), emptied when it starts and
dropped once checked.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any, TypeVar

import psycopg

from bench.ledger import (
    LedgerReport,
    ledger_check,
    ledger_create,
    ledger_death,
    ledger_drop,
    ledger_end,
    ledger_pause,
    ledger_resume,
    ledger_start,
)
from bench.sql import QUERIES
from fairsched.client import Client
from fairsched.db.connection import connect, operation, redact
from fairsched.engine.enqueue import JobSpec
from fairsched.errors import DatabaseError, FairschedError, InvalidInput, LeaseLost, RetryableError
from fairsched.settings import QueueSettings, Settings
from fairsched.worker.app import App, Job

QUEUE = "soak"
APP_SPEC = "bench.soak:app"
LAB_ROOT = Path(__file__).resolve().parents[1]
"""The folder that holds the lab's package ``bench`` (the repository's root)."""
LEDGER_URL_ENV = "FAIRSCHED_LEDGER_URL"
"""Where the soak handler writes its ledger (default: ``FAIRSCHED_DATABASE_URL``)."""
STEP_SECONDS = 0.05
"""The soak handler reports progress this often while it works."""

T = TypeVar("T")

app = App()
_local = threading.local()


# -- the handler the soak's workers run -----------------------------------------


def _ledger_connection() -> psycopg.Connection:
    conn: psycopg.Connection | None = getattr(_local, "conn", None)
    if conn is None or conn.closed or conn.broken:
        dsn = os.environ.get(LEDGER_URL_ENV) or os.environ["FAIRSCHED_DATABASE_URL"]
        conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=None, connect_timeout=5)
        _local.conn = conn
    return conn


def _record(write: Callable[[psycopg.Connection], None]) -> None:
    try:
        write(_ledger_connection())
    except (psycopg.Error, DatabaseError) as e:
        raise RetryableError(f"ledger unavailable: {redact(str(e))}") from None


@app.handler(QUEUE)
def execute(job: Job) -> None:
    """Record the execution, work ``payload["work"]`` seconds reporting progress, record its end."""
    _record(lambda conn: ledger_start(conn, job.lease))
    finished = False
    try:
        deadline = time.monotonic() + float(job.payload.get("work", 0.0))
        step = 0
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, STEP_SECONDS))
            step += 1
            job.progress(step)
        if job.lost:
            raise LeaseLost(f"job {job.id}: lease lost before the work was recorded")
        finished = True
    finally:
        _record(lambda conn: ledger_end(conn, job.lease, finished=finished))


# -- worker processes -------------------------------------------------------------


@dataclass
class SoakWorker:
    """One ``fairsched worker`` process of the soak, under an owner name of its own."""

    owner: str
    proc: subprocess.Popen[bytes]
    log: IO[bytes] | None = None

    @classmethod
    def start(cls, owner: str, slots: int, env: Mapping[str, str], log_dir: Path | None) -> SoakWorker:
        """Start ``fairsched worker`` for the soak queue."""
        args = [sys.executable, "-c", "from fairsched.cli.main import main; main()", "worker"]
        args += ["--app", APP_SPEC, "--queue", f"{QUEUE}={slots}", "--owner", owner]
        log = (log_dir / f"{owner}.log").open("wb") if log_dir is not None else None
        out: IO[bytes] | int = log if log is not None else subprocess.DEVNULL
        proc = subprocess.Popen(args, env=dict(env), stdout=out, stderr=subprocess.STDOUT)
        return cls(owner, proc, log)

    def kill(self) -> None:
        """SIGKILL (a stopped process is continued so it can die) and reap."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.send_signal(signal.SIGCONT)
        self.proc.wait()
        self._close_log()

    def stop(self, timeout: float) -> None:
        """SIGTERM (graceful: running jobs finish or are released), SIGKILL after ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close_log()

    def _close_log(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None


# -- the run ----------------------------------------------------------------------


@dataclass(frozen=True)
class SoakResult:
    """What one soak run did and what the ledger found."""

    duration_seconds: float
    jobs_enqueued: int
    jobs_processed: int
    crashes: int
    pauses: int
    unexpected_exits: int
    stale_rejections: int
    drained: bool
    report: LedgerReport

    @property
    def lost(self) -> int:
        return self.report.lost

    @property
    def duplicate_executions(self) -> int:
        return self.report.duplicate_executions

    @property
    def longest_duplicate_window_seconds(self) -> float:
        return self.report.longest_overlap_seconds

    @property
    def ok(self) -> bool:
        """Nothing lost or wrongly accepted, duplicates within the lease, no worker died
        on its own, and the backlog drained."""
        return self.report.ok and self.unexpected_exits == 0 and self.drained

    def summary(self) -> str:
        """The figures, one per line."""
        r = self.report
        return "\n".join(
            [
                f"soak: {self.duration_seconds:.0f}s, lease {r.lease_seconds:g}s",
                f"jobs enqueued (acknowledged): {self.jobs_enqueued}",
                f"jobs processed (succeeded):   {self.jobs_processed}",
                f"crashes survived (kill -9):   {self.crashes}",
                f"pauses survived (SIGSTOP > lease, SIGCONT): {self.pauses}",
                f"workers that exited on their own: {self.unexpected_exits}",
                f"jobs lost: {r.lost}  not succeeded: {r.not_succeeded}  drained: {self.drained}",
                f"duplicate executions: {r.duplicate_executions} (jobs: {r.duplicated})",
                f"longest duplicate window: {r.longest_overlap_seconds:.3f}s (lease {r.lease_seconds:g}s)",
                f"re-executions before the first lease ran out: {r.premature}"
                f" (re-executions claimed {_redelivery(r)} after the claim before)",
                f"ordering violations within aggregates: {r.ordering_violations}",
                f"unexpected executions: {r.unexpected}",
                f"stale completions accepted: {r.stale_accepted}  rejected: {self.stale_rejections}",
                f"verdict: {'ok' if self.ok else 'FAILED'}",
            ]
        )


def _redelivery(report: LedgerReport) -> str:
    low, high = report.shortest_redelivery_seconds, report.longest_redelivery_seconds
    return "-" if low is None or high is None else f"{low:.2f}-{high:.2f}s"


class Soak:
    """A running load: producers and soak workers, with faults injected from outside.

    >>> with Soak(dsn, workers=2) as soak:              # doctest: +SKIP
    ...     soak.run_for(5)
    ...     soak.kill(0)
    ...     soak.run_for(5)
    >>> print(soak.result.summary())                    # doctest: +SKIP

    Leaving the block stops production, drains the queue, stops the workers and
    checks the ledger into :attr:`result`. The soak's own bookkeeping uses short
    connections retried through outages, so faults may hit the database too.
    Workers and the producer connect to ``worker_dsn`` and ``producer_dsn`` when
    given (e.g. through PgBouncer); migrations, bookkeeping and the ledger use ``dsn``.
    With ``aggregates``, each tenant's jobs belong to that many aggregates (sequence
    numbers 1, 2, …), to be run on a queue whose ``policies`` hold ``serial``; the
    checker then counts ordering violations. Worker ``i`` gets the extra variables
    ``worker_envs[i % len(worker_envs)]`` (e.g. libfaketime's ``LD_PRELOAD`` and
    ``FAKETIME`` for a worker whose clock is wrong; preload the library rather than
    wrap the command, so signals reach the worker). The ledger's tables are dropped once
    checked, unless ``keep_ledger`` (for a test that reads them afterwards, then drops
    them with :func:`bench.ledger.ledger_drop`).
    """

    def __init__(
        self,
        dsn: str,
        *,
        workers: int = 3,
        slots: int = 4,
        rate: float = 60.0,
        tenants: int = 5,
        lease_seconds: float = 2.0,
        work_seconds: tuple[float, float] = (0.02, 0.25),
        drain_timeout: float = 120.0,
        seed: int | None = None,
        log_dir: Path | None = None,
        worker_dsn: str | None = None,
        producer_dsn: str | None = None,
        worker_env: Mapping[str, str] | None = None,
        worker_envs: Sequence[Mapping[str, str]] = ({},),
        policies: Sequence[str] = ("fifo",),
        aggregates: int = 0,
        keep_ledger: bool = False,
    ) -> None:
        if workers < 1 or slots < 1 or rate <= 0 or lease_seconds <= 0:
            raise InvalidInput("workers, slots, rate and lease must be positive")
        self.dsn = dsn
        self.slots = slots
        self.rate = rate
        self.tenants = tenants
        self.lease_seconds = lease_seconds
        self.work_seconds = work_seconds
        self.drain_timeout = drain_timeout
        self.rng = random.Random(seed)
        self.log_dir = log_dir
        self.worker_envs = [dict(extra) for extra in worker_envs] or [{}]
        self.policies = list(policies)
        self.aggregates = aggregates
        self.keep_ledger = keep_ledger
        self.env = _worker_env(worker_dsn or dsn, dsn, lease_seconds, worker_env)
        self.worker_count = workers
        self.workers: list[SoakWorker] = []
        self.crashes = 0
        self.pauses = 0
        self.unexpected_exits = 0
        self.acknowledged: list[int] = []
        self.result: SoakResult | None = None
        self._generation = 0
        self._stop = threading.Event()
        self._errors: list[BaseException] = []
        self._admin = Client(dsn, settings=Settings(database_url=dsn, prepare_threshold=None))
        producer = producer_dsn or dsn
        self._client = Client(producer, settings=Settings(database_url=producer, prepare_threshold=None))
        self._producer = threading.Thread(target=self._produce, name="soak-producer", daemon=True)
        self._began = 0.0
        self._started_db: datetime | None = None

    # -- lifecycle ---------------------------------------------------------------

    def __enter__(self) -> Soak:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.finish()
        else:
            self.close()

    def start(self) -> None:
        """Declare the queue, reset the ledger, start the workers and the producer."""
        self._admin.migrate()
        self._admin.declare_queue(
            QUEUE,
            QueueSettings(
                lease_seconds=self.lease_seconds,
                max_attempts=1000,
                unknown_max_attempts=1000,
                backoff_base_seconds=0.05,
                backoff_max_seconds=0.5,
                policies=self.policies,
            ),
        )
        with connect(self.dsn) as conn:
            with operation("soak_unfinished"):
                row = conn.execute(QUERIES["soak_unfinished"], {"queue": QUEUE}).fetchone()
            if row is not None and row[0]:
                raise InvalidInput(f"queue {QUEUE!r} holds {row[0]} unfinished jobs of an earlier run")
            ledger_create(conn, reset=True)
            with operation("soak_now"):
                now = conn.execute(QUERIES["soak_now"]).fetchone()
        self._started_db = now[0] if now else None
        self.workers = [self._spawn(i) for i in range(self.worker_count)]
        self._began = time.monotonic()
        self._producer.start()

    def finish(self) -> SoakResult:
        """Stop producing, drain, stop the workers, check the ledger."""
        duration = time.monotonic() - self._began
        self._stop.set()
        self._producer.join()
        try:
            self.restart_dead()
            drained = self._drain()
        finally:
            self.close()
        if self._errors:
            raise self._errors[0]
        report, stale = self._retrying(self._check)
        if not self.keep_ledger:
            self._retrying(ledger_drop)
        self.result = SoakResult(
            duration_seconds=duration,
            jobs_enqueued=len(self.acknowledged),
            jobs_processed=report.succeeded,
            crashes=self.crashes,
            pauses=self.pauses,
            unexpected_exits=self.unexpected_exits,
            stale_rejections=stale,
            drained=drained,
            report=report,
        )
        return self.result

    def close(self) -> None:
        """Stop producing and stop the workers (no drain, no check); safe to call twice."""
        self._stop.set()
        for worker in self.workers:
            worker.stop(timeout=15.0)
        self._client.close()
        self._admin.close()

    # -- faults -----------------------------------------------------------------

    def run_for(self, seconds: float) -> None:
        """Let the load run; fails early when the producer failed."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.5))
            if self._errors:
                raise self._errors[0]

    def kill(self, index: int) -> None:
        """SIGKILL worker ``index``, record its death, start a fresh one in its place."""
        victim = self.workers[index]
        victim.kill()
        self._record_death(victim.owner)
        self.workers[index] = self._spawn(index)
        self.crashes += 1

    def pause(self, index: int, seconds: float) -> None:
        """SIGSTOP worker ``index`` for ``seconds``, then SIGCONT."""
        victim = self.workers[index]
        victim.proc.send_signal(signal.SIGSTOP)
        pause_id = self._retrying(lambda conn: ledger_pause(conn, victim.owner))
        time.sleep(seconds)
        self._retrying(lambda conn: ledger_resume(conn, pause_id))
        victim.proc.send_signal(signal.SIGCONT)
        self.pauses += 1

    def restart_dead(self) -> None:
        """Replace workers that exited on their own (counted: that is a bug)."""
        for i, worker in enumerate(self.workers):
            if worker.proc.poll() is not None:
                self.unexpected_exits += 1
                self._record_death(worker.owner)
                self.workers[i] = self._spawn(i)

    def chaos(self, duration: float, every: tuple[float, float], pause_share: float) -> None:
        """For ``duration`` seconds, every ``every`` seconds (random in the range), kill a
        random worker or (``pause_share`` of the time) pause it for 1.5-2.5 leases."""
        deadline = time.monotonic() + duration
        while (left := deadline - time.monotonic()) > 0:
            self.run_for(min(left, self.rng.uniform(*every)))
            if time.monotonic() >= deadline:
                break
            self.restart_dead()
            i = self.rng.randrange(len(self.workers))
            if self.rng.random() < pause_share:
                self.pause(i, self.lease_seconds * self.rng.uniform(1.5, 2.5))
            else:
                self.kill(i)

    # -- inside ---------------------------------------------------------------------

    def _spawn(self, index: int) -> SoakWorker:
        self._generation += 1
        owner = f"soak-w{index}-g{self._generation}"
        env = {**self.env, **self.worker_envs[index % len(self.worker_envs)]}
        return SoakWorker.start(owner, self.slots, env, self.log_dir)

    def _record_death(self, owner: str) -> None:
        self._retrying(lambda conn: ledger_death(conn, owner))

    def _retrying(self, fn: Callable[[psycopg.Connection], T]) -> T:
        """``fn`` on a short connection of the soak's own, retried through outages."""
        failures = 0
        while True:
            try:
                with connect(self.dsn) as conn:
                    return fn(conn)
            except DatabaseError:
                failures += 1
                if failures > 120:
                    raise
                time.sleep(0.5)

    def _produce(self) -> None:
        """Enqueue ``rate`` jobs per second in small batches; a batch is retried
        (idempotently) until the database acknowledges it."""
        prefix = uuid.uuid4().hex[:8]
        rng = random.Random(self.rng.random())
        batch = max(1, min(50, int(self.rate / 10)))
        interval = batch / self.rate
        n = 0
        next_at = time.monotonic()
        seqs: dict[tuple[str, str], int] = {}
        try:
            while not self._stop.is_set():
                specs = []
                for i in range(batch):
                    tenant = f"t{rng.randrange(self.tenants)}"
                    key = seq = None
                    if self.aggregates:
                        key = f"a{rng.randrange(self.aggregates)}"
                        seq = seqs[(tenant, key)] = seqs.get((tenant, key), 0) + 1
                    specs.append(
                        JobSpec(
                            {"work": round(rng.uniform(*self.work_seconds), 3), "n": n + i},
                            tenant=tenant,
                            aggregate_key=key,
                            aggregate_seq=seq,
                            idempotency_key=f"soak-{prefix}-{n + i}",
                        )
                    )
                ids = self._enqueue(specs)
                if ids is None:
                    return
                self.acknowledged.extend(ids)
                n += batch
                next_at += interval
                self._stop.wait(max(0.0, next_at - time.monotonic()))
        except BaseException as e:
            self._errors.append(e)

    def _enqueue(self, specs: list[JobSpec]) -> list[int] | None:
        while True:
            try:
                return self._client.enqueue_many(QUEUE, specs)
            except DatabaseError:
                if self._stop.wait(0.2):
                    return None

    def _drain(self) -> bool:
        """Wait until the soak queue has no unfinished job; ``False`` after the timeout."""
        deadline = time.monotonic() + self.drain_timeout
        while True:
            row = self._retrying(
                lambda conn: conn.execute(QUERIES["soak_unfinished"], {"queue": QUEUE}).fetchone()
            )
            if row is not None and row[0] == 0:
                return True
            if time.monotonic() > deadline:
                return False
            self.restart_dead()
            time.sleep(0.5)

    def _check(self, conn: psycopg.Connection) -> tuple[LedgerReport, int]:
        report = ledger_check(
            conn, self.acknowledged, lease_seconds=self.lease_seconds, serial=self.aggregates > 0
        )
        with operation("ledger_stale_rejections"):
            row = conn.execute(
                QUERIES["ledger_stale_rejections"], {"queue": QUEUE, "since": self._started_db}
            ).fetchone()
        return report, row[0] if row else 0


def run_soak(
    dsn: str,
    duration_seconds: float,
    *,
    chaos_every: tuple[float, float] = (1.0, 3.0),
    pause_share: float = 0.3,
    progress: Callable[[str], None] | None = None,
    **options: Any,
) -> SoakResult:
    """Produce, run and crash workers for ``duration_seconds``; drain; check the ledger.

    Every ``chaos_every`` seconds (random in the range) one worker is killed with
    SIGKILL and restarted, or (``pause_share`` of the time) stopped for 1.5-2.5
    leases and continued. ``options`` go to :class:`Soak` (workers, slots, rate,
    tenants, lease_seconds, work_seconds, seed, log_dir, …).
    """
    if duration_seconds <= 0:
        raise InvalidInput("the soak's duration must be positive")
    say = progress or (lambda _line: None)
    soak = Soak(dsn, **options)
    with soak:
        deadline = time.monotonic() + duration_seconds
        while (left := deadline - time.monotonic()) > 0:
            soak.chaos(min(left, 30.0), chaos_every, pause_share)
            elapsed = duration_seconds - max(0.0, deadline - time.monotonic())
            enqueued = len(soak.acknowledged)
            say(f"{elapsed:.0f}s: {enqueued} enqueued, {soak.crashes} kills, {soak.pauses} pauses")
        say("draining")
    assert soak.result is not None
    return soak.result


def _worker_env(
    worker_dsn: str, ledger_dsn: str, lease_seconds: float, extra: Mapping[str, str] | None
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRSCHED_")}
    env.update(
        {
            "FAIRSCHED_DATABASE_URL": worker_dsn,
            LEDGER_URL_ENV: ledger_dsn,
            "FAIRSCHED_POLL_INTERVAL_SECONDS": str(min(1.0, lease_seconds / 2)),
            "FAIRSCHED_RECOVERY_INTERVAL_SECONDS": str(min(1.0, lease_seconds / 2)),
            "FAIRSCHED_GRACE_PERIOD_SECONDS": "5",
        }
    )
    # The workers import the soak handler from the lab, which is no installed package.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(LAB_ROOT), os.environ.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.soak DSN SECONDS``: run a soak and print its figures."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m bench.soak DSN SECONDS", file=sys.stderr)
        return 2
    try:
        result = run_soak(args[0], float(args[1]), progress=lambda line: print(line, flush=True))
    except FairschedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(result.summary())
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
